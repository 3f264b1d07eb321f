//! Memory holds to its budget: in a process of its own, a gather of 1,000,000 indices peaks at
//! its result (the slab, and 32 bytes of span and index per value) plus the bytes-in-flight
//! budget plus a fixed 64 MiB, on every backend; and a loader with 8 workers and batches of
//! 8,192 records peaks at its queues' batches (`8 · (worker_queue_size + 1) +
//! consumer_queue_size`) plus the same fixed overhead. Peak RSS is read from `/proc`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod support;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use support::Rng;
use zrecord::pipeline::{DatasetSource, Loader, PrefetchConfig};
use zrecord::{Backend, DType, Dataset, Field, ReadConfig, Schema, Writer, WriterConfig};

const RECORDS: u64 = 200_000;
const RECORD_BYTES: usize = 64;
const GATHER: usize = 1_000_000;
const FIXED: u64 = 64 << 20;
const CHILD: &str = "ZRECORD_MEMORY_CHILD";

/// `VmRSS` or `VmHWM` (peak) of this process, in bytes.
fn status(key: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with(key)).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

fn build(dir: &Path) {
    let schema = Schema::new().field(Field::new("v", DType::U8));
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    let rec: Vec<Vec<u8>> = (0..RECORDS).map(|i| vec![i as u8; RECORD_BYTES]).collect();
    w.append_many(&rec.iter().map(|r| [&r[..]]).collect::<Vec<_>>())
        .unwrap();
    w.commit().unwrap();
}

/// Runs `test` of this binary in a child process with `CHILD=what` and the dataset at `dir`.
fn child(test: &str, what: &str, dir: &Path) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD, what)
        .env("ZRECORD_MEMORY_DIR", dir)
        .output()
        .unwrap();
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what}: child failed\n{log}");
    assert!(
        log.contains("within budget"),
        "{what}: child did not run\n{log}"
    );
    log
}

#[test]
fn a_million_index_gather_and_a_loader_stay_within_budget() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    build(&dir);
    for backend in ["uring", "psync", "mmap", "auto"] {
        let log = child("child_gathers", backend, &dir);
        println!(
            "{}",
            log.lines().find(|l| l.contains("within budget")).unwrap()
        );
    }
    let log = child("child_loads", "loader", &dir);
    println!(
        "{}",
        log.lines().find(|l| l.contains("within budget")).unwrap()
    );
}

fn child_dir() -> Option<(String, std::path::PathBuf)> {
    let what = std::env::var(CHILD).ok()?;
    let dir = std::env::var_os("ZRECORD_MEMORY_DIR")?;
    Some((what, dir.into()))
}

/// Child: one gather of 1,000,000 random indices on the backend named in `CHILD`.
#[test]
fn child_gathers() {
    let Some((backend, dir)) = child_dir() else {
        return;
    };
    let backend: Backend = backend.parse().unwrap();
    let cfg = ReadConfig::default().with_backend(backend);
    let ds = Dataset::open_with(&dir, cfg.clone()).unwrap();
    // Start the engine's threads and map the tables before the baseline.
    ds.gather_blocking(&[0, 1, 2]).unwrap();
    let mut r = Rng(5);
    let idx: Vec<u64> = (0..GATHER).map(|_| r.below(RECORDS)).collect();
    let base = status("VmRSS:");
    let b = ds.gather_blocking(&idx).unwrap();
    assert_eq!(b.len(), GATHER);
    let peak = status("VmHWM:");
    let slab = (GATHER * RECORD_BYTES.next_multiple_of(64)) as u64;
    let result = slab + 32 * GATHER as u64;
    // Through the mapping, the chunk's pages the gather touches count in RSS too.
    let mapped = match backend {
        Backend::Mmap | Backend::Auto => RECORDS * RECORD_BYTES as u64,
        _ => 0,
    };
    let budget = result + cfg.max_bytes_in_flight() as u64 + FIXED + mapped;
    let grown = peak.saturating_sub(base);
    assert!(
        grown <= budget,
        "{backend}: grew {} MiB, budget {} MiB",
        grown >> 20,
        budget >> 20
    );
    println!(
        "{backend}: 1,000,000-index gather grew {} MiB, within budget {} MiB (result {} MiB)",
        grown >> 20,
        budget >> 20,
        result >> 20
    );
}

/// Child: a loader with 8 workers and batches of 8,192 records, 200 batches.
#[test]
fn child_loads() {
    let Some((_, dir)) = child_dir() else {
        return;
    };
    let ds = Dataset::open(&dir).unwrap();
    ds.gather_blocking(&[0, 1, 2]).unwrap();
    let batch = 8192u64;
    let (workers, wq, cq) = (8usize, 2usize, 2usize);
    let base = status("VmRSS:");
    let mut loader = Loader::builder(Arc::new(DatasetSource::new(&ds)))
        .seed(3)
        .batch_size(batch)
        .prefetch(
            PrefetchConfig::default()
                .num_workers(workers)
                .worker_queue_size(wq)
                .consumer_queue_size(cq),
        )
        .build()
        .unwrap();
    let mut n = 0;
    futures::executor::block_on(async {
        while let Some(b) = loader.next().await {
            b.unwrap();
            n += 1;
            if n == 200 {
                break;
            }
        }
    });
    drop(loader);
    let peak = status("VmHWM:");
    // A batch: its slab, and per value a span and an index.
    let batch_bytes = batch * (RECORD_BYTES.next_multiple_of(64) as u64 + 32);
    let batches = (workers * (wq + 1) + cq) as u64;
    // Worker threads' stacks and each worker's part in flight count in the fixed overhead;
    // the mapped pages of the dataset may count too (auto reads warm data through the mapping).
    let budget = batches * batch_bytes + FIXED + RECORDS * RECORD_BYTES as u64;
    let grown = peak.saturating_sub(base);
    assert!(
        grown <= budget,
        "loader: grew {} MiB, budget {} MiB",
        grown >> 20,
        budget >> 20
    );
    println!(
        "loader: 8 workers, batches of 8,192: grew {} MiB, within budget {} MiB ({} batches of {} KiB)",
        grown >> 20,
        budget >> 20,
        batches,
        batch_bytes >> 10
    );
}
