//! `refresh` never misses a dataset or collection deleted and created again at the same path
//! with the same generation (manifest number), lengths and part ids: it reports the change and
//! the handle reads the new records, never the deleted ones.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/parts.rs"]
mod parts;

use std::path::Path;

use zrecord::collection::{commit, CommitOptions};
use zrecord::{DType, Dataset};

const N: u32 = 50;

/// Record `i` of version `v` of part `p`.
fn record(v: u8, p: u8, i: u32) -> Vec<u8> {
    vec![v.wrapping_mul(100).wrapping_add(p).wrapping_add(i as u8); 16]
}

fn records(v: u8, p: u8) -> Vec<Vec<u8>> {
    (0..N).map(|i| record(v, p, i)).collect()
}

/// A collection at `root` of parts `task-0` and `task-1`, version `v` of their records,
/// committed as manifest 1.
fn collection(root: &Path, v: u8, scratch: &Path) {
    // The parts take their directory names as ids: the same ids in both versions.
    let named: Vec<std::path::PathBuf> = (0..2u8)
        .map(|p| {
            let dir = scratch.join(format!("task-{p}"));
            parts::write(&dir, DType::U8, None, N, |i| record(v, p, i));
            dir
        })
        .collect();
    let report = commit(root, &named, CommitOptions::default()).unwrap();
    assert_eq!(report.number, 1);
    assert_eq!(report.ids, ["task-0", "task-1"]);
}

#[test]
fn a_recreated_dataset_is_refreshed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    parts::write(&dir, DType::U8, None, N, |i| record(1, 0, i));
    let ds = Dataset::open(&dir).unwrap();
    assert_eq!(parts::records(&ds), records(1, 0));
    let generation = ds.snapshot().generation();

    std::fs::remove_dir_all(&dir).unwrap();
    parts::write(&dir, DType::U8, None, N, |i| record(2, 0, i));
    assert_eq!(
        Dataset::open(&dir).unwrap().snapshot().generation(),
        generation
    );
    assert!(ds.refresh().unwrap(), "the re-created dataset was not seen");
    assert_eq!(parts::records(&ds), records(2, 0));
    assert!(!ds.refresh().unwrap(), "nothing new the second time");
}

#[test]
fn a_recreated_collection_is_refreshed() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("train.zc");
    collection(&root, 1, &tmp.path().join("v1"));
    let ds = Dataset::open(&root).unwrap();
    assert!(ds.snapshot().is_collection());
    let want1: Vec<Vec<u8>> = records(1, 0).into_iter().chain(records(1, 1)).collect();
    assert_eq!(parts::records(&ds), want1);
    assert!(!ds.refresh().unwrap(), "nothing new yet");

    // Deleted, and committed again: manifest 1, the same part ids, lengths and generations.
    std::fs::remove_dir_all(&root).unwrap();
    collection(&root, 2, &tmp.path().join("v2"));
    assert!(
        ds.refresh().unwrap(),
        "the re-created collection was not seen"
    );
    assert_eq!(ds.snapshot().generation(), 1);
    let want2: Vec<Vec<u8>> = records(2, 0).into_iter().chain(records(2, 1)).collect();
    assert_eq!(parts::records(&ds), want2);
    assert!(!ds.refresh().unwrap(), "nothing new the second time");
}
