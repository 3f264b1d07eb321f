//! `Dataset::refresh` must never miss a commit because the new `meta.json` has the identity
//! (device, inode, birth time) of the one the handle read. ext4 and xfs hand a freed inode
//! number straight back (a commit frees the old `meta.json`'s inode; the next commit's
//! `meta.json.tmp` takes it), and birth times are coarse (one jiffy) or absent (file systems
//! without `btime`), so two commits later `meta.json` can carry the same identity.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::io::Write;
use std::path::Path;
use zrecord::{DType, Dataset, Field, Schema, Writer, WriterConfig};

fn create(dir: &Path, n: u64) {
    let schema = Schema::new()
        .field(Field::new("x", DType::U8))
        .chunk_size_bytes(1 << 20);
    let mut w = Writer::create(dir, &schema, WriterConfig::default().num_writers(1)).unwrap();
    for i in 0..n {
        w.append(&[vec![i as u8; 100]]).unwrap();
    }
    w.commit().unwrap();
}

fn append(dir: &Path, n: u64) {
    let mut w = Writer::open(dir, WriterConfig::default()).unwrap();
    for i in 0..n {
        w.append(&[vec![i as u8; 100]]).unwrap();
    }
    w.commit().unwrap();
}

/// The later commit's `meta.json` lands in the inode the handle's `meta.json` had (kept by a
/// hard link so it is the same inode with the same birth time): what inode reuse within one
/// birth-time tick, or on a file system without birth times, does.
#[test]
fn refresh_sees_a_commit_whose_meta_reuses_the_old_meta_identity() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    create(&dir, 10);
    let ds = Dataset::open(&dir).unwrap();
    assert_eq!(ds.len(), 10);
    let meta = dir.join("meta.json");
    let keep = dir.join("meta.keep");
    std::fs::hard_link(&meta, &keep).unwrap();
    append(&dir, 5);
    // The new commit's bytes, in the old commit's file (same dev, inode, birth time).
    let bytes = std::fs::read(&meta).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&keep)
        .unwrap();
    f.write_all(&bytes).unwrap();
    f.sync_all().unwrap();
    drop(f);
    std::fs::rename(&keep, &meta).unwrap();
    assert!(ds.refresh().unwrap(), "refresh missed the commit");
    assert_eq!(ds.len(), 15, "the handle still shows the old commit");
}

/// The same with real commits, as fast as they go: after every second commit, `meta.json`
/// may have the handle's identity again (it does here on ext4: inode numbers alternate).
#[test]
fn refresh_after_two_quick_commits_sees_the_second() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    create(&dir, 1);
    let ds = Dataset::open(&dir).unwrap();
    let mut len = 1;
    let mut same_identity = 0;
    for _ in 0..100 {
        let before = std::fs::metadata(dir.join("meta.json")).unwrap();
        append(&dir, 1);
        append(&dir, 1);
        len += 2;
        let after = std::fs::metadata(dir.join("meta.json")).unwrap();
        use std::os::unix::fs::MetadataExt;
        if before.ino() == after.ino() && before.created().ok() == after.created().ok() {
            same_identity += 1;
        }
        ds.refresh().unwrap();
        assert_eq!(
            ds.len(),
            len,
            "refresh missed two commits ({same_identity} identity repeats so far)"
        );
    }
    eprintln!("meta.json identity repeated {same_identity} times in 100");
}
