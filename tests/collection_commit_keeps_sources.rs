//! A commit never removes a directory it was given unless it recognises it as what is left of
//! its own part (a directory holding other files is `NotADataset` and stays as it is), and never
//! takes one part for another because they hold the same bytes: two separate parts with equal
//! records are two parts, committed apart or together.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use zrecord::collection::{commit, CommitOptions};
use zrecord::{DType, Dataset, Error, Field, Schema, Writer, WriterConfig};

fn part(dir: &Path, n: u8) -> PathBuf {
    std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
    let schema = Schema::new().field(Field::new("x", DType::U8));
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    for i in 0..n {
        w.append(&[vec![i; 4]]).unwrap();
    }
    w.commit().unwrap();
    dir.to_path_buf()
}

#[test]
fn a_directory_that_is_not_a_dataset_is_refused_and_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("c");
    commit(
        &root,
        &[part(&tmp.path().join("a/data"), 3)],
        CommitOptions::default(),
    )
    .unwrap();
    // Another directory of the same name, holding the user's files and no meta.json.
    let other = tmp.path().join("b/data");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("precious.txt"), b"keep me").unwrap();
    let err = commit(&root, &[&other], CommitOptions::default()).unwrap_err();
    assert!(matches!(err, Error::NotADataset { .. }), "{err:?}");
    assert_eq!(
        std::fs::read(other.join("precious.txt")).unwrap(),
        b"keep me"
    );
    assert_eq!(Dataset::open(&root).unwrap().len(), 3);
}

#[test]
fn parts_with_equal_bytes_are_separate_parts() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("c");
    let d1 = part(&tmp.path().join("d1/p"), 6);
    let d2 = part(&tmp.path().join("d2/p"), 6);
    commit(&root, &[&d1], CommitOptions::default()).unwrap();
    let r = commit(&root, &[&d2], CommitOptions::default()).unwrap();
    assert_eq!((r.parts, r.len), (2, 12), "{r:?}");
    assert_eq!(Dataset::open(&root).unwrap().len(), 12);

    // In one commit too.
    let root = tmp.path().join("c2");
    let x1 = part(&tmp.path().join("x1/q"), 0);
    let x2 = part(&tmp.path().join("x2/q"), 0);
    let x3 = part(&tmp.path().join("x3/q"), 2);
    let x4 = part(&tmp.path().join("x4/q"), 2);
    let r = commit(&root, &[&x1, &x2, &x3, &x4], CommitOptions::default()).unwrap();
    assert_eq!((r.parts, r.len), (4, 4), "{r:?}");
}

#[test]
fn parts_with_equal_bytes_committed_at_the_same_time_are_separate_parts() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("c");
    commit(
        &root,
        &[part(&tmp.path().join("first/f"), 1)],
        CommitOptions::default(),
    )
    .unwrap();
    let d1 = part(&tmp.path().join("d1/p"), 6);
    let d2 = part(&tmp.path().join("d2/p"), 6);
    // A second committer takes an equal part of the same name while the first has placed its
    // own under parts/p and not written its manifest yet.
    let (root2, d2c) = (root.clone(), d2.clone());
    let options = CommitOptions::default().on_step(move |s| {
        if matches!(s, zrecord::collection::CommitStep::PartPlaced { .. }) {
            commit(&root2, &[&d2c], CommitOptions::default()).unwrap();
        }
    });
    commit(&root, &[&d1], options).unwrap();
    assert_eq!(Dataset::open(&root).unwrap().len(), 13);
}
