//! A committer killed with SIGKILL at any step of a commit (after checking its parts, after
//! moving each, after writing the next manifest, after linking it, or at a random moment) leaves
//! a collection that opens to its last complete manifest, every part of which is present and
//! readable; the same commit run again completes it with each part exactly once, nothing
//! committed before lost. Parts come from the same file system (moved by rename) and from
//! /dev/shm (copied across file systems) in turn.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use zrecord::collection::{commit, CommitOptions};
use zrecord::{DType, Dataset, Field, Schema, Writer, WriterConfig};

const CHILD_ENV: &str = "ZRECORD_TEST_COLLECTION_KILL_CHILD";
/// Steps of a commit of two parts: checked, placed ×2, written, linked.
const STEPS: usize = 5;

fn make(path: &Path, records: u16) {
    let schema = Schema::new().field(Field::new("x", DType::Bytes));
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
    let root = PathBuf::from(it.next().unwrap());
    let kill_at: usize = it.next().unwrap().parse().unwrap();
    let parts: Vec<PathBuf> = it.map(PathBuf::from).collect();
    let count = AtomicUsize::new(0);
    let options = CommitOptions::new().on_step(move |_| {
        if count.fetch_add(1, Ordering::SeqCst) + 1 == kill_at {
            let _ = Command::new("kill")
                .args(["-9", &std::process::id().to_string()])
                .status();
            std::thread::sleep(Duration::from_secs(60));
        }
    });
    commit(&root, &parts, options).unwrap();
}

/// The ids of the latest manifest's parts, if there is one; checks the manifests are numbered
/// without a gap and the collection opens with every part readable.
fn consistent(root: &Path, context: &str) -> Vec<String> {
    let dir = root.join("_collection");
    if !dir.is_dir() {
        return Vec::new();
    }
    let mut numbers: Vec<u64> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".json")?.parse().ok()
        })
        .collect();
    numbers.sort_unstable();
    if numbers.is_empty() {
        return Vec::new();
    }
    assert_eq!(
        numbers,
        (1..=numbers.len() as u64).collect::<Vec<_>>(),
        "{context}"
    );
    let ds = Dataset::open(root).unwrap_or_else(|e| panic!("{context}: open: {e}"));
    let all: Vec<u64> = (0..ds.len()).collect();
    let batch = ds
        .gather_blocking(&all)
        .unwrap_or_else(|e| panic!("{context}: read: {e}"));
    let snap = ds.snapshot();
    let mut at = 0;
    for (id, part) in snap.part_ids().iter().zip(snap.parts()) {
        for i in 0..part.len() {
            let want = format!("{id}/{i}").repeat(40);
            assert_eq!(batch.get(at, 0).unwrap(), want.as_bytes(), "{context}");
            at += 1;
        }
    }
    snap.part_ids().to_vec()
}

#[test]
fn killed_committers_leave_a_consistent_collection() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("c");
    let shm = tempfile::Builder::new()
        .prefix("zrecord-collection-kill")
        .tempdir_in("/dev/shm")
        .ok();
    let exe = std::env::current_exe().unwrap();
    let mut committed: Vec<String> = Vec::new();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let rounds = 3 * STEPS + 20;
    for round in 0..rounds {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Steps 1..=5 three times each, then kills at random moments.
        let kill_at = if round < 3 * STEPS {
            round % STEPS + 1
        } else {
            0
        };
        let scratch: &Path = match (&shm, round % 2) {
            (Some(s), 1) => s.path(),
            _ => tmp.path(),
        };
        let names = [format!("r{round}-a"), format!("r{round}-b")];
        let parts: Vec<PathBuf> = names.iter().map(|n| scratch.join(n)).collect();
        for (k, p) in parts.iter().enumerate() {
            make(p, 1 + (round as u16 * 7 + k as u16 * 3) % 40);
        }
        let spec = std::iter::once(root.display().to_string())
            .chain(std::iter::once(kill_at.to_string()))
            .chain(parts.iter().map(|p| p.display().to_string()))
            .collect::<Vec<_>>()
            .join("|");
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "child_commits_and_dies",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, spec)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        if kill_at == 0 {
            std::thread::sleep(Duration::from_micros(2_000 + x % 40_000));
            let _ = child.kill();
        }
        let _ = child.wait().unwrap();
        let context = format!("round {round} (kill after step {kill_at})");
        let seen = consistent(&root, &context);
        // Nothing committed before is lost, and the latest manifest holds it first.
        assert!(seen.len() >= committed.len(), "{context}");
        assert_eq!(seen[..committed.len()], committed[..], "{context}");

        // The same commit again completes it.
        let r = commit(&root, &parts, CommitOptions::default())
            .unwrap_or_else(|e| panic!("{context}: retry: {e}"));
        assert_eq!(r.ids, names.to_vec(), "{context}");
        // Killed once the manifest was linked, the commit was complete: the retry adds
        // nothing. Killed before, nothing of it was visible: the retry adds both parts.
        match kill_at {
            5 => assert!(r.added.is_empty(), "{context}: {r:?}"),
            1..=4 => assert_eq!(r.added, names.to_vec(), "{context}"),
            _ => {}
        }
        committed.extend(names.iter().cloned());
        let seen = consistent(&root, &context);
        assert_eq!(seen, committed, "{context}: each part exactly once");
        for p in &parts {
            assert!(!p.exists(), "{context}: {} was not moved", p.display());
        }
    }
}
