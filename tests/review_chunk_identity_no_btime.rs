//! Known gap, not fixed here: a chunk's identity (device, inode, birth time) names its file only
//! while a descriptor holds it. A snapshot whose descriptor the budget closed reopens the chunk
//! by path; a later file at that path that got the freed inode number passes the check where the
//! file system records no birth time, or where both were born in the same tick (ext4 and xfs
//! stamp birth times with the coarse clock, one jiffy; measured here, about 40% of the chunk
//! files a rebalance, a new writer and an append create reuse a freed inode number). With
//! checksums off the old snapshot then returns the new file's bytes.
//!
//! The test simulates the reuse exactly: the new chunk's bytes go into the removed chunk's inode
//! (kept alive by a hard link), which is what the reader sees when the allocator hands that
//! inode number to the new file within one birth-time tick. Run with `--ignored`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod support;

use std::io::Write;
use std::path::Path;
use std::process::Command;
use support::{bytes, Rec, Rng};
use zrecord::{Backend, Dataset, Error, ReadConfig, Writer, WriterConfig};

const CHURN: u64 = 400;
const SMALL: u64 = 8;
const LIMIT: &str = "64";
const CHILD: &str = "ZRECORD_NO_BTIME_DIR";

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

#[test]
#[ignore = "known gap: a reopened chunk's identity without a held descriptor (see the module doc)"]
fn a_reopened_chunk_whose_inode_was_reused_in_the_same_tick_is_never_read() {
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    build(&tmp.path().join("churn"), CHURN, 0);
    let me = std::env::current_exe().unwrap();
    let out = Command::new("prlimit")
        .arg(format!("--nofile={LIMIT}:{LIMIT}"))
        .arg(&me)
        .args([
            "--exact",
            "child_reopens",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, tmp.path())
        .output()
        .unwrap();
    assert!(
        out.status.success()
            && String::from_utf8_lossy(&out.stdout).contains("child: never the new bytes"),
        "child failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn child_reopens() {
    let Some(root) = std::env::var_os(CHILD) else {
        return;
    };
    let root = Path::new(&root);
    let churn = Dataset::open_with(
        root.join("churn"),
        ReadConfig::default().with_backend(Backend::Psync),
    )
    .unwrap();
    let small = root.join("small");
    build(&small, SMALL, 0);
    let cfg = ReadConfig::default()
        .with_backend(Backend::Psync)
        .with_verify_checksums(false);
    let old = Dataset::open_with(&small, cfg.clone()).unwrap().snapshot();
    assert!(old.gather_with(&[0], &cfg).unwrap().get(0, 1).unwrap() == &rec(0, 0)[1][..]);
    // The churn closes the old snapshot's descriptors.
    let mut r = Rng(3);
    for _ in 0..10 {
        let idx: Vec<u64> = (0..128).map(|_| r.below(CHURN)).collect();
        churn.gather_blocking(&idx).unwrap();
    }
    let held: Vec<_> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|p| p.starts_with(&small))
        .collect();
    assert!(held.is_empty(), "the budget kept {held:?} open");
    let chunk0 = small.join("chunk").join("00000.zr");
    let keep = small.join("keep0");
    std::fs::hard_link(&chunk0, &keep).unwrap();
    let mut w = Writer::open(&small, WriterConfig::default()).unwrap();
    w.rebalance().unwrap();
    drop(w);
    let mut w = Writer::open(&small, WriterConfig::default()).unwrap();
    for i in 0..SMALL {
        w.append(&rec(i, 1)).unwrap();
    }
    w.commit().unwrap();
    drop(w);
    // The new chunk 0, in the inode (and with the birth time) the removed one had.
    let new = std::fs::read(&chunk0).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&keep)
        .unwrap();
    f.write_all(&new).unwrap();
    f.sync_all().unwrap();
    drop(f);
    std::fs::rename(&keep, &chunk0).unwrap();
    match old.gather_with(&[0], &cfg) {
        Err(Error::ChunkGone { .. }) => {}
        Err(e) => panic!("expected ChunkGone, got {e}"),
        Ok(b) => assert!(
            b.get(0, 1).unwrap() == &rec(0, 0)[1][..],
            "the old snapshot read record 0 from the file that reused its chunk's inode"
        ),
    }
    println!("child: never the new bytes");
}
