//! A push or pull of a collection killed at any point (SIGKILL of a `zrecord push` or `zrecord
//! pull` process at random times) and run again finishes the same collection, transferring only
//! what is missing; in between, a reader of the store (or of the local directory) sees either
//! no collection or the whole one, never some of its parts. Against s3s-fs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/parts.rs"]
mod parts;
#[path = "support/s3.rs"]
mod s3;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use zrecord::collection::{commit, CommitOptions};
use zrecord::remote::RemoteConfig;
use zrecord::{DType, Dataset, Error, ReadConfig};

const PARTS: usize = 4;

use parts::records;

fn make(dir: &Path, seed: u8, n: u32) {
    parts::write(dir, DType::U8, Some(128 << 10), n, |i| {
        vec![seed.wrapping_add(i as u8); 900 + (i as usize * 31) % 300]
    });
}

/// `zrecord ARGS` with the server's credentials, printing JSON.
fn zrecord(server: &s3::S3Server, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_zrecord"));
    c.args(args)
        .args(["--json", "--concurrency", "2"])
        .env("AWS_ENDPOINT", &server.endpoint)
        .env("AWS_ACCESS_KEY_ID", "zrecord")
        .env("AWS_SECRET_ACCESS_KEY", "zrecord-secret")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ALLOW_HTTP", "true")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Runs `cmd` killed after a pseudo-random wait (the first rounds at once); true if it was
/// killed before it finished.
fn run_killed(mut cmd: Command, round: u64, x: &mut u64) -> bool {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    let mut child = cmd.spawn().unwrap();
    let wait = if round < 3 { round * 5 } else { *x % 400 };
    std::thread::sleep(Duration::from_millis(wait));
    let killed = child.try_wait().unwrap().is_none();
    if killed {
        child.kill().unwrap();
    }
    child.wait().unwrap();
    killed
}

/// Runs `cmd` to the end; its JSON report.
fn run_ok(mut cmd: Command) -> serde_json::Value {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn killed_pushes_and_pulls_of_a_collection_resume() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("coll");
    let dirs: Vec<_> = (0..PARTS)
        .map(|k| tmp.path().join(format!("p{k}")))
        .collect();
    for (k, d) in dirs.iter().enumerate() {
        make(d, k as u8 * 60, 1500);
    }
    commit(&root, &dirs, CommitOptions::default()).unwrap();
    let local = records(&Dataset::open(&root).unwrap());
    let url = server.url("killed/coll");
    let reader = |cache: &str| {
        zrecord::remote::open(
            &url,
            ReadConfig::default(),
            RemoteConfig::default()
                .store(server.options())
                .cache_dir(tmp.path().join(cache)),
        )
    };

    let mut x = 0x5eed_u64;
    let mut killed = 0;
    for round in 0..8 {
        if run_killed(
            zrecord(&server, &["push", root.to_str().unwrap(), &url]),
            round,
            &mut x,
        ) {
            killed += 1;
        }
        match reader(&format!("cache-push-{round}")) {
            Ok(ds) => {
                assert_eq!(ds.snapshot().part_ids().len(), PARTS, "round {round}");
                assert!(records(&ds) == local, "round {round}");
            }
            Err(Error::NotADataset { .. }) => {}
            Err(e) => panic!("round {round}: a reader saw {e}"),
        }
    }
    assert!(killed > 0, "no push was killed mid-way");
    let r = run_ok(zrecord(&server, &["push", root.to_str().unwrap(), &url]));
    assert_eq!(r["slot"], 1, "{r}");
    let ds = reader("cache-final").unwrap();
    assert_eq!(ds.snapshot().generation(), 1);
    assert!(records(&ds) == local);

    let dst = tmp.path().join("dst");
    let mut killed = 0;
    for round in 0..8 {
        if run_killed(
            zrecord(&server, &["pull", &url, dst.to_str().unwrap()]),
            round,
            &mut x,
        ) {
            killed += 1;
        }
        // Before its manifest, the local collection is no dataset at all.
        match Dataset::open(&dst) {
            Ok(ds) => {
                assert_eq!(ds.snapshot().part_ids().len(), PARTS, "round {round}");
                assert!(records(&ds) == local, "round {round}");
            }
            Err(Error::NotADataset { .. }) => {}
            Err(e) => panic!("round {round}: a local reader saw {e}"),
        }
    }
    assert!(killed > 0, "no pull was killed mid-way");
    let r = run_ok(zrecord(&server, &["pull", &url, dst.to_str().unwrap()]));
    assert_eq!(r["parts"], PARTS, "{r}");
    let ds = Dataset::open(&dst).unwrap();
    assert_eq!(ds.snapshot().generation(), 1);
    assert!(records(&ds) == local);
    let again = run_ok(zrecord(&server, &["pull", &url, dst.to_str().unwrap()]));
    assert_eq!(again["already_done"], true, "{again}");
    assert_eq!(again["transferred_objects"], 0, "{again}");
}
