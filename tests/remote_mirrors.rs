//! The offset tables a remote dataset mirrors into the cache directory take the disk of the
//! latest commit's tables, however many commits were opened: a table several commits share is
//! stored once, and what the latest commit no longer names is removed. Against s3s-fs, started
//! by the test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/s3.rs"]
mod s3;

use std::path::Path;

use zrecord::remote::{push, RemoteConfig, TransferOptions};
use zrecord::{DType, Field, ReadConfig, Schema, Writer, WriterConfig};

/// Bytes of the files under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let m = e.metadata().unwrap();
        n += if m.is_dir() {
            bytes_under(&e.path())
        } else {
            m.len()
        };
    }
    n
}

#[test]
fn mirrors_hold_the_latest_tables_once() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("ds");
    let schema = Schema::new()
        .field(Field::new("a", DType::U8))
        .field(Field::new("b", DType::U8))
        .chunk_size_bytes(1 << 20);
    let n = 20_000u64;
    let mut w = Writer::create(&local, &schema, WriterConfig::default()).unwrap();
    for i in 0..n {
        w.append(&[vec![i as u8; 8], vec![(i >> 8) as u8; 4]])
            .unwrap();
    }
    w.commit().unwrap();
    let url = server.url("mirrored");
    let opts = TransferOptions::default().store(server.options());
    push(&local, &url, &opts).unwrap();
    let cache = tmp.path().join("cache");
    let remote = RemoteConfig::default()
        .store(server.options())
        .cache_dir(&cache)
        .cache_bytes(1 << 30);
    let ds = zrecord::remote::open(&url, ReadConfig::default(), remote.clone()).unwrap();

    // Four more commits, each changing one record of field a: b's files stay the same.
    for c in 1..=4u64 {
        w.modify(c * 100, "a", &[0xEE; 8]).unwrap();
        w.commit().unwrap();
        push(&local, &url, &opts).unwrap();
        assert!(ds.refresh().unwrap(), "commit {c} not seen");
        assert_eq!(
            ds.gather_blocking(&[c * 100]).unwrap().get(0, 0).unwrap(),
            &[0xEE; 8]
        );
    }
    // One more reader of the latest commit shares the same mirror.
    let other = zrecord::remote::open(&url, ReadConfig::default(), remote).unwrap();
    assert_eq!(other.len(), n);

    let meta = ds.snapshot().meta().clone();
    let live: u64 = meta
        .fields
        .iter()
        .map(|f| f.table.table_len * 24 + f.table.patch_len * 32)
        .sum();
    let mirrored = bytes_under(&cache.join("mirrors"));
    assert!(
        mirrored <= live,
        "{mirrored} bytes mirrored for {live} bytes of live tables after 5 commits"
    );
    // Every record still reads through both handles.
    let all: Vec<u64> = (0..n).collect();
    for d in [&ds, &other] {
        let b = d.gather_blocking(&all).unwrap();
        for i in [0u64, 100, 400, n - 1] {
            let want = if i > 0 && i % 100 == 0 && i <= 400 {
                vec![0xEE; 8]
            } else {
                vec![i as u8; 8]
            };
            assert_eq!(b.get(i as usize, 0).unwrap(), want.as_slice(), "record {i}");
        }
    }
}
