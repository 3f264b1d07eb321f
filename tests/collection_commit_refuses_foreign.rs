//! A commit moves only a part's own data: a part of another collection (it would leave that
//! collection unreadable), a part given by a symbolic link (the link would move, not the data)
//! and a part holding a symbolic link are refused with a typed error naming them, and nothing
//! moves: both collections and the data read back as before.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/parts.rs"]
mod parts;

use std::path::{Path, PathBuf};
use zrecord::collection::{commit, CommitOptions};
use zrecord::{DType, Dataset, Error};

fn make(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    parts::write(&p, DType::Bytes, None, 3, |i| {
        format!("{name}/{i}").into_bytes()
    });
    p
}

#[test]
fn a_part_of_another_collection_is_refused_naming_both() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a.zc"), tmp.path().join("b.zc"));
    commit(&a, &[make(tmp.path(), "task-0")], CommitOptions::new()).unwrap();
    let before = parts::records(&Dataset::open(&a).unwrap());
    let part = a.join("parts").join("task-0");
    // By its path, and by a relative path with `..` in it.
    let roundabout = a.join("parts").join("..").join("parts").join("task-0");
    for given in [&part, &roundabout] {
        let err = commit(&b, &[given], CommitOptions::new()).unwrap_err();
        match &err {
            Error::PartOfAnotherCollection {
                part: p,
                collection,
                target,
            } => {
                assert_eq!(p, given);
                assert_eq!(collection, &a.canonicalize().unwrap());
                assert_eq!(target, &b);
            }
            other => panic!("expected PartOfAnotherCollection, got {other}"),
        }
        let text = err.to_string();
        assert!(text.contains("a.zc") && text.contains("b.zc"), "{text}");
    }
    assert_eq!(parts::records(&Dataset::open(&a).unwrap()), before);
    assert!(part.join("meta.json").exists());
    // A part under the collection's own parts/ is still committed in place.
    let own = make(&a.join("parts"), "task-1");
    commit(&a, &[&own], CommitOptions::new()).unwrap();
    assert_eq!(Dataset::open(&a).unwrap().len(), 6);
}

#[test]
fn a_part_given_by_a_symbolic_link_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let data = make(tmp.path(), "data");
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&data, &link).unwrap();
    let root = tmp.path().join("c");
    let err = commit(&root, &[&link], CommitOptions::new()).unwrap_err();
    match &err {
        Error::NotADataset { path, reason } => {
            assert_eq!(path, &link);
            assert!(reason.contains("symbolic link"), "{reason}");
        }
        other => panic!("expected NotADataset, got {other}"),
    }
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(Dataset::open(&data).unwrap().len(), 3);
}

#[test]
fn a_part_holding_a_symbolic_link_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let data = make(tmp.path(), "linked");
    // A chunk file replaced by a link to a copy kept elsewhere.
    let chunk = std::fs::read_dir(data.join("chunk"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let elsewhere = tmp.path().join("chunk-copy");
    std::fs::rename(&chunk, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &chunk).unwrap();
    let root = tmp.path().join("c");
    let err = commit(&root, &[&data], CommitOptions::new()).unwrap_err();
    match &err {
        Error::NotADataset { path, reason } => {
            assert_eq!(path, &chunk);
            assert!(reason.contains("symbolic link"), "{reason}");
        }
        other => panic!("expected NotADataset, got {other}"),
    }
    assert_eq!(Dataset::open(&data).unwrap().len(), 3);
}
