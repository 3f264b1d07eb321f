//! Two `zrecord pull` processes of one collection into one directory at once both succeed and
//! leave one correct local collection: one manifest listing each of the store's parts exactly
//! once, in the store's order, whose records equal the store's. Against s3s-fs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/parts.rs"]
mod parts;
#[path = "support/s3.rs"]
mod s3;

use std::path::Path;
use std::process::{Command, Stdio};

use zrecord::collection::{commit, CommitOptions};
use zrecord::remote::{push, RemoteConfig, TransferOptions};
use zrecord::{DType, Dataset, ReadConfig};

use parts::records;

fn make(dir: &Path, seed: u8, n: u32) {
    parts::write(dir, DType::Bytes, Some(8 << 10), n, |i| {
        vec![seed.wrapping_add(i as u8); 100 + (i as usize * 13) % 500]
    });
}

#[test]
fn two_pulls_into_one_directory_at_once_leave_one_collection() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("coll");
    let names = ["p0", "p1", "p2"];
    for (k, name) in names.iter().enumerate() {
        make(&tmp.path().join(name), k as u8 * 70, 400 + k as u32 * 50);
    }
    let dirs: Vec<_> = names.iter().map(|n| tmp.path().join(n)).collect();
    commit(&root, &dirs, CommitOptions::default()).unwrap();
    let url = server.url("pulled/coll");
    let t = TransferOptions::default().store(server.options());
    push(&root, &url, &t).unwrap();
    let remote = zrecord::remote::open(
        &url,
        ReadConfig::default(),
        RemoteConfig::default()
            .store(server.options())
            .cache_dir(tmp.path().join("cache")),
    )
    .unwrap();
    let want = records(&remote);

    for round in 0..3 {
        let dst = tmp.path().join(format!("dst{round}"));
        let pull = || {
            Command::new(env!("CARGO_BIN_EXE_zrecord"))
                .args(["pull", &url, dst.to_str().unwrap(), "--json"])
                .args(["--concurrency", "2"])
                .env("AWS_ENDPOINT", &server.endpoint)
                .env("AWS_ACCESS_KEY_ID", "zrecord")
                .env("AWS_SECRET_ACCESS_KEY", "zrecord-secret")
                .env("AWS_REGION", "us-east-1")
                .env("AWS_ALLOW_HTTP", "true")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (a, b) = (pull(), pull());
        let mut done = 0;
        for child in [a, b] {
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(r["parts"].as_u64(), Some(3), "{r}");
            if r["already_done"] == true {
                done += 1;
            }
        }
        // They ran one after the other: the second found everything in place.
        assert_eq!(done, 1, "round {round}");
        let manifests: Vec<String> = std::fs::read_dir(dst.join("_collection"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name != "commit.lock" && name != "pull.lock")
            .collect();
        assert_eq!(manifests, ["00000000000000000001.json"], "round {round}");
        let ds = Dataset::open(&dst).unwrap();
        assert_eq!(ds.snapshot().part_ids(), names);
        assert!(records(&ds) == want, "round {round}: the records differ");
        let out = Command::new(env!("CARGO_BIN_EXE_zrecord"))
            .args(["verify", dst.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
