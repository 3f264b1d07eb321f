//! A committer to a collection on an object store killed with SIGKILL at any step (after
//! checking its parts, after pushing each, after creating the manifest, or at a random moment
//! of its pushes) leaves a collection that opens to its last complete manifest, every part
//! readable; the same commit run again completes it with each part exactly once and creates at
//! most one manifest.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/s3.rs"]
mod s3;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use zrecord::collection::{commit_url, CommitOptions};
use zrecord::remote::{RemoteConfig, TransferOptions};
use zrecord::{DType, Dataset, Error, Field, ReadConfig, Schema, Writer, WriterConfig};

const CHILD_ENV: &str = "ZRECORD_TEST_REMOTE_COLLECTION_KILL_CHILD";
/// Steps of a commit of two parts: checked, pushed ×2, manifest created.
const STEPS: usize = 4;

fn make(path: &Path, records: u16) {
    let schema = Schema::new()
        .field(Field::new("x", DType::Bytes))
        .chunk_size_bytes(64 << 10);
    let mut w = Writer::create(path, &schema, WriterConfig::default()).unwrap();
    let name = path.file_name().unwrap().to_str().unwrap().to_string();
    for i in 0..records {
        w.append(&[format!("{name}/{i}").repeat(40).into_bytes()])
            .unwrap();
    }
    w.commit().unwrap();
}

/// The child half: commits the parts it is given; kills itself with SIGKILL after step
/// `kill_at` (0: never; the parent kills it at a random moment instead).
#[test]
fn child_commits_and_dies() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        println!("child_commits_and_dies: run only as a child of killed_committers_leave_a_consistent_collection");
        return;
    };
    let mut it = spec.split('|');
    let url = it.next().unwrap().to_string();
    let endpoint = it.next().unwrap().to_string();
    let kill_at: usize = it.next().unwrap().parse().unwrap();
    let parts: Vec<String> = it.map(str::to_string).collect();
    let count = AtomicUsize::new(0);
    let options = CommitOptions::new().on_step(move |_| {
        if count.fetch_add(1, Ordering::SeqCst) + 1 == kill_at {
            let _ = Command::new("kill")
                .args(["-9", &std::process::id().to_string()])
                .status();
            std::thread::sleep(Duration::from_secs(60));
        }
    });
    let t = TransferOptions::default().store(s3::options_for(&endpoint));
    commit_url(&url, &parts, options, &t).unwrap();
}

fn open(server: &s3::S3Server, url: &str, cache: &Path) -> zrecord::Result<Dataset> {
    zrecord::remote::open(
        url,
        ReadConfig::default(),
        RemoteConfig::default()
            .store(server.options())
            .cache_dir(cache),
    )
}

/// The part ids of the collection (none if it has no manifest yet), every record read and
/// checked to name its part.
fn consistent(server: &s3::S3Server, url: &str, cache: &Path, context: &str) -> Vec<String> {
    let ds = match open(server, url, cache) {
        Ok(ds) => ds,
        Err(Error::NotADataset { .. }) => return Vec::new(),
        Err(e) => panic!("{context}: {e}"),
    };
    let snap = ds.snapshot();
    let ids: Vec<String> = snap.part_ids().to_vec();
    let batch = ds
        .gather_blocking(&(0..ds.len()).collect::<Vec<_>>())
        .unwrap_or_else(|e| panic!("{context}: {e}"));
    let mut at = 0usize;
    for (id, part) in ids.iter().zip(snap.parts()) {
        for i in 0..part.len() {
            let want = format!("{id}/{i}").repeat(40);
            assert_eq!(batch.get(at, 0).unwrap(), want.as_bytes(), "{context}");
            at += 1;
        }
    }
    ids
}

#[test]
fn killed_committers_leave_a_consistent_collection() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let exe = std::env::current_exe().unwrap();
    let t = TransferOptions::default().store(server.options());
    // Steps 1..=STEPS, then three kills at random moments.
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    for round in 1..=STEPS + 3 {
        let kill_at = if round <= STEPS { round } else { 0 };
        let url = server.url(&format!("kills/{round}"));
        let dir = tmp.path().join(format!("round{round}"));
        std::fs::create_dir(&dir).unwrap();
        let first = dir.join("first");
        make(&first, 5);
        commit_url(
            &url,
            &[first.display().to_string()],
            CommitOptions::new(),
            &t,
        )
        .unwrap();
        let parts: Vec<PathBuf> = ["a", "b"].iter().map(|n| dir.join(n)).collect();
        for p in &parts {
            make(p, 400);
        }
        let given: Vec<String> = parts.iter().map(|p| p.display().to_string()).collect();
        let mut spec = format!("{url}|{}|{kill_at}", server.endpoint);
        for g in &given {
            spec.push('|');
            spec.push_str(g);
        }
        let mut child = Command::new(&exe)
            .args(["--exact", "child_commits_and_dies", "--nocapture"])
            .env(CHILD_ENV, spec)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        if kill_at == 0 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            std::thread::sleep(Duration::from_millis(20 + x % 400));
            let _ = child.kill();
        }
        let status = child.wait().unwrap();
        let context = format!("round {round} (kill after step {kill_at}), {status}");
        let ids = consistent(&server, &url, &cache, &context);
        assert!(
            ids == ["first"] || ids == ["first", "a", "b"],
            "{context}: {ids:?}"
        );
        // The same commit again: each part once, nothing lost.
        let r = commit_url(&url, &given, CommitOptions::new(), &t).unwrap();
        assert_eq!(r.ids, ["a", "b"], "{context}");
        assert!(
            r.number <= 2,
            "{context}: a retry created a second manifest: {r:?}"
        );
        let ids = consistent(&server, &url, &cache, &context);
        assert_eq!(ids, ["first", "a", "b"], "{context}");
    }
}
