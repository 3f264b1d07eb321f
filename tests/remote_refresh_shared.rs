//! `refresh` moves a dataset on an object store to the latest commit whatever else opened its
//! location meanwhile: another dataset sharing the location, or the location asked directly,
//! never makes a dataset believe it is already on the latest commit.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/s3.rs"]
mod s3;

use std::path::Path;
use std::sync::Arc;

use zrecord::remote::{open, push, RemoteConfig, TransferOptions};
use zrecord::{DType, Dataset, Field, ReadConfig, Schema, Writer, WriterConfig};

fn write(dir: &Path, from: u64, to: u64) {
    let mut w = if dir.exists() {
        Writer::open(dir, WriterConfig::default()).unwrap()
    } else {
        let schema = Schema::new().field(Field::new("x", DType::U8));
        Writer::create(dir, &schema, WriterConfig::default()).unwrap()
    };
    for i in from..to {
        w.append(&[vec![i as u8; 10]]).unwrap();
    }
    w.commit().unwrap();
}

#[test]
fn refresh_sees_a_new_commit_after_the_shared_location_opened_it() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("ds");
    let url = server.url("sets/shared");
    let publish = || {
        push(
            &local,
            &url,
            &TransferOptions::default().store(server.options()),
        )
        .unwrap();
    };
    write(&local, 0, 100);
    publish();
    let remote = RemoteConfig::default()
        .store(server.options())
        .cache_dir(tmp.path().join("cache"));
    let a = open(&url, ReadConfig::default(), remote).unwrap();
    assert_eq!(a.len(), 100);

    // A second commit, seen first through the location `a` shares with `b`.
    write(&local, 100, 150);
    publish();
    let b = Dataset::from_location(Arc::clone(a.location()), ReadConfig::default()).unwrap();
    assert_eq!(b.len(), 150);
    assert!(!b.refresh().unwrap(), "b already shows the latest commit");
    assert!(a.refresh().unwrap(), "a still shows the first commit");
    assert_eq!(a.len(), 150);

    // A third, seen first by asking the location itself.
    write(&local, 150, 170);
    publish();
    assert_eq!(a.location().snapshot().unwrap().len(), 170);
    assert!(a.refresh().unwrap());
    assert!(b.refresh().unwrap());
    assert_eq!((a.len(), b.len()), (170, 170));
    assert!(!a.refresh().unwrap());
}
