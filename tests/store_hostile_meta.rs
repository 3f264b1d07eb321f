//! A `meta.json` that passes its checksum but lies (lengths that wrap, no chunks listed, the
//! last generation) and a directory that is not a dataset never make a writer or a reader
//! panic, destroy committed bytes or leave files behind: each is a typed error, and the files on
//! disk are as they were.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod support;

use std::path::Path;
use support::tree;
use zrecord::diagnostics::Meta;
use zrecord::{DType, Dataset, Error, Field, Schema, Writer, WriterConfig};

/// A committed dataset of 300 records over a few chunks.
fn dataset(dir: &Path) {
    let schema = Schema::new()
        .field(Field::new("a", DType::U8))
        .chunk_size_bytes(64 << 10);
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    for i in 0..300u32 {
        w.append(&[vec![i as u8; 1000]]).unwrap();
    }
    w.commit().unwrap();
}

/// Rewrites `meta.json` with `edit` applied, with a valid checksum.
fn lie(dir: &Path, edit: impl FnOnce(&mut Meta)) {
    let path = dir.join("meta.json");
    let mut meta = Meta::decode(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut meta);
    std::fs::write(&path, meta.encode()).unwrap();
}

#[test]
fn a_table_length_that_wraps_is_refused_and_truncates_nothing() {
    for patches in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ds");
        dataset(&dir);
        // table_len × 24 (or patch_len × 24) wraps past 2^64 to a small number.
        let wrap = u64::MAX / 24 + 2;
        lie(&dir, |m| match patches {
            false => m.fields[0].table.table_len = wrap,
            true => m.fields[0].table.patch_len = wrap,
        });
        let before = tree(&dir);
        let e = Writer::open(&dir, WriterConfig::default()).unwrap_err();
        assert!(matches!(e, Error::MetaCorrupt { .. }), "{e}");
        let e = Dataset::open(&dir).unwrap_err();
        assert!(matches!(e, Error::MetaCorrupt { .. }), "{e}");
        assert!(tree(&dir) == before, "files changed");
    }
}

#[test]
fn a_meta_listing_no_chunks_is_refused_and_deletes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    dataset(&dir);
    lie(&dir, |m| m.chunks.clear());
    let before = tree(&dir);
    let e = Writer::open(&dir, WriterConfig::default()).unwrap_err();
    assert!(matches!(e, Error::MetaCorrupt { .. }), "{e}");
    assert!(e.to_string().contains("does not list"), "{e}");
    assert!(tree(&dir) == before, "a refused open changed the files");
}

#[test]
fn the_last_generation_refuses_the_next_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    dataset(&dir);
    lie(&dir, |m| m.generation = u64::MAX);
    let before = std::fs::read(dir.join("meta.json")).unwrap();
    let mut w = Writer::open(&dir, WriterConfig::default()).unwrap();
    w.append(&[vec![7u8; 10]]).unwrap();
    let e = w.commit().unwrap_err();
    assert!(
        matches!(e, Error::TooManyCommits { generation } if generation == u64::MAX),
        "{e}"
    );
    drop(w);
    assert_eq!(std::fs::read(dir.join("meta.json")).unwrap(), before);
    let ds = Dataset::open(&dir).unwrap();
    assert_eq!((ds.len(), ds.generation()), (300, u64::MAX));
}

#[test]
fn a_directory_that_is_not_a_dataset_is_named_and_left_as_it_was() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("plain");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), b"mine").unwrap();
    let before = tree(&dir);
    let e = Writer::open(&dir, WriterConfig::default()).unwrap_err();
    assert!(matches!(e, Error::NotADataset { .. }), "{e}");
    assert!(
        tree(&dir) == before,
        "a writer.lock or other file was left behind"
    );
    let e = Writer::open(tmp.path().join("missing"), WriterConfig::default()).unwrap_err();
    assert!(matches!(e, Error::NotADataset { .. }), "{e}");
    assert!(!tmp.path().join("missing").exists());
}

#[test]
fn out_of_range_deflate_levels_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    dataset(&dir);
    for level in [0, 13, -1, 1000, i32::MIN] {
        let e = Writer::open(&dir, WriterConfig::default().deflate_level(level)).unwrap_err();
        assert!(
            matches!(e, Error::InvalidConfig { ref reason } if reason.contains("deflate_level")),
            "{level}: {e}"
        );
        let e = Writer::create(
            tmp.path().join(format!("new{level}")),
            &Schema::new().field(Field::new("a", DType::U8)),
            WriterConfig::default().deflate_level(level),
        )
        .unwrap_err();
        assert!(matches!(e, Error::InvalidConfig { .. }), "{level}: {e}");
    }
    for level in [1, 6, 12] {
        drop(Writer::open(&dir, WriterConfig::default().deflate_level(level)).unwrap());
    }
}
