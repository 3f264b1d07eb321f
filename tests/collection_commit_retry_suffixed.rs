//! A commit cut short after placing a part under a suffixed id (its directory's name was taken)
//! completes on retry with that part, found by the record of where it came from (`_source`),
//! never by its plain id; a collection whose parts have no such record (written before it
//! existed) still opens and takes commits.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use zrecord::collection::{commit, CommitOptions, CommitStep};
use zrecord::{DType, Dataset, Field, Schema, Writer, WriterConfig};

/// A part at `dir` with `n` records, each naming `tag` and its index.
fn part(dir: &Path, tag: &str, n: u32) -> PathBuf {
    std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
    let schema = Schema::new().field(Field::new("x", DType::Bytes));
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    for i in 0..n {
        w.append(&[format!("{tag}/{i}").into_bytes()]).unwrap();
    }
    w.commit().unwrap();
    dir.to_path_buf()
}

/// Every record of the collection at `root`, as text.
fn records(root: &Path) -> Vec<String> {
    let ds = Dataset::open(root).unwrap();
    let all: Vec<u64> = (0..ds.len()).collect();
    let batch = ds.gather_blocking(&all).unwrap();
    (0..all.len())
        .map(|k| String::from_utf8(batch.get(k, 0).unwrap().to_vec()).unwrap())
        .collect()
}

fn expected(parts: &[(&str, u32)]) -> Vec<String> {
    parts
        .iter()
        .flat_map(|(tag, n)| (0..*n).map(move |i| format!("{tag}/{i}")))
        .collect()
}

/// Commits `parts` to `root`, cut short (a panic in the step hook: the process goes on, nothing
/// of the commit runs further) right after its first part is placed.
fn commit_cut_short_after_placing(root: &Path, parts: &[PathBuf]) {
    let options = CommitOptions::new().on_step(|s| {
        if matches!(s, CommitStep::PartPlaced { .. }) {
            panic!("cut short");
        }
    });
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        commit(root, parts, options)
    }));
    assert!(r.is_err(), "the commit was not cut short: {r:?}");
}

#[test]
fn a_retry_finds_its_part_under_the_suffixed_id() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("c");
    let a = part(&tmp.path().join("a/p"), "a", 6);
    commit(&root, &[&a], CommitOptions::default()).unwrap();

    // Another directory named p: its id takes a suffix; the commit dies before its manifest.
    let b = part(&tmp.path().join("b/p"), "b", 4);
    commit_cut_short_after_placing(&root, std::slice::from_ref(&b));
    assert!(!b.exists(), "the part was moved");
    assert_eq!(records(&root), expected(&[("a", 6)]));

    // The retry takes the part it placed, not the committed one under the plain id.
    let r = commit(&root, &[&b], CommitOptions::default()).unwrap();
    assert_eq!((r.number, r.parts, r.len), (2, 2, 10), "{r:?}");
    assert!(r.ids[0].starts_with("p-"), "{r:?}");
    assert_eq!(r.added, r.ids);
    assert_eq!(records(&root), expected(&[("a", 6), ("b", 4)]));

    // And a retry of the completed commit adds nothing.
    let again = commit(&root, &[&b], CommitOptions::default()).unwrap();
    assert_eq!((again.number, again.len), (2, 10), "{again:?}");
    assert!(again.added.is_empty(), "{again:?}");
    assert_eq!(again.ids, r.ids);
}

#[test]
fn a_retry_takes_the_newest_part_from_its_path() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("c");
    // The same path committed twice, a new dataset written there in between; the second
    // commit dies after placing its part.
    let p = tmp.path().join("src/p");
    part(&p, "first", 3);
    commit(&root, &[&p], CommitOptions::default()).unwrap();
    part(&p, "second", 5);
    commit_cut_short_after_placing(&root, std::slice::from_ref(&p));
    let r = commit(&root, &[&p], CommitOptions::default()).unwrap();
    assert_eq!((r.parts, r.len), (2, 8), "{r:?}");
    assert_eq!(records(&root), expected(&[("first", 3), ("second", 5)]));
}

#[test]
fn parts_without_a_source_record_still_open_and_take_commits() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("c");
    let a = part(&tmp.path().join("a/p"), "a", 2);
    commit(&root, &[&a], CommitOptions::default()).unwrap();
    // A collection written before the record existed.
    let record = root.join("parts/p/_source");
    assert!(record.is_file(), "a placed part holds its _source");
    std::fs::remove_file(&record).unwrap();
    assert_eq!(records(&root), expected(&[("a", 2)]));
    let b = part(&tmp.path().join("b/p"), "b", 3);
    let q = part(&tmp.path().join("b/q"), "q", 1);
    let r = commit(&root, &[&b, &q], CommitOptions::default()).unwrap();
    assert_eq!((r.parts, r.len), (3, 6), "{r:?}");
    assert_eq!(records(&root), expected(&[("a", 2), ("b", 3), ("q", 1)]));
}
