//! A dataset's attributes (format version 3) travel with it: pushed to an object store, the
//! dataset opened by URL and the one pulled back have the attributes the writer set, and a
//! later commit that removes them is what a reader of the store sees after the next push.
//! Against s3s-fs, started by the test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/s3.rs"]
mod s3;

use serde_json::json;
use zrecord::remote::{pull, push, RemoteConfig, TransferOptions};
use zrecord::{DType, Dataset, Field, ReadConfig, Schema, Writer, WriterConfig};

#[test]
fn attributes_survive_push_open_and_pull() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("src.zr");
    let schema = Schema::new()
        .field(Field::new("image", DType::Bytes))
        .field(Field::new("label", DType::I64).shape(vec![]));
    let mut w = Writer::create(&local, &schema, WriterConfig::default()).unwrap();
    for i in 0..20i64 {
        w.append(&[vec![i as u8; 10], i.to_le_bytes().to_vec()])
            .unwrap();
    }
    w.set_attribute("classes", json!(["cat", "dog"])).unwrap();
    w.set_attribute("source", json!({"images": 20})).unwrap();
    w.commit().unwrap();
    drop(w);

    let url = server.url("attrs");
    let opts = TransferOptions::default().store(server.options());
    push(&local, &url, &opts).unwrap();
    let remote = RemoteConfig::default().store(server.options());
    let want = Dataset::open(&local).unwrap().attributes();
    assert_eq!(want["classes"], json!(["cat", "dog"]));
    let opened = zrecord::remote::open(&url, ReadConfig::default(), remote.clone()).unwrap();
    assert_eq!(opened.attributes(), want);
    assert_eq!(opened.len(), 20);
    let back = tmp.path().join("back.zr");
    pull(&url, &back, &opts).unwrap();
    assert_eq!(Dataset::open(&back).unwrap().attributes(), want);

    // Removing them and pushing again: the store's readers see none.
    let mut w = Writer::open(&local, WriterConfig::default()).unwrap();
    w.remove_attribute("classes").unwrap();
    w.remove_attribute("source").unwrap();
    w.commit().unwrap();
    drop(w);
    push(&local, &url, &opts).unwrap();
    let opened = zrecord::remote::open(&url, ReadConfig::default(), remote).unwrap();
    assert!(opened.attributes().is_empty());
    assert_eq!(opened.len(), 20);
}
