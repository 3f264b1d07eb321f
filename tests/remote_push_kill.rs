//! A push killed at any point (SIGKILL of a `zrecord push` process, at random times) and run
//! again finishes the same generation, uploading only what is missing; a reader never sees a
//! partial generation in between: either no commit, or a complete one. Against s3s-fs, started
//! by the test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/s3.rs"]
mod s3;

use std::process::{Command, Stdio};
use std::time::Duration;

use zrecord::remote::{pull, TransferOptions};
use zrecord::{DType, Dataset, Field, Schema, Writer, WriterConfig};

#[test]
fn killed_pushes_resume_and_readers_see_no_partial_generation() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("ds");
    let schema = Schema::new()
        .field(Field::new("x", DType::U8))
        .chunk_size_bytes(256 << 10);
    let mut w = Writer::create(&local, &schema, WriterConfig::default()).unwrap();
    for i in 0..6000u64 {
        w.append(&[vec![(i % 253) as u8; 1000 + (i % 7) as usize * 100]])
            .unwrap();
    }
    w.commit().unwrap();
    drop(w);
    let url = server.url("killed");
    let push = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_zrecord"));
        c.args([
            "push",
            local.to_str().unwrap(),
            &url,
            "--json",
            "--concurrency",
            "2",
        ])
        .env("AWS_ENDPOINT", &server.endpoint)
        .env("AWS_ACCESS_KEY_ID", "zrecord")
        .env("AWS_SECRET_ACCESS_KEY", "zrecord-secret")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ALLOW_HTTP", "true")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        c
    };
    let opts = TransferOptions::default().store(server.options());
    let mut x = 0x5eed_u64;
    let mut killed = 0;
    for round in 0..12 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut child = push().spawn().unwrap();
        // The first rounds kill at once (a release build's push can finish within
        // milliseconds); the others at random times.
        let wait = if round < 3 { round } else { x % 120 };
        std::thread::sleep(Duration::from_millis(wait));
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap();
            killed += 1;
        }
        child.wait().unwrap();
        // A reader sees either no commit or a complete one.
        let dir = tmp.path().join(format!("reader{round}"));
        match pull(&url, &dir, &opts) {
            Ok(r) => {
                assert_eq!(r.slot, 1);
                let ds = Dataset::open(&dir).unwrap();
                assert_eq!(ds.len(), 6000);
            }
            Err(zrecord::Error::NotADataset { .. }) => {}
            Err(e) => panic!("round {round}: a reader saw {e}"),
        }
    }
    assert!(killed > 0, "no push was killed mid-way");
    let out = push().output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["slot"], 1, "{report}");
    let pulled = tmp.path().join("final");
    pull(&url, &pulled, &opts).unwrap();
    let (a, b) = (
        Dataset::open(&local).unwrap(),
        Dataset::open(&pulled).unwrap(),
    );
    let all: Vec<u64> = (0..6000).collect();
    assert_eq!(
        a.gather_blocking(&all).unwrap().into_records(),
        b.gather_blocking(&all).unwrap().into_records()
    );
}
