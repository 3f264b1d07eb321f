//! A data object's key names its whole content: two datasets that differ only in their record
//! bytes (so their offset tables have the same size and the same CRC32C), pushed one after the
//! other to one prefix, are each read back exactly, through the store and by a pull.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/s3.rs"]
mod s3;

use std::path::Path;

use zrecord::remote::{pull, push, RemoteConfig, TransferOptions};
use zrecord::{DType, Dataset, Field, ReadConfig, Schema, Writer, WriterConfig};

const RECORDS: u64 = 1000;
const RECORD_BYTES: usize = 100;

/// Record `i` of dataset `seed`: 100 bytes, every dataset's records the same length.
fn record(seed: u64, i: u64) -> Vec<u8> {
    let mut x = (seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i).wrapping_add(1);
    (0..RECORD_BYTES)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn write(dir: &Path, seed: u64) -> Vec<Vec<Vec<u8>>> {
    let schema = Schema::new().field(Field::new("x", DType::U8));
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    let mut model = Vec::new();
    for i in 0..RECORDS {
        let r = record(seed, i);
        w.append(std::slice::from_ref(&r)).unwrap();
        model.push(vec![r]);
    }
    w.commit().unwrap();
    model
}

fn all_records(ds: &Dataset) -> Vec<Vec<Vec<u8>>> {
    let indices: Vec<u64> = (0..ds.len()).collect();
    ds.gather_blocking(&indices)
        .unwrap_or_else(|e| panic!("reading {}: {e}", ds.path().display()))
        .into_records()
        .into_iter()
        .map(|r| r.into_iter().map(|b| b.to_vec()).collect())
        .collect()
}

#[test]
fn datasets_differing_only_in_record_bytes_both_read_exactly() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let opts = TransferOptions::default().store(server.options());
    let url = server.url("shared/prefix");
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    let model_a = write(&a, 1);
    let model_b = write(&b, 2);
    assert_ne!(model_a, model_b);
    // Same structure: the offset tables have the same length (and, entries carrying the CRC32C
    // of their own bytes, the same CRC32C); only the record bytes differ.
    assert_eq!(
        std::fs::metadata(a.join("x.0.offsets")).unwrap().len(),
        std::fs::metadata(b.join("x.0.offsets")).unwrap().len()
    );
    assert_ne!(
        std::fs::read(a.join("x.0.offsets")).unwrap(),
        std::fs::read(b.join("x.0.offsets")).unwrap()
    );

    for (n, (dir, model)) in [(&a, &model_a), (&b, &model_b)].into_iter().enumerate() {
        let report = push(dir, &url, &opts).unwrap();
        assert_eq!(report.slot, n as u64 + 1, "{report:?}");
        // Nothing of the first dataset is taken for the second's: every object differs (but
        // the empty patch logs, which are the same bytes).
        assert_eq!(report.skipped.1, 0, "push {n}: {report:?}");
        let cache = tmp.path().join(format!("cache{n}"));
        let remote = zrecord::remote::open(
            &url,
            ReadConfig::default(),
            RemoteConfig::default()
                .store(server.options())
                .cache_dir(&cache),
        )
        .unwrap();
        assert_eq!(
            &all_records(&remote),
            model,
            "push {n}, read through the store"
        );
        let pulled = tmp.path().join(format!("pulled{n}"));
        pull(&url, &pulled, &opts).unwrap();
        let local = Dataset::open(&pulled).unwrap();
        assert_eq!(&all_records(&local), model, "push {n}, pulled");
        assert_eq!(
            std::fs::read(pulled.join("x.0.offsets")).unwrap(),
            std::fs::read(dir.join("x.0.offsets")).unwrap(),
            "push {n}: the pulled offset table is not the pushed one"
        );
    }
}
