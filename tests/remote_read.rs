//! A dataset read by URL from a real S3 server (s3s-fs, started by the test) returns exactly the
//! local dataset's records, for random batches of every size, through `gather`, the loader and
//! `refresh`; bytes damaged on the server are a checksum error naming the object, never data.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/s3.rs"]
mod s3;

use std::path::Path;
use std::sync::Arc;

use zrecord::pipeline::{DatasetSource, Loader};
use zrecord::remote::{push, RemoteConfig, TransferOptions};
use zrecord::{Codec, DType, Dataset, Error, Field, ReadConfig, Schema, Writer, WriterConfig};

fn record(i: u64) -> Vec<u8> {
    (0..(i * 37 % 700) as usize)
        .map(|j| (i as u8).wrapping_mul(13).wrapping_add((j % 7) as u8))
        .collect()
}

fn write(dir: &Path, from: u64, to: u64) {
    let mut w = if dir.exists() {
        Writer::open(dir, WriterConfig::default()).unwrap()
    } else {
        let schema = Schema::new()
            .field(Field::new("x", DType::U8).codec(Codec::Deflate))
            .field(Field::new("raw", DType::U8))
            .chunk_size_bytes(256 << 10);
        Writer::create(dir, &schema, WriterConfig::default()).unwrap()
    };
    for i in from..to {
        w.append(&[record(i), record(i + 1)]).unwrap();
    }
    w.commit().unwrap();
}

fn open(server: &s3::S3Server, url: &str, cache: &Path) -> zrecord::Result<Dataset> {
    zrecord::remote::open(
        url,
        ReadConfig::default(),
        RemoteConfig::default()
            .store(server.options())
            .cache_dir(cache),
    )
}

fn records(ds: &Dataset, indices: &[u64]) -> Vec<Vec<Vec<u8>>> {
    ds.gather_blocking(indices)
        .unwrap()
        .into_records()
        .into_iter()
        .map(|r| r.into_iter().map(|b| b.to_vec()).collect())
        .collect()
}

#[test]
fn remote_reads_equal_local_reads() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("ds");
    write(&local, 0, 3000);
    let url = server.url("sets/a");
    push(
        &local,
        &url,
        &TransferOptions::default().store(server.options()),
    )
    .unwrap();

    let cache = tmp.path().join("cache");
    let remote = open(&server, &url, &cache).unwrap();
    let ds = Dataset::open(&local).unwrap();
    assert_eq!(remote.len(), 3000);
    assert_eq!(remote.backend_name(), "remote");
    assert_eq!(remote.path(), Path::new(&url));

    let mut x = 0x1234_5678_u64;
    for size in [1usize, 2, 17, 256, 1000] {
        let indices: Vec<u64> = (0..size)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % 3000
            })
            .collect();
        assert_eq!(
            records(&remote, &indices),
            records(&ds, &indices),
            "batch of {size}"
        );
    }
    let all: Vec<u64> = (0..3000).collect();
    assert_eq!(records(&remote, &all), records(&ds, &all));

    // Through the loader, one epoch: every record once, with its bytes.
    let src = Arc::new(DatasetSource::new(&remote));
    let mut loader = Loader::builder(src).seed(3).batch_size(64).build().unwrap();
    let mut seen = vec![0u32; 3000];
    while let Some(b) = futures::executor::block_on(loader.next()) {
        let b = b.unwrap();
        for (r, &i) in b.data.indices().iter().enumerate() {
            seen[i as usize] += 1;
            assert_eq!(b.data.get(r, 0).unwrap(), record(i).as_slice());
        }
    }
    assert!(seen.iter().all(|&n| n == 1));

    // A new generation pushed: refresh moves to it.
    write(&local, 3000, 3100);
    push(
        &local,
        &url,
        &TransferOptions::default().store(server.options()),
    )
    .unwrap();
    assert!(remote.refresh().unwrap());
    assert_eq!(remote.len(), 3100);
    assert_eq!(
        records(&remote, &[3050]),
        records(&Dataset::open(&local).unwrap(), &[3050])
    );
    assert!(remote.writer().is_err());
}

#[test]
fn damaged_objects_are_checksum_errors() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("ds");
    write(&local, 0, 500);
    let url = server.url("sets/b");
    push(
        &local,
        &url,
        &TransferOptions::default().store(server.options()),
    )
    .unwrap();
    let remote = open(&server, &url, &tmp.path().join("cache")).unwrap();

    // Flip a byte of every chunk object on the server.
    let data = server.object_file("sets/b/data/chunk");
    let mut flipped = 0;
    for entry in std::fs::read_dir(&data).unwrap() {
        let path = entry.unwrap().path();
        let mut bytes = std::fs::read(&path).unwrap();
        let at = bytes.len() / 2;
        bytes[at] ^= 0x40;
        std::fs::write(&path, bytes).unwrap();
        flipped += 1;
    }
    assert!(flipped > 0);
    let all: Vec<u64> = (0..500).collect();
    match remote.gather_blocking(&all) {
        Err(e @ Error::ChecksumMismatch { .. }) => {
            assert!(
                e.to_string()
                    .contains("s3://zrecord-test/sets/b/data/chunk/"),
                "{e}"
            );
        }
        other => panic!("expected a checksum mismatch, got {other:?}"),
    }
}
