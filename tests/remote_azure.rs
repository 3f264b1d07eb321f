//! A dataset pushed to Azure Blob Storage (Azurite, started by the test) and opened by its
//! `az://` URL returns exactly the local dataset's records, through `gather` and one loader
//! epoch, and `refresh` moves to a newer push.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/azurite.rs"]
mod azurite;

use std::path::Path;
use std::sync::Arc;

use zrecord::pipeline::{DatasetSource, Loader};
use zrecord::remote::{push, RemoteConfig, TransferOptions};
use zrecord::{Codec, DType, Dataset, Field, ReadConfig, Schema, Writer, WriterConfig};

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

fn records(ds: &Dataset, indices: &[u64]) -> Vec<Vec<Vec<u8>>> {
    ds.gather_blocking(indices)
        .unwrap()
        .into_records()
        .into_iter()
        .map(|r| r.into_iter().map(|b| b.to_vec()).collect())
        .collect()
}

#[test]
fn an_az_dataset_reads_as_the_local_one() {
    let server = azurite::Azurite::start();
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("ds");
    write(&local, 0, 2000);
    let url = server.url("sets/a");
    let options = TransferOptions::default().store(server.options());
    let report = push(&local, &url, &options).unwrap();
    assert_eq!(report.slot, 1);
    assert!(!report.already_done);

    let remote = zrecord::remote::open(
        &url,
        ReadConfig::default(),
        RemoteConfig::default()
            .store(server.options())
            .cache_dir(tmp.path().join("cache")),
    )
    .unwrap();
    let ds = Dataset::open(&local).unwrap();
    assert_eq!(remote.len(), 2000);
    assert_eq!(remote.backend_name(), "remote");
    assert_eq!(remote.path(), Path::new(&url));

    let mut x = 0x1234_5678_u64;
    for size in [1usize, 17, 256, 1000] {
        let indices: Vec<u64> = (0..size)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % 2000
            })
            .collect();
        assert_eq!(
            records(&remote, &indices),
            records(&ds, &indices),
            "batch of {size}"
        );
    }

    // One loader epoch: every record once, with its bytes.
    let src = Arc::new(DatasetSource::new(&remote));
    let mut loader = Loader::builder(src).seed(3).batch_size(64).build().unwrap();
    let mut seen = vec![0u32; 2000];
    while let Some(b) = futures::executor::block_on(loader.next()) {
        let b = b.unwrap();
        for (r, &i) in b.data.indices().iter().enumerate() {
            seen[i as usize] += 1;
            assert_eq!(b.data.get(r, 0).unwrap(), record(i).as_slice());
            assert_eq!(b.data.get(r, 1).unwrap(), record(i + 1).as_slice());
        }
    }
    assert!(seen.iter().all(|&n| n == 1));

    // A newer generation pushed: refresh moves to it.
    write(&local, 2000, 2100);
    assert_eq!(push(&local, &url, &options).unwrap().slot, 2);
    assert!(remote.refresh().unwrap());
    assert_eq!(remote.len(), 2100);
    assert_eq!(
        records(&remote, &[2050, 3]),
        records(&Dataset::open(&local).unwrap(), &[2050, 3])
    );
}
