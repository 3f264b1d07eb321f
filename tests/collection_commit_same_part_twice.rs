//! A part given twice in one commit (by the same path) lands once, locally and on an object
//! store: the commit neither fails on the part's writer lock nor on the part having been moved
//! already, and the collection holds its records once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/s3.rs"]
mod s3;

use std::path::Path;

use zrecord::collection::{commit, commit_url, CommitOptions};
use zrecord::remote::{RemoteConfig, TransferOptions};
use zrecord::{DType, Dataset, Field, ReadConfig, Schema, Writer, WriterConfig};

/// A part at `dir/name` with 2 records naming it.
fn make(dir: &Path, name: &str) {
    let schema = Schema::new().field(Field::new("x", DType::Bytes));
    let mut w = Writer::create(dir.join(name), &schema, WriterConfig::default()).unwrap();
    for i in 0..2 {
        w.append(&[format!("{name}/{i}").into_bytes()]).unwrap();
    }
    w.commit().unwrap();
}

#[test]
fn a_local_part_given_twice_lands_once() {
    let tmp = tempfile::tempdir().unwrap();
    make(tmp.path(), "a");
    make(tmp.path(), "b");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let root = tmp.path().join("c");
    let r = commit(&root, &[&a, &b, &a], CommitOptions::default()).unwrap();
    assert_eq!(r.added, ["a", "b"]);
    let ds = Dataset::open(&root).unwrap();
    assert_eq!(ds.len(), 4);
    assert_eq!(&ds.get(2).unwrap()[0][..], b"b/0");
}

#[test]
fn a_local_part_given_twice_to_a_remote_collection_lands_once() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let url = server.url("colls/twice");
    let t = TransferOptions::default().store(server.options());
    make(tmp.path(), "a");
    make(tmp.path(), "b");
    let (a, b) = (
        tmp.path().join("a").display().to_string(),
        tmp.path().join("b").display().to_string(),
    );
    let r = commit_url(&url, &[&a, &b, &a], CommitOptions::default(), &t).unwrap();
    assert_eq!(r.added, ["a", "b"]);
    let remote = RemoteConfig::default()
        .store(server.options())
        .cache_dir(tmp.path().join("cache"));
    let ds = zrecord::remote::open(&url, ReadConfig::default(), remote).unwrap();
    assert_eq!(ds.len(), 4);
    assert_eq!(&ds.get(2).unwrap()[0][..], b"b/0");
}
