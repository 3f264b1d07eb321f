//! `zrecord bench open`: what opening a dataset costs (wall time, resident memory), the first
//! random batch after it, random batches after that, and a full epoch of the shuffled sampler
//! over the dataset's length: the figures of issue #24 for a 100M-record dataset, locally and
//! on an object store (offset tables read on demand, or mirrored with `--mirror-tables`).

use super::{cpu_seconds, Rng};
use crate::Res;
use clap::Args;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Args, Clone)]
pub struct OpenArgs {
    /// The dataset directory, or its URL on an object store.
    pub(super) dir: PathBuf,
    /// Records per random batch.
    #[arg(long, default_value_t = 256)]
    pub(super) batch: usize,
    /// Random batches after the first (0: none).
    #[arg(long, default_value_t = 0)]
    pub(super) batches: usize,
    /// Mirror the offset tables whole at open (object stores), instead of reading them in
    /// pages on demand.
    #[arg(long)]
    pub(super) mirror_tables: bool,
    /// Range requests in flight per batch (object stores).
    #[arg(long, default_value_t = 32)]
    pub(super) requests: usize,
    /// Seed of the random indices.
    #[arg(long, default_value_t = 1)]
    pub(super) seed: u64,
    /// Also run one full epoch of the shuffled sampler over the dataset's length on this
    /// thread, every index summed, and report indices per second.
    #[arg(long)]
    pub(super) sampler_epoch: bool,
}

/// `VmRSS` and `VmHWM` of this process in bytes (0 where `/proc` cannot say).
fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (kib("VmRSS:"), kib("VmHWM:"))
}

pub(super) fn open(a: &OpenArgs) -> Res {
    let (rss_before, _) = rss();
    let remote = zrecord::remote::RemoteConfig::default()
        .requests_in_flight(a.requests)
        .mirror_tables(a.mirror_tables);
    let t = Instant::now();
    let ds = super::open_dataset(&a.dir, zrecord::ReadConfig::default(), remote)?;
    let open_s = t.elapsed().as_secs_f64();
    let (rss_open, hwm_open) = rss();
    let n = ds.len();
    if n == 0 || a.batch == 0 {
        return Err("nothing to read: empty dataset or --batch 0".into());
    }
    let mut rng = Rng(a.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let draw = |rng: &mut Rng| (0..a.batch).map(|_| rng.next() % n).collect::<Vec<u64>>();
    let first = draw(&mut rng);
    let t = Instant::now();
    let mut sink = ds.gather_blocking(&first)?.len() as u64;
    let first_s = t.elapsed().as_secs_f64();
    let remote_before = zrecord::diagnostics::remote_stats();
    let (t, cpu) = (Instant::now(), cpu_seconds());
    let mut lat = Vec::with_capacity(a.batches);
    for _ in 0..a.batches {
        let indices = draw(&mut rng);
        let b = Instant::now();
        sink ^= ds.gather_blocking(&indices)?.len() as u64;
        lat.push(b.elapsed().as_secs_f64() * 1e3);
    }
    let batches_s = t.elapsed().as_secs_f64();
    let batches_cpu = cpu_seconds() - cpu;
    lat.sort_by(f64::total_cmp);
    let now = zrecord::diagnostics::remote_stats();
    let (rss_end, hwm_end) = rss();
    let sampler = match a.sampler_epoch {
        false => serde_json::Value::Null,
        true => {
            let v = super::sampler::shuffled_epoch(n, a.seed, 0)?;
            sink ^= v
                .get("indices")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0)
                & 1;
            v
        }
    };
    let out = serde_json::json!({
        "records": n,
        "mirror_tables": a.mirror_tables,
        "open_seconds": open_s,
        "rss_before_open_bytes": rss_before,
        "rss_after_open_bytes": rss_open,
        "peak_rss_after_open_bytes": hwm_open,
        "first_batch_seconds": first_s,
        "batch": a.batch,
        "batches": a.batches,
        "batches_seconds": batches_s,
        "batches_cpu_seconds": batches_cpu,
        "records_per_s": if batches_s > 0.0 { (a.batches * a.batch) as f64 / batches_s } else { 0.0 },
        "p50_batch_ms": super::percentile(&lat, 0.5),
        "p99_batch_ms": super::percentile(&lat, 0.99),
        "requests": now.requests - remote_before.requests,
        "table_requests": now.table_requests - remote_before.table_requests,
        "table_bytes_fetched": now.table_bytes_fetched - remote_before.table_bytes_fetched,
        "rss_end_bytes": rss_end,
        "peak_rss_end_bytes": hwm_end,
        "sampler_epoch": sampler,
        "sink": sink & 1,
    });
    println!("{out}");
    Ok(())
}
