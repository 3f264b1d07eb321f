//! A snapshot whose chunk descriptor the budget closed, reopening a chunk whose id a later
//! commit reused for another file (a rebalance removed it, a new writer appended), gets
//! `ChunkGone` (or its own bytes, where it still maps the removed file), on every backend, with
//! checksums on and off: never the new file's bytes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod support;

use std::path::Path;
use std::process::Command;
use support::{bytes, Rec, Rng};
use zrecord::{Backend, Dataset, Error, ReadConfig, Writer, WriterConfig};

/// Chunks of the dataset whose reads churn the descriptor budget.
const CHURN: u64 = 400;
/// Chunks (one record each) of the dataset whose ids are reused.
const SMALL: u64 = 8;
const LIMIT: &str = "64";
const CHILD: &str = "ZRECORD_ID_REUSE_DIR";

/// Record `i` with salt `s`: 1,200 bytes, so a 2 KiB chunk holds one record.
fn rec(i: u64, s: u64) -> Rec {
    vec![bytes(10, 2 * i + s), bytes(1200, 2 * i + 1 + s * 7919)]
}

fn build(dir: &Path, n: u64, salt: u64) {
    let mut w = Writer::create(dir, &support::schema(2048), WriterConfig::default()).unwrap();
    for i in 0..n {
        w.append(&rec(i, salt)).unwrap();
    }
    w.commit().unwrap();
}

/// Paths of the files this process holds open under `dir`.
fn open_under(dir: &Path) -> Vec<String> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|p| p.to_string_lossy().into_owned())
        .filter(|p| p.starts_with(&*dir.to_string_lossy()))
        .collect()
}

#[test]
fn a_reused_chunk_id_is_chunk_gone_under_a_small_descriptor_budget() {
    let tmp = support::scratch();
    build(&tmp.path().join("churn"), CHURN, 0);
    let me = std::env::current_exe().unwrap();
    let out = Command::new("prlimit")
        .arg(format!("--nofile={LIMIT}:{LIMIT}"))
        .arg(&me)
        .args([
            "--exact",
            "child_reopens_reused_ids",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, tmp.path())
        .output()
        .unwrap();
    assert!(
        out.status.success()
            && String::from_utf8_lossy(&out.stdout).contains("child: every reopen was ChunkGone"),
        "the child under RLIMIT_NOFILE={LIMIT} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The child: run by the test above under the limit; does nothing when run on its own.
#[test]
fn child_reopens_reused_ids() {
    let Some(root) = std::env::var_os(CHILD) else {
        return;
    };
    let root = Path::new(&root);
    let churn = Dataset::open_with(
        root.join("churn"),
        ReadConfig::default().with_backend(Backend::Psync),
    )
    .unwrap();
    let mut r = Rng(3);
    let mut churn_once = || {
        for _ in 0..10 {
            let idx: Vec<u64> = (0..128).map(|_| r.below(CHURN)).collect();
            churn.gather_blocking(&idx).unwrap();
        }
    };
    let idx: Vec<u64> = (0..SMALL).collect();
    let mut k = 0;
    let mut gone = 0;
    for backend in [Backend::Uring, Backend::Psync, Backend::Mmap, Backend::Auto] {
        for verify in [true, false] {
            k += 1;
            let small = root.join(format!("small-{k}"));
            build(&small, SMALL, 0);
            let cfg = ReadConfig::default()
                .with_backend(backend)
                .with_verify_checksums(verify);
            let old = Dataset::open_with(&small, cfg.clone()).unwrap().snapshot();
            let b = old.gather_with(&idx, &cfg).unwrap();
            assert!(b.get(3, 1).unwrap() == &rec(3, 0)[1][..]);
            // The churn closes the snapshot's descriptors (its files are still linked).
            churn_once();
            assert!(
                open_under(&small).is_empty(),
                "{cfg:?}: the budget kept {:?} open",
                open_under(&small)
            );
            // Rebalance (ids 0-7 unreferenced), then a new writer removes them and reuses the
            // ids for new files with other bytes at the same offsets.
            // (A record rewritten with its own bytes first: a rebalance with no dead bytes to
            // reclaim would rewrite nothing.)
            let mut w = Writer::open(&small, WriterConfig::default()).unwrap();
            w.modify(0, "b", &rec(0, 0)[1]).unwrap();
            w.commit().unwrap();
            assert!(w.rebalance().unwrap().rewritten);
            drop(w);
            let mut w = Writer::open(&small, WriterConfig::default()).unwrap();
            for i in 0..SMALL {
                w.append(&rec(i, 1)).unwrap();
            }
            w.commit().unwrap();
            drop(w);
            assert!(small.join("chunk").join("00000.zr").exists());
            // `ChunkGone`, or the snapshot's own bytes where it still holds a mapping of the
            // removed files (mmap): never the new files' bytes.
            match old.gather_with(&idx, &cfg) {
                Err(Error::ChunkGone { .. }) => gone += 1,
                Err(e) => panic!("{cfg:?}: expected ChunkGone, got {e}"),
                Ok(b) => {
                    for i in 0..SMALL {
                        assert!(
                            b.get(i as usize, 1).unwrap() == &rec(i, 0)[1][..],
                            "{cfg:?}: the old snapshot read record {i} from a reused id"
                        );
                    }
                }
            }
        }
    }
    // io_uring and the pread pool reopen by path.
    assert!(gone >= 4, "only {gone} reopens were ChunkGone");
    println!("child: every reopen was ChunkGone");
}
