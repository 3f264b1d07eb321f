//! A record damaged on the store costs one retry of its gather, not one per chunk, with the
//! chunk cache on as off: the gather fails with `ChecksumMismatch` naming the record after at
//! most two reads of it. Against s3s-fs, started by the test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/s3.rs"]
mod s3;

use std::path::{Path, PathBuf};

use zrecord::diagnostics::remote_stats as stats;
use zrecord::remote::{push, RemoteConfig, TransferOptions};
use zrecord::{DType, Error, Field, ReadConfig, Schema, Writer, WriterConfig};

fn record(i: u64) -> Vec<u8> {
    (0..(200 + i % 13 * 17) as usize)
        .map(|j| (i as u8).wrapping_add((j * 5) as u8))
        .collect()
}

/// The files s3s-fs keeps under `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn one_damaged_record_on_the_store_is_read_at_most_twice() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("ds");
    let schema = Schema::new()
        .field(Field::new("x", DType::U8))
        .chunk_size_bytes(8 << 10);
    let mut w = Writer::create(&local, &schema, WriterConfig::default()).unwrap();
    let n = 2000;
    for i in 0..n {
        w.append(&[record(i)]).unwrap();
    }
    w.commit().unwrap();
    drop(w);
    let chunks = std::fs::read_dir(local.join("chunk")).unwrap().count();
    assert!(chunks >= 50, "{chunks} chunks");
    let url = server.url("damaged");
    push(
        &local,
        &url,
        &TransferOptions::default().store(server.options()),
    )
    .unwrap();
    // One byte in the middle of one chunk's object.
    let mut stored = files(&server.object_file("damaged/data/chunk"));
    stored.sort();
    let object = stored[stored.len() / 2].clone();
    let mut bytes = std::fs::read(&object).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x20;
    std::fs::write(&object, bytes).unwrap();

    for cache_bytes in [0u64, 1 << 30] {
        let remote = RemoteConfig::default()
            .store(server.options())
            .cache_dir(tmp.path().join(format!("cache{cache_bytes}")))
            .cache_bytes(cache_bytes);
        let ds = zrecord::remote::open(&url, ReadConfig::default(), remote).unwrap();
        let all: Vec<u64> = (0..n).collect();
        let index = match ds.gather_blocking(&all) {
            Err(Error::ChecksumMismatch { index, .. }) => index,
            other => panic!("cache {cache_bytes}: expected a checksum mismatch, got {other:?}"),
        };
        for _ in 0..3 {
            let before = stats().requests;
            match ds.gather_blocking(&[index]) {
                Err(Error::ChecksumMismatch { index: i, .. }) => assert_eq!(i, index),
                other => panic!("cache {cache_bytes}: expected a checksum mismatch, got {other:?}"),
            }
            let requests = stats().requests - before;
            assert!(
                (1..=2).contains(&requests),
                "cache {cache_bytes}: one damaged record took {requests} range requests \
                 ({chunks} chunks)"
            );
        }
        // The records around it read.
        let ok: Vec<u64> = (0..n).filter(|&i| i != index).take(50).collect();
        let b = ds.gather_blocking(&ok).unwrap();
        for (r, &i) in ok.iter().enumerate() {
            assert_eq!(b.get(r, 0).unwrap(), record(i).as_slice());
        }
    }
}
