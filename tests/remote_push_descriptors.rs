//! Push holds descriptors only for the uploads in flight: `zrecord push` in a process limited to
//! 64 open descriptors (`RLIMIT_NOFILE`) publishes a dataset of 10,000 chunks, which then reads
//! back byte-exact through the store.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod support;

#[path = "support/s3.rs"]
mod s3;

use std::process::Command;
use support::{bytes, Rec};
use zrecord::remote::RemoteConfig;
use zrecord::{Dataset, ReadConfig, Writer, WriterConfig};

const RECORDS: u64 = 10_000;
const LIMIT: &str = "64";

/// Record `i`: a small compressible value and 1,200 random bytes, so a 2 KiB chunk holds one
/// record.
fn rec(i: u64) -> Rec {
    vec![bytes(100 + (i % 7) as usize, 2 * i), bytes(1200, 2 * i + 1)]
}

#[test]
fn ten_thousand_chunks_push_under_64_descriptors() {
    let tmp = support::scratch();
    let dir = tmp.path().join("ds");
    let mut w = Writer::create(&dir, &support::schema(2048), WriterConfig::default()).unwrap();
    for i in 0..RECORDS {
        w.append(&rec(i)).unwrap();
    }
    w.commit().unwrap();
    drop(w);
    let chunks = std::fs::read_dir(dir.join("chunk")).unwrap().count();
    assert!(chunks >= 10_000, "only {chunks} chunk files");

    let server = s3::S3Server::start();
    let url = server.url("many");
    let out = Command::new("prlimit")
        .arg(format!("--nofile={LIMIT}:{LIMIT}"))
        .arg(env!("CARGO_BIN_EXE_zrecord"))
        .args(["push", "--json"])
        .arg(&dir)
        .arg(&url)
        .env("AWS_ENDPOINT", &server.endpoint)
        .env("AWS_ACCESS_KEY_ID", "zrecord")
        .env("AWS_SECRET_ACCESS_KEY", "zrecord-secret")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "false")
        .output()
        .expect("prlimit (util-linux) runs the push under the descriptor limit");
    assert!(
        out.status.success(),
        "push under {LIMIT} descriptors failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        report["transferred_objects"].as_u64().unwrap() >= 10_000,
        "{report}"
    );

    let remote = zrecord::remote::open(
        &url,
        ReadConfig::default(),
        RemoteConfig::default()
            .store(server.options())
            .cache_dir(tmp.path().join("cache")),
    )
    .unwrap();
    let local = Dataset::open(&dir).unwrap();
    assert_eq!(remote.len(), RECORDS);
    for start in (0..RECORDS).step_by(1000) {
        let idx: Vec<u64> = (start..start + 1000).collect();
        let got = remote.gather_blocking(&idx).unwrap().into_records();
        let want = local.gather_blocking(&idx).unwrap().into_records();
        assert_eq!(got, want, "records {start}..{}", start + 1000);
    }
}
