//! A pull reports success, or "already done", only over a directory whose every file has the
//! size and CRC32C its manifest names: several `zrecord pull` processes into one directory at
//! once, some killed mid-way, end in a dataset that verifies and equals the source; a damaged
//! file of a finished pull is downloaded again, not reported done. Against s3s-fs, started by
//! the test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/s3.rs"]
mod s3;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use zrecord::remote::{pull, push, TransferOptions};
use zrecord::{DType, Dataset, Field, Schema, Writer, WriterConfig};

const N: u64 = 6000;

fn record(i: u64) -> Vec<u8> {
    (0..(900 + i % 11 * 37) as usize)
        .map(|j| (i as u8).wrapping_mul(7).wrapping_add(j as u8))
        .collect()
}

/// A dataset of about 24 chunks of 256 KiB, pushed to `url`.
fn publish(server: &s3::S3Server, local: &Path, url: &str) {
    let schema = Schema::new()
        .field(Field::new("x", DType::U8))
        .chunk_size_bytes(256 << 10);
    let mut w = Writer::create(local, &schema, WriterConfig::default()).unwrap();
    for i in 0..N {
        w.append(&[record(i)]).unwrap();
    }
    w.commit().unwrap();
    drop(w);
    push(
        local,
        url,
        &TransferOptions::default().store(server.options()),
    )
    .unwrap();
}

/// Every record of the dataset at `dir`, read with checksums, equals the source's; `zrecord
/// verify` finds nothing; no temporary file is left.
fn check(dir: &Path) {
    let ds = Dataset::open(dir).unwrap();
    assert_eq!(ds.len(), N);
    let all: Vec<u64> = (0..N).collect();
    let b = ds.gather_blocking(&all).unwrap();
    for i in 0..N {
        assert_eq!(
            b.get(i as usize, 0).unwrap(),
            record(i).as_slice(),
            "record {i}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_zrecord"))
        .args(["verify", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "zrecord verify: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for d in [dir.to_path_buf(), dir.join("chunk")] {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            assert!(!name.contains(".pull"), "a temporary file is left: {name}");
        }
    }
}

#[test]
fn concurrent_and_killed_pullers_leave_a_dataset_that_verifies() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let url = server.url("pulled");
    publish(&server, &tmp.path().join("src"), &url);
    let puller = |dir: &Path| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_zrecord"));
        c.args(["pull", &url, dir.to_str().unwrap(), "--concurrency", "3"])
            .env("AWS_ENDPOINT", &server.endpoint)
            .env("AWS_ACCESS_KEY_ID", "zrecord")
            .env("AWS_SECRET_ACCESS_KEY", "zrecord-secret")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ALLOW_HTTP", "true")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        c
    };
    let mut x = 0x9e37_u64;
    let mut killed = 0;
    for round in 0..4 {
        let dir = tmp.path().join(format!("dst{round}"));
        let mut children: Vec<_> = (0..5).map(|_| puller(&dir).spawn().unwrap()).collect();
        // Some are killed at random times, the others run to the end.
        for (k, child) in children.iter_mut().enumerate() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if k % 2 == 1 {
                std::thread::sleep(Duration::from_millis(x % 150));
                if child.try_wait().unwrap().is_none() {
                    child.kill().unwrap();
                    killed += 1;
                }
            }
        }
        for (k, child) in children.into_iter().enumerate() {
            let out = child.wait_with_output().unwrap();
            if k % 2 == 0 {
                assert!(
                    out.status.success(),
                    "round {round}, puller {k}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        check(&dir);
        // One more pull finds everything in place and checked.
        let again = pull(
            &url,
            &dir,
            &TransferOptions::default().store(server.options()),
        )
        .unwrap();
        assert!(again.already_done, "round {round}: {again:?}");
        assert_eq!(again.transferred, (0, 0));
    }
    assert!(killed > 0, "no puller was killed mid-way");
}

#[test]
fn a_damaged_file_is_downloaded_again_not_reported_done() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let url = server.url("damaged");
    publish(&server, &tmp.path().join("src"), &url);
    let dst = tmp.path().join("dst");
    let opts = TransferOptions::default().store(server.options());
    let first = pull(&url, &dst, &opts).unwrap();
    assert!(!first.already_done);
    // One byte of one chunk flipped, one chunk cut short.
    let flipped = dst.join("chunk/00003.zr");
    let mut bytes = std::fs::read(&flipped).unwrap();
    bytes[1000] ^= 0x40;
    std::fs::write(&flipped, &bytes).unwrap();
    let cut = dst.join("chunk/00005.zr");
    let len = std::fs::metadata(&cut).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&cut)
        .unwrap()
        .set_len(len - 10)
        .unwrap();
    let second = pull(&url, &dst, &opts).unwrap();
    assert!(!second.already_done, "{second:?}");
    assert_eq!(second.transferred.0, 2, "{second:?}");
    check(&dst);
    let third = pull(&url, &dst, &opts).unwrap();
    assert!(third.already_done, "{third:?}");
}
