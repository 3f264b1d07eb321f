//! A part a manifest names is immutable: a `Writer` (and so a rebalance, from the library or
//! `zrecord rebalance`) opened on it is refused with [`Error::PartCommitted`] naming the part
//! and its collection, before anything changes, and the collection keeps reading. A part under
//! `parts/` that no manifest names yet may still be written, and committed after.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/parts.rs"]
mod parts;

use std::path::Path;
use std::process::Command;
use zrecord::collection::{commit, CommitOptions};
use zrecord::{DType, Dataset, Error, Writer, WriterConfig};

fn make(dir: &Path, name: &str) {
    parts::write(&dir.join(name), DType::Bytes, None, 4, |i| {
        format!("{name}/{i}").into_bytes()
    });
}

#[test]
fn a_committed_part_refuses_a_writer_and_a_rebalance() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("c.zc");
    make(tmp.path(), "p");
    commit(&root, &[tmp.path().join("p")], CommitOptions::new()).unwrap();
    let part = root.join("parts").join("p");
    let before = parts::records(&Dataset::open(&root).unwrap());
    let meta_before = std::fs::read(part.join("meta.json")).unwrap();

    let err = Writer::open(&part, WriterConfig::default()).unwrap_err();
    match &err {
        Error::PartCommitted {
            part: id,
            path,
            collection,
        } => {
            assert_eq!(id, "p");
            assert_eq!(path, &part);
            assert_eq!(collection, &root.canonicalize().unwrap());
        }
        other => panic!("expected PartCommitted, got {other}"),
    }

    let out = Command::new(env!("CARGO_BIN_EXE_zrecord"))
        .args(["rebalance", part.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("immutable") && stderr.contains("c.zc"),
        "{stderr}"
    );

    assert_eq!(std::fs::read(part.join("meta.json")).unwrap(), meta_before);
    assert_eq!(parts::records(&Dataset::open(&root).unwrap()), before);
}

#[test]
fn a_part_no_manifest_names_yet_can_be_written_then_committed() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("c.zc");
    make(tmp.path(), "first");
    commit(&root, &[tmp.path().join("first")], CommitOptions::new()).unwrap();
    // A task writing its part in place under parts/.
    make(&root.join("parts"), "in-place");
    let part = root.join("parts").join("in-place");
    let mut w = Writer::open(&part, WriterConfig::default()).unwrap();
    w.append(&[b"in-place/4".as_slice()]).unwrap();
    w.commit().unwrap();
    drop(w);
    commit(&root, &[&part], CommitOptions::new()).unwrap();
    assert_eq!(Dataset::open(&root).unwrap().len(), 9);
    assert!(matches!(
        Writer::open(&part, WriterConfig::default()),
        Err(Error::PartCommitted { .. })
    ));
}
