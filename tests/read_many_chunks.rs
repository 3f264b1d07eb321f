//! A dataset of 10,000 chunks opens, reads random batches byte-exact on every backend and
//! passes a full checksum pass and `zrecord verify` in a process limited to 64 open
//! descriptors (`RLIMIT_NOFILE`): chunk files open lazily and close least-recently-used.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod support;

use std::path::Path;
use std::process::Command;
use support::{bytes, Rec, Rng};
use zrecord::{Backend, Dataset, ReadConfig, Writer, WriterConfig};

const RECORDS: u64 = 10_000;
const LIMIT: &str = "64";
const CHILD: &str = "ZRECORD_MANY_CHUNKS_DIR";

/// Record `i`: a small compressible value and 1,200 random bytes, so a 2 KiB chunk holds one
/// record.
fn rec(i: u64) -> Rec {
    vec![bytes(100 + (i % 7) as usize, 2 * i), bytes(1200, 2 * i + 1)]
}

fn build(dir: &Path) {
    let mut w = Writer::create(dir, &support::schema(2048), WriterConfig::default()).unwrap();
    for i in 0..RECORDS {
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
    build(&dir);
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
    assert!(zrecord::store::read::descriptor_budget() <= 16);

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
    let ds = Dataset::open(dir).unwrap();
    let all: Vec<u64> = (0..RECORDS).collect();
    for batch in all.chunks(1000) {
        ds.gather_blocking(batch).unwrap();
    }
    println!("child: every backend read 10,000 chunks under RLIMIT_NOFILE={LIMIT}");
}
