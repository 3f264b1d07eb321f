//! Publishing through a real S3 server (s3s-fs, started by the test): a pushed dataset pulls
//! back as the same dataset, file for file; pushing again uploads nothing and commits nothing;
//! a later generation becomes the next commit slot and only uploads what changed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/s3.rs"]
mod s3;

use std::path::Path;

use zrecord::remote::{pull, push, TransferOptions};
use zrecord::{DType, Dataset, Field, Schema, Writer, WriterConfig};

fn record(i: u64) -> Vec<u8> {
    (0..(i * 37 % 300) as usize)
        .map(|j| (i as u8).wrapping_mul(13).wrapping_add(j as u8))
        .collect()
}

fn write(dir: &Path, from: u64, to: u64) {
    let mut w = if dir.exists() {
        Writer::open(dir, WriterConfig::default()).unwrap()
    } else {
        let schema = Schema::new()
            .field(Field::new("x", DType::U8))
            .field(Field::new("label", DType::I64).shape(vec![]))
            .chunk_size_bytes(64 << 10);
        Writer::create(dir, &schema, WriterConfig::default()).unwrap()
    };
    for i in from..to {
        w.append(&[record(i), (i as i64).to_le_bytes().to_vec()])
            .unwrap();
    }
    w.commit().unwrap();
}

fn all_records(dir: &Path) -> Vec<Vec<Vec<u8>>> {
    let ds = Dataset::open(dir).unwrap();
    let indices: Vec<u64> = (0..ds.len()).collect();
    let batch = ds.gather_blocking(&indices).unwrap();
    batch
        .into_records()
        .into_iter()
        .map(|r| r.into_iter().map(|b| b.to_vec()).collect())
        .collect()
}

#[test]
fn push_pull_round_trip_and_idempotent_republish() {
    let server = s3::S3Server::start();
    let opts = TransferOptions::default().store(server.options());
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("ds");
    write(&local, 0, 2000);
    let url = server.url("datasets/train");

    let first = push(&local, &url, &opts).unwrap();
    assert_eq!(first.slot, 1);
    assert!(!first.already_done);
    assert_eq!(first.skipped.0, 0);
    assert!(first.transferred.0 > 4, "{first:?}");

    let again = push(&local, &url, &opts).unwrap();
    assert!(again.already_done, "{again:?}");
    assert_eq!(again.slot, 1);
    assert_eq!(again.transferred, (0, 0));

    let pulled = tmp.path().join("pulled");
    let report = pull(&url, &pulled, &opts).unwrap();
    assert_eq!(report.generation, first.generation);
    assert_eq!(all_records(&pulled), all_records(&local));
    assert_eq!(
        std::fs::read(pulled.join("meta.json")).unwrap(),
        std::fs::read(local.join("meta.json")).unwrap()
    );
    assert!(pull(&url, &pulled, &opts).unwrap().already_done);

    // A new generation: the next slot, and only what changed is uploaded.
    write(&local, 2000, 2100);
    let second = push(&local, &url, &opts).unwrap();
    assert_eq!(second.slot, 2);
    assert!(second.generation > first.generation);
    assert!(second.skipped.0 > 0, "{second:?}");
    let pulled2 = tmp.path().join("pulled2");
    pull(&url, &pulled2, &opts).unwrap();
    assert_eq!(all_records(&pulled2), all_records(&local));
}

#[test]
fn large_chunks_go_in_parts() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("big");
    let schema = Schema::new().field(Field::new("x", DType::U8));
    let mut w = Writer::create(&local, &schema, WriterConfig::default()).unwrap();
    for i in 0..90u64 {
        // ~11.5 MiB in one chunk: three parts of 5 MiB.
        w.append(&[vec![(i % 251) as u8; 128 << 10]]).unwrap();
    }
    w.commit().unwrap();
    drop(w);
    let url = server.url("big");
    let opts = TransferOptions::default()
        .store(server.options())
        .part_size(5 << 20);
    let r = push(&local, &url, &opts).unwrap();
    assert!(r.transferred.1 > 11 << 20, "{r:?}");
    let pulled = tmp.path().join("pulled");
    pull(&url, &pulled, &opts).unwrap();
    assert_eq!(all_records(&pulled), all_records(&local));
}

#[test]
fn racing_pushes_commit_distinct_slots_or_conflict() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let url = server.url("raced");
    let dirs: Vec<_> = (0..4u64)
        .map(|k| {
            let d = tmp.path().join(format!("ds{k}"));
            write(&d, 0, 200 + k * 50);
            d
        })
        .collect();
    let opts = TransferOptions::default().store(server.options());
    let barrier = std::sync::Barrier::new(dirs.len());
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = dirs
            .iter()
            .map(|d| {
                let (opts, barrier, url) = (&opts, &barrier, &url);
                s.spawn(move || {
                    barrier.wait();
                    push(d, url, opts)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut slots = Vec::new();
    for r in &results {
        match r {
            Ok(report) => slots.push(report.slot),
            Err(zrecord::Error::PublishConflict { url: u, reason }) => {
                assert_eq!(u, &url);
                assert!(
                    reason.contains("another push committed slot")
                        || reason.contains("was overwritten by another push"),
                    "{reason}"
                );
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    // s3s-fs checks If-None-Match before it writes, not atomically: two creates of one slot at
    // the same instant can both succeed (the read-back catches it when the overwrite lands
    // first). What holds on it: the committed slots are 1..=k, and the dataset is the complete
    // generation of one push that reported that slot.
    slots.sort_unstable();
    slots.dedup();
    assert!(!slots.is_empty());
    assert_eq!(slots, (1..=slots.len() as u64).collect::<Vec<_>>());
    let last = *slots.last().unwrap();
    let pulled = tmp.path().join("pulled");
    let r = pull(&url, &pulled, &opts).unwrap();
    assert_eq!(r.slot, last);
    let got = all_records(&pulled);
    assert!(
        results
            .iter()
            .zip(&dirs)
            .any(|(r, d)| r.as_ref().is_ok_and(|r| r.slot == last) && all_records(d) == got),
        "the dataset is no successful push's generation"
    );
}
