//! A commit refuses a part whose writer is open (`WriterBusy` naming the part's lock file) and
//! then moves, pushes and commits nothing; once the writer is closed, the same commit lands.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/s3.rs"]
mod s3;

use std::path::Path;

use zrecord::collection::{commit, commit_url, CommitOptions};
use zrecord::remote::{RemoteConfig, TransferOptions};
use zrecord::{DType, Dataset, Error, Field, ReadConfig, Schema, Writer, WriterConfig};

/// A part at `dir` with one committed record, its writer still open.
fn open_part(dir: &Path) -> Writer {
    let schema = Schema::new().field(Field::new("x", DType::Bytes));
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    w.append(&[b"one".as_slice()]).unwrap();
    w.commit().unwrap();
    w
}

#[test]
fn a_local_commit_refuses_a_part_being_written() {
    let tmp = tempfile::tempdir().unwrap();
    let (done, busy) = (tmp.path().join("done"), tmp.path().join("busy"));
    drop(open_part(&done));
    let writer = open_part(&busy);
    let root = tmp.path().join("c");
    match commit(&root, &[&done, &busy], CommitOptions::default()) {
        Err(Error::WriterBusy { path }) => assert!(path.starts_with(&busy), "{path:?}"),
        other => panic!("{other:?}"),
    }
    assert!(done.join("meta.json").exists() && busy.join("meta.json").exists());
    assert!(!root.join("parts/done").exists(), "a part was moved");
    drop(writer);
    let r = commit(&root, &[&done, &busy], CommitOptions::default()).unwrap();
    assert_eq!(r.added, ["done", "busy"]);
    assert_eq!(Dataset::open(&root).unwrap().len(), 2);
}

#[test]
fn a_remote_commit_refuses_a_part_being_written() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let url = server.url("colls/busy");
    let t = TransferOptions::default().store(server.options());
    let busy = tmp.path().join("busy");
    let writer = open_part(&busy);
    let part = busy.display().to_string();
    match commit_url(&url, &[&part], CommitOptions::default(), &t) {
        Err(Error::WriterBusy { path }) => assert!(path.starts_with(&busy), "{path:?}"),
        other => panic!("{other:?}"),
    }
    let remote = RemoteConfig::default()
        .store(server.options())
        .cache_dir(tmp.path().join("cache"));
    let opened = zrecord::remote::open(&url, ReadConfig::default(), remote.clone());
    assert!(
        matches!(opened, Err(Error::NotADataset { .. })),
        "{opened:?}"
    );
    drop(writer);
    commit_url(&url, &[&part], CommitOptions::default(), &t).unwrap();
    let ds = zrecord::remote::open(&url, ReadConfig::default(), remote).unwrap();
    assert_eq!(&ds.get(0).unwrap()[0][..], b"one");
}
