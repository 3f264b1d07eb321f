//! A collection on an object store keeps its offset-table page files (one per part and field)
//! within the chunk descriptor budget, as a local collection keeps its chunk files: in a
//! process limited to 64 open descriptors (`RLIMIT_NOFILE`), a collection of 20 four-field parts
//! (80 page files) opens and reads every record byte-exact, twice (the second time from page
//! files the budget closed and opens again).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/s3.rs"]
mod s3;

use std::path::Path;
use std::process::Command;

use zrecord::collection::{commit_url, CommitOptions};
use zrecord::remote::{RemoteConfig, TransferOptions};
use zrecord::{DType, Field, ReadConfig, Schema, Writer, WriterConfig};

const PARTS: u64 = 20;
const RECORDS: u64 = 3;
const LIMIT: &str = "64";
const CHILD_URL: &str = "ZRECORD_REMOTE_DESCRIPTORS_URL";
const CHILD_ENDPOINT: &str = "ZRECORD_REMOTE_DESCRIPTORS_ENDPOINT";
const CHILD_CACHE: &str = "ZRECORD_REMOTE_DESCRIPTORS_CACHE";

/// Fields per part: one page file each.
const FIELDS: usize = 4;

/// Record `i` of part `p`: its fields.
fn record(p: u64, i: u64) -> Vec<Vec<u8>> {
    (0..FIELDS as u64)
        .map(|f| {
            let len = ((p * 7 + i * 13 + f) % 40 + 1) as usize;
            vec![(p as u8).wrapping_add(i as u8).wrapping_mul(f as u8 + 1); len]
        })
        .collect()
}

fn write_part(dir: &Path, p: u64) {
    let schema = (0..FIELDS).fold(Schema::new(), |s, f| {
        s.field(Field::new(format!("f{f}"), DType::U8))
    });
    let mut w = Writer::create(dir, &schema, WriterConfig::default().num_writers(1)).unwrap();
    for i in 0..RECORDS {
        w.append(&record(p, i)).unwrap();
    }
    w.commit().unwrap();
}

#[test]
fn a_remote_collection_reads_within_the_descriptor_budget() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let parts: Vec<String> = (0..PARTS)
        .map(|p| {
            let dir = tmp.path().join(format!("task-{p:03}"));
            write_part(&dir, p);
            dir.display().to_string()
        })
        .collect();
    let url = server.url("collections/many");
    let transfer = TransferOptions::default()
        .store(server.options())
        .concurrency(8);
    let report = commit_url(&url, &parts, CommitOptions::default(), &transfer).unwrap();
    assert_eq!(report.parts, PARTS as usize);

    // This test binary again, running only the child below, under the limit.
    let me = std::env::current_exe().unwrap();
    let out = Command::new("prlimit")
        .arg(format!("--nofile={LIMIT}:{LIMIT}"))
        .arg(&me)
        .args([
            "--exact",
            "child_reads_every_part",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_URL, &url)
        .env(CHILD_ENDPOINT, &server.endpoint)
        .env(CHILD_CACHE, tmp.path().join("cache"))
        .output()
        .expect("run prlimit (util-linux) to start the child under RLIMIT_NOFILE=64");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child failed:\n{log}");
    assert!(
        log.contains("child: every part read"),
        "child did not run:\n{log}"
    );
}

/// Run by the test above in a child process under `RLIMIT_NOFILE=64`; does nothing otherwise.
#[test]
fn child_reads_every_part() {
    let (Ok(url), Ok(endpoint), Ok(cache)) = (
        std::env::var(CHILD_URL),
        std::env::var(CHILD_ENDPOINT),
        std::env::var(CHILD_CACHE),
    ) else {
        return;
    };
    let ds = zrecord::remote::open(
        &url,
        ReadConfig::default(),
        RemoteConfig::default()
            .store(s3::options_for(&endpoint))
            .cache_dir(&cache)
            // Sockets count against the same limit: a few requests at a time leave room.
            .requests_in_flight(4),
    )
    .unwrap();
    assert_eq!(ds.len(), PARTS * RECORDS);
    let want: Vec<Vec<Vec<u8>>> = (0..PARTS)
        .flat_map(|p| (0..RECORDS).map(move |i| record(p, i)))
        .collect();
    let all: Vec<u64> = (0..ds.len()).collect();
    for round in 0..2 {
        for batch in all.chunks(16) {
            let got = ds.gather_blocking(batch).unwrap().into_records();
            for (&i, r) in batch.iter().zip(got) {
                let got: Vec<&[u8]> = r.iter().map(|b| &b[..]).collect();
                let w: Vec<&[u8]> = want[i as usize].iter().map(Vec::as_slice).collect();
                assert_eq!(got, w, "round {round}, record {i}");
            }
        }
    }
    println!("child: every part read under RLIMIT_NOFILE={LIMIT}");
}
