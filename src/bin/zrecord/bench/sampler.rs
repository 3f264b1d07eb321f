//! `zrecord bench sampler`: one full epoch of the shuffled sampler over `--len` indices on one
//! thread, through the batch path the loader's index chain calls (`Stage::get_strided`, blocks
//! of 4,096 positions). Issue #24's figure: ≥ 50M indices/s per core over 100M records. `bench
//! open --sampler-epoch` runs the same epoch over a dataset's length.

use super::cpu_seconds;
use crate::Res;
use clap::Args;
use std::time::Instant;
use zrecord::pipeline::{Sampler, SamplerConfig, SamplerMode, Stage};

#[derive(Args, Clone)]
pub struct SamplerArgs {
    /// The index space: one epoch is every index of `[0, len)` once.
    #[arg(long, default_value_t = 100_000_000)]
    pub(super) len: u64,
    /// The sampler's seed.
    #[arg(long, default_value_t = 1)]
    pub(super) seed: u64,
    /// Epochs to time (each its own permutation); the JSON has one entry per epoch.
    #[arg(long, default_value_t = 1)]
    pub(super) epochs: u64,
}

/// One shuffled epoch `epoch` over `[0, n)`, every index summed (the sum checks the epoch is a
/// permutation): indices, seconds, CPU seconds, indices per second.
pub(super) fn shuffled_epoch(n: u64, seed: u64, epoch: u64) -> zrecord::Result<serde_json::Value> {
    const BLOCK: u64 = 4096;
    let config = SamplerConfig::default()
        .mode(SamplerMode::Shuffled)
        .seed(seed)
        .epochs(None);
    let mut s = Sampler::new(n, config)?;
    let (t, cpu) = (Instant::now(), cpu_seconds());
    let mut sum = 0u64;
    let mut out = Vec::with_capacity(BLOCK as usize);
    let mut p = 0u64;
    while p < n {
        let count = BLOCK.min(n - p);
        out.clear();
        s.get_strided(epoch, p, 1, count as usize, &mut out)?;
        sum = out.iter().fold(sum, |acc, x| acc.wrapping_add(x.index));
        p += count;
    }
    let secs = t.elapsed().as_secs_f64();
    let expected = (u128::from(n) * u128::from(n.saturating_sub(1)) / 2) as u64;
    Ok(serde_json::json!({
        "indices": n,
        "epoch": epoch,
        "seconds": secs,
        "cpu_seconds": cpu_seconds() - cpu,
        "indices_per_s": n as f64 / secs,
        "sum_is_total": sum == expected,
    }))
}

pub(super) fn sampler(a: &SamplerArgs) -> Res {
    let epochs = (0..a.epochs)
        .map(|e| shuffled_epoch(a.len, a.seed, e))
        .collect::<zrecord::Result<Vec<_>>>()?;
    println!(
        "{}",
        serde_json::json!({ "len": a.len, "seed": a.seed, "epochs": epochs })
    );
    Ok(())
}
