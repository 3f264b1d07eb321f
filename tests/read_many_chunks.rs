//! Chunk descriptors stay within the process's budget: in a process limited to 64 open
//! descriptors (`RLIMIT_NOFILE`), a dataset of 10,000 chunks opens, reads random batches
//! byte-exact on every backend, from one thread and from eight at once, and passes a full
//! checksum pass and `zrecord verify`; and a snapshot taken before a rebalance keeps reading the
//! chunks it removed while other datasets' reads churn the budget.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod support;

use std::path::Path;
use std::process::Command;
use support::{bytes, Rec, Rng};
use zrecord::{Backend, Dataset, ReadConfig, Writer, WriterConfig};

const RECORDS: u64 = 10_000;
/// Records (and chunks) of the small dataset that is rebalanced under the old snapshot.
const SMALL: u64 = 8;
const LIMIT: &str = "64";
const CHILD: &str = "ZRECORD_MANY_CHUNKS_DIR";

/// Record `i`: a small compressible value and 1,200 random bytes, so a 2 KiB chunk holds one
/// record.
fn rec(i: u64) -> Rec {
    vec![bytes(100 + (i % 7) as usize, 2 * i), bytes(1200, 2 * i + 1)]
}

fn build(dir: &Path, n: u64) {
    let mut w = Writer::create(dir, &support::schema(2048), WriterConfig::default()).unwrap();
    for i in 0..n {
        w.append(&rec(i)).unwrap();
    }
    w.commit().unwrap();
}

fn limited(program: &Path) -> Command {
    let mut c = Command::new("prlimit");
    c.arg(format!("--nofile={LIMIT}:{LIMIT}")).arg(program);
    c
}

#[test]
fn ten_thousand_chunks_read_under_64_descriptors() {
    let tmp = support::scratch();
    let dir = tmp.path().join("ds");
    build(&dir, RECORDS);
    build(&tmp.path().join("small"), SMALL);
    let chunks = std::fs::read_dir(dir.join("chunk")).unwrap().count();
    assert!(chunks >= 10_000, "only {chunks} chunk files");

    // This test binary again, running only the child below, under the limit.
    let me = std::env::current_exe().unwrap();
    let out = limited(&me)
        .args([
            "--exact",
            "child_reads_every_backend",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, &dir)
        .output()
        .expect("run prlimit (util-linux) to start the child under RLIMIT_NOFILE=64");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child failed:\n{log}");
    assert!(
        log.contains("child: every backend read"),
        "child did not run:\n{log}"
    );

    let out = limited(Path::new(env!("CARGO_BIN_EXE_zrecord")))
        .arg("verify")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "zrecord verify under RLIMIT_NOFILE=64:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What this process's descriptors name (`readlink` of `/proc/self/fd/*`).
fn open_files() -> Vec<String> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|p| p.to_string_lossy().into_owned())
        .collect()
}

/// The child: run by the test above under the limit; does nothing when run on its own.
#[test]
fn child_reads_every_backend() {
    let Some(dir) = std::env::var_os(CHILD) else {
        return;
    };
    let dir = Path::new(&dir);
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    assert!(line.contains(&format!(" {LIMIT} ")), "{line}");
    assert!(zrecord::diagnostics::descriptor_budget() <= 16);

    let configs = [
        ReadConfig::default().with_backend(Backend::Uring),
        ReadConfig::default().with_backend(Backend::Psync),
        ReadConfig::default().with_backend(Backend::Mmap),
        ReadConfig::default().with_backend(Backend::Auto),
        ReadConfig::default().with_direct_io(true),
    ];
    for cfg in configs {
        let ds = Dataset::open_with(dir, cfg.clone()).unwrap();
        assert_eq!(ds.len(), RECORDS);
        let mut r = Rng(7);
        for _ in 0..20 {
            let idx: Vec<u64> = (0..256).map(|_| r.below(RECORDS)).collect();
            let b = ds.gather_blocking(&idx).unwrap();
            for (k, &i) in idx.iter().enumerate() {
                let want = rec(i);
                for (f, v) in want.iter().enumerate() {
                    assert!(
                        b.get(k, f).unwrap() == &v[..],
                        "{cfg:?} record {i} field {f}"
                    );
                }
            }
        }
    }
    // Every record, every checksum, in index order (a verify pass through the library).
    let ds = std::sync::Arc::new(Dataset::open(dir).unwrap());
    let all: Vec<u64> = (0..RECORDS).collect();
    for batch in all.chunks(1000) {
        ds.gather_blocking(batch).unwrap();
    }
    // Eight threads at once: the descriptors jobs hold in flight are bounded too.
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let ds = std::sync::Arc::clone(&ds);
            std::thread::spawn(move || {
                let mut r = Rng(t + 100);
                for _ in 0..30 {
                    let idx: Vec<u64> = (0..256).map(|_| r.below(RECORDS)).collect();
                    let b = ds.gather_blocking(&idx).unwrap();
                    assert!(b.get(7, 1).unwrap() == &rec(idx[7])[1][..]);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // A snapshot of the small dataset taken before its rebalance keeps reading the chunks the
    // rebalance removed, however much the big dataset's reads churn the budget.
    let small = dir.parent().unwrap().join("small");
    let old = Dataset::open(&small).unwrap().snapshot();
    let idx: Vec<u64> = (0..SMALL).collect();
    old.gather_with(&idx, &ReadConfig::default()).unwrap();
    // (A record rewritten with its own bytes first: a rebalance with no dead bytes to reclaim
    // would rewrite nothing.)
    let mut w = Writer::open(&small, WriterConfig::default()).unwrap();
    w.modify(0, "b", &rec(0)[1]).unwrap();
    w.commit().unwrap();
    assert!(w.rebalance().unwrap().rewritten);
    drop(w);
    // A new writer removes the chunks the rebalance stopped naming: the old snapshot's
    // descriptors are now the only way to their bytes.
    drop(Writer::open(&small, WriterConfig::default()).unwrap());
    let removed = || {
        open_files()
            .into_iter()
            .filter(|p| p.contains("/small/chunk/") && p.ends_with(" (deleted)"))
            .count()
    };
    assert!(
        removed() > 0,
        "the old snapshot holds no removed chunk open"
    );
    // The churn reads through the pread pool (no mapping), so the budget must close
    // descriptors: those of the big dataset, never the removed chunks' ones.
    let churn =
        Dataset::open_with(dir, ReadConfig::default().with_backend(Backend::Psync)).unwrap();
    let big = || {
        let mut v: Vec<String> = open_files()
            .into_iter()
            .filter(|p| p.contains("/ds/chunk/"))
            .collect();
        v.sort();
        v
    };
    let mut r = Rng(9);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..20 {
        let idx: Vec<u64> = (0..256).map(|_| r.below(RECORDS)).collect();
        churn.gather_blocking(&idx).unwrap();
        seen.extend(big());
    }
    let budget = zrecord::diagnostics::descriptor_budget();
    assert!(
        seen.len() > 2 * budget,
        "the churn held only {} chunk files over its batches: nothing was closed",
        seen.len()
    );
    assert!(big().len() <= budget, "{} chunk files open", big().len());
    for cfg in [
        ReadConfig::default().with_backend(Backend::Psync),
        ReadConfig::default().with_backend(Backend::Mmap),
        ReadConfig::default().with_direct_io(true),
    ] {
        let b = old.gather_with(&idx, &cfg).unwrap();
        for i in 0..SMALL {
            assert!(
                b.get(i as usize, 1).unwrap() == &rec(i)[1][..],
                "{cfg:?} record {i}"
            );
        }
    }
    println!("child: every backend read 10,000 chunks under RLIMIT_NOFILE={LIMIT}");
}
