//! A pushed dataset's objects served by a Google Cloud Storage emulator (fake-gcs-server,
//! started by the test) read by `gs://` URL exactly as the local dataset, through `gather`, one
//! loader epoch and `pull`. The emulator does not take object_store's uploads (no XML API object
//! `PUT`): the objects are those a push wrote to an S3 test server (s3s-fs), loaded at the
//! emulator's start, and a push to the emulator is a typed error naming the object.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/gcs.rs"]
mod gcs;

use gcs::s3;

use std::path::Path;
use std::sync::Arc;

use zrecord::pipeline::{DatasetSource, Loader};
use zrecord::remote::{pull, push, RemoteConfig, TransferOptions};
use zrecord::{Codec, DType, Dataset, Error, Field, ReadConfig, Schema, Writer, WriterConfig};

const N: u64 = 2000;

fn record(i: u64) -> Vec<u8> {
    (0..(i * 37 % 700) as usize)
        .map(|j| (i as u8).wrapping_mul(13).wrapping_add((j % 7) as u8))
        .collect()
}

fn write(dir: &Path) {
    let schema = Schema::new()
        .field(Field::new("x", DType::U8).codec(Codec::Deflate))
        .field(Field::new("raw", DType::U8))
        .chunk_size_bytes(256 << 10);
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    for i in 0..N {
        w.append(&[record(i), record(i + 1)]).unwrap();
    }
    w.commit().unwrap();
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
fn a_gs_dataset_reads_as_the_local_one() {
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("ds");
    write(&local);
    let s3 = s3::S3Server::start();
    push(
        &local,
        &s3.url("sets/a"),
        &TransferOptions::default().store(s3.options()),
    )
    .unwrap();
    let server = gcs::FakeGcs::start(&s3.root.path().join(s3::BUCKET));
    drop(s3);

    let url = server.url("sets/a");
    let remote = zrecord::remote::open(
        &url,
        ReadConfig::default(),
        RemoteConfig::default()
            .store(server.options())
            .cache_dir(tmp.path().join("cache")),
    )
    .unwrap();
    let ds = Dataset::open(&local).unwrap();
    assert_eq!(remote.len(), N);
    assert_eq!(remote.path(), Path::new(&url));
    let mut x = 0x1234_5678_u64;
    for size in [1usize, 17, 256, 1000] {
        let indices: Vec<u64> = (0..size)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % N
            })
            .collect();
        assert_eq!(
            records(&remote, &indices),
            records(&ds, &indices),
            "batch of {size}"
        );
    }

    let src = Arc::new(DatasetSource::new(&remote));
    let mut loader = Loader::builder(src).seed(5).batch_size(64).build().unwrap();
    let mut seen = vec![0u32; N as usize];
    while let Some(b) = futures::executor::block_on(loader.next()) {
        let b = b.unwrap();
        for (r, &i) in b.data.indices().iter().enumerate() {
            seen[i as usize] += 1;
            assert_eq!(b.data.get(r, 0).unwrap(), record(i).as_slice());
        }
    }
    assert!(seen.iter().all(|&n| n == 1));

    let opts = TransferOptions::default().store(server.options().retries(0));
    let pulled = tmp.path().join("pulled");
    assert_eq!(pull(&url, &pulled, &opts).unwrap().slot, 1);
    let all: Vec<u64> = (0..N).collect();
    assert_eq!(
        records(&Dataset::open(&pulled).unwrap(), &all),
        records(&ds, &all)
    );

    // The emulator takes no upload of this client: a typed error naming the object.
    match push(&local, &server.url("sets/b"), &opts) {
        Err(e @ Error::Remote { .. }) => {
            eprintln!("a push to fake-gcs-server: {e}");
            assert!(e.to_string().contains("gs://zrecord-gcs/sets/b/"), "{e}");
        }
        other => panic!("expected Error::Remote from a push to fake-gcs-server, got {other:?}"),
    }
}
