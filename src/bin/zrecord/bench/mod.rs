//! `zrecord bench`: throughput measurements (make a synthetic dataset, gather, loader).

mod gather;
mod loader;
mod make;
mod open;
mod sampler;
mod transform;

use crate::Res;
use clap::Subcommand;
use gather::{gather, GatherArgs};
use loader::{loader, LoaderArgs};
use make::{make, MakeArgs};
use open::{open, OpenArgs};
use sampler::{sampler, SamplerArgs};
use std::path::{Path, PathBuf};
use transform::{transform, TransformArgs};

#[derive(Subcommand)]
pub enum BenchCmd {
    /// Generate a synthetic dataset of `--records` records of `--record-bytes` bytes.
    Make(MakeArgs),
    /// Random batches over an existing dataset.
    Gather(GatherArgs),
    /// The full loader (shuffled sampler → shard 1/1 → optional bucket → batch → prefetch) over
    /// an existing dataset, compared with raw gathers on as many threads as it has workers.
    Loader(LoaderArgs),
    /// Opening a dataset (time, resident memory), its first random batch and random batches
    /// after it, and a full shuffled-sampler epoch over its length, as one JSON object.
    Open(OpenArgs),
    /// One full epoch of the shuffled sampler over `--len` indices on one thread, as JSON.
    Sampler(SamplerArgs),
    /// The transform stage's limit on one core: decode, random resized crop and flip of every
    /// image of a dataset in a tight loop on this thread, as JSON.
    Transform(TransformArgs),
}

/// Runs one bench subcommand.
pub fn run(cmd: &BenchCmd) -> Res {
    match cmd {
        BenchCmd::Make(a) => make(a),
        BenchCmd::Gather(a) => gather(a),
        BenchCmd::Loader(a) => loader(a),
        BenchCmd::Open(a) => open(a),
        BenchCmd::Sampler(a) => sampler(a),
        BenchCmd::Transform(a) => transform(a),
    }
}

/// Opens the dataset at `dir` (a directory, or an object store's URL read with `remote`).
fn open_dataset(
    dir: &Path,
    config: zrecord::ReadConfig,
    remote: zrecord::remote::RemoteConfig,
) -> zrecord::Result<zrecord::Dataset> {
    match dir.to_str().filter(|d| zrecord::remote::is_url(d)) {
        Some(url) => zrecord::remote::open(url, config, remote),
        None => zrecord::Dataset::open_with(dir, config),
    }
}

/// xorshift64. `benches/baselines/numpy_memmap.py` draws `bench gather`'s indices with the same
/// generator and seeding (`gather_on`, `bench_thread`): change them together.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

fn evict(dir: &Path) -> Res {
    for entry in walk(dir)? {
        zrecord::diagnostics::evict_page_cache(&entry)?;
    }
    Ok(())
}

fn walk(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            out.extend(walk(&p)?);
        } else {
            out.push(p);
        }
    }
    Ok(out)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or(0.0)
}

/// CPU seconds this process has used, all threads (user + system), from `/proc/self/stat`;
/// 0 where that cannot be read. Clock-tick resolution (10 ms): for runs of a second or more.
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which is in parentheses and may hold spaces): utime and
    // stime are the 12th and 13th.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}
