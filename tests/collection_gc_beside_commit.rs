//! `gc` never removes what a live commit owns, whatever its age limit: a part placed (renamed,
//! or copied from another file system) but not yet named by a manifest, a copy under
//! `parts/.incoming-…`, a temporary manifest between its fsync and its link. A commit that
//! reports success has every part intact. Run with `gc --older-than 0s` stopped inside a commit
//! at each of those steps, and with `zrecord gc --older-than 0s` looping in another process
//! while two threads commit parts from this file system and from /dev/shm.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/parts.rs"]
mod parts;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use zrecord::collection::{commit, gc, CommitOptions, CommitStep, GcOptions};
use zrecord::{DType, Dataset};

/// A part named `name` under `dir` holding `n` records `name/i`.
fn make(dir: &Path, name: &str, n: u32) -> PathBuf {
    let p = dir.join(name);
    parts::write(&p, DType::Bytes, None, n, |i| {
        format!("{name}/{i}").repeat(30).into_bytes()
    });
    p
}

/// Every record of the collection at `root`, checked against the names its parts were made
/// with: part after part, `name/i` for each record.
fn check_all(root: &Path, names: &[String], per_part: u32) {
    let ds = Dataset::open(root).unwrap();
    assert_eq!(ds.len(), names.len() as u64 * u64::from(per_part));
    let got = parts::records(&ds);
    let snap = ds.snapshot();
    let mut at = 0;
    for id in snap.part_ids() {
        let name = names
            .iter()
            .find(|n| id.starts_with(n.as_str()))
            .unwrap_or_else(|| panic!("unknown part {id}"));
        for i in 0..per_part {
            assert_eq!(
                got[at],
                format!("{name}/{i}").repeat(30).into_bytes(),
                "{id}"
            );
            at += 1;
        }
    }
}

/// A scratch directory on another file system than `tmp` (/dev/shm), so parts are copied.
fn other_fs(tmp: &Path) -> tempfile::TempDir {
    let shm = tempfile::Builder::new()
        .prefix("zrecord-gc-beside")
        .tempdir_in("/dev/shm")
        .expect("this test needs /dev/shm (a tmpfs) to copy parts across file systems");
    use std::os::unix::fs::MetadataExt;
    assert_ne!(
        std::fs::metadata(shm.path()).unwrap().dev(),
        std::fs::metadata(tmp).unwrap().dev(),
        "/dev/shm must be another file system than the test's scratch directory"
    );
    shm
}

/// Commits `parts` to `root`, running `gc(root, 0 s)` on another thread when the commit reaches
/// `at`; the commit goes on after 300 ms (or once gc returns). Returns the gc's result.
fn commit_with_gc_at(root: &Path, parts: &[PathBuf], at: CommitStep) -> zrecord::Result<()> {
    let gc_thread: Arc<Mutex<Option<std::thread::JoinHandle<_>>>> = Arc::new(Mutex::new(None));
    let slot = Arc::clone(&gc_thread);
    let r = root.to_str().unwrap().to_string();
    let options = CommitOptions::new().on_step(move |s| {
        if s != at {
            return;
        }
        let r = r.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let h = std::thread::spawn(move || {
            let out = gc(&r, Duration::ZERO, &GcOptions::new());
            let _ = tx.send(());
            out
        });
        // Long enough for an unguarded gc to finish its work on these few small parts.
        let _ = rx.recv_timeout(Duration::from_millis(300));
        *slot.lock().unwrap() = Some(h);
    });
    let report = commit(root, parts, options)?;
    let h = gc_thread
        .lock()
        .unwrap()
        .take()
        .expect("the step was reached");
    let gc_report = h.join().unwrap()?;
    for id in &report.ids {
        assert!(
            !gc_report.removed.contains(id),
            "gc removed committed part {id}"
        );
    }
    Ok(())
}

#[test]
fn a_temporary_manifest_is_never_removed_under_a_live_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("c");
    let names: Vec<String> = (0..3).map(|i| format!("t{i}")).collect();
    let given: Vec<PathBuf> = names.iter().map(|n| make(tmp.path(), n, 4)).collect();
    commit_with_gc_at(&root, &given, CommitStep::ManifestWritten).unwrap();
    check_all(&root, &names, 4);
}

#[test]
fn a_renamed_part_is_never_removed_before_its_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("c");
    let names: Vec<String> = (0..3).map(|i| format!("r{i}")).collect();
    let given: Vec<PathBuf> = names.iter().map(|n| make(tmp.path(), n, 4)).collect();
    commit_with_gc_at(&root, &given, CommitStep::PartPlaced { index: 0 }).unwrap();
    check_all(&root, &names, 4);
}

#[test]
fn a_copied_part_is_never_removed_before_its_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let shm = other_fs(tmp.path());
    let root = tmp.path().join("c");
    let names: Vec<String> = (0..3).map(|i| format!("x{i}")).collect();
    let given: Vec<PathBuf> = names.iter().map(|n| make(shm.path(), n, 4)).collect();
    commit_with_gc_at(&root, &given, CommitStep::PartPlaced { index: 1 }).unwrap();
    check_all(&root, &names, 4);
    // The originals go once the manifest names the copies.
    for p in &given {
        assert!(!p.exists(), "{} is left after its commit", p.display());
    }
}

/// `zrecord gc --older-than 0s` in a loop in another process, while two threads commit 12
/// parts each, one at a time, half of them copied from /dev/shm: every commit succeeds and
/// every record reads back.
#[test]
fn gc_in_a_loop_in_another_process_loses_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let shm = other_fs(tmp.path());
    let root = tmp.path().join("c");
    // The collection exists before the gc loop starts.
    let first = make(tmp.path(), "first", 2);
    commit(&root, &[&first], CommitOptions::new()).unwrap();
    let stop = root.with_extension("stop");
    let script = format!(
        "while [ ! -e '{stop}' ]; do '{exe}' gc '{root}' --older-than 0s >/dev/null || exit 1; done",
        stop = stop.display(),
        exe = env!("CARGO_BIN_EXE_zrecord"),
        root = root.display()
    );
    let mut gc_loop = Command::new("sh")
        .args(["-c", &script])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut names = vec!["first".to_string()];
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let (root, src_tmp, src_shm) = (
                root.clone(),
                tmp.path().to_path_buf(),
                shm.path().to_path_buf(),
            );
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                for k in 0..12 {
                    let name = format!("w{t}p{k}");
                    let dir = if k % 2 == 0 { &src_shm } else { &src_tmp };
                    let p = make(dir, &name, 3);
                    commit(&root, &[&p], CommitOptions::new())
                        .unwrap_or_else(|e| panic!("commit of {name}: {e}"));
                    mine.push(name);
                }
                mine
            })
        })
        .collect();
    for t in threads {
        names.extend(t.join().unwrap());
    }
    std::fs::write(&stop, b"").unwrap();
    let status = gc_loop.wait().unwrap();
    assert!(status.success(), "a gc run failed beside the commits");
    let ds = Dataset::open(&root).unwrap();
    assert_eq!(ds.snapshot().part_ids().len(), names.len());
    let got = parts::records(&ds);
    let snap = ds.snapshot();
    let mut at = 0;
    for (id, part) in snap.part_ids().iter().zip(snap.parts()) {
        for i in 0..part.len() {
            assert_eq!(got[at], format!("{id}/{i}").repeat(30).into_bytes(), "{id}");
            at += 1;
        }
    }
}
