//! A commit that fails after placing its parts leaves each where the caller gave it: two first
//! commits racing with different schemas (the loser's rebase finds the winner's schema), from
//! this file system (the part is renamed back) and from /dev/shm (the copy is removed, the
//! original was never touched). Nothing is lost: the loser's part reads back whole from its own
//! path, and a `gc` with a 0 s limit afterwards removes nothing either collection needs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/parts.rs"]
mod parts;

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;
use zrecord::collection::{commit, gc, CommitOptions, CommitStep, GcOptions};
use zrecord::{DType, Dataset, Error};

fn make(dir: &Path, name: &str, dtype: DType) -> PathBuf {
    let p = dir.join(name);
    parts::write(&p, dtype, None, 5, |i| {
        let mut v = format!("{name}/{i:03}").into_bytes();
        v.resize(8, b'.');
        v
    });
    p
}

/// The loser, of dtype u8, is stopped after it placed its part until the winner, of dtype
/// bytes, has committed; then its manifest number is taken, it rebases, and its schema differs.
fn race(scratch: &Path, root: &Path, tag: &str) {
    let loser = make(scratch, &format!("loser-{tag}"), DType::U8);
    let winner = make(scratch, &format!("winner-{tag}"), DType::Bytes);
    let expected = parts::records(&Dataset::open(&loser).unwrap());
    let (placed_tx, placed_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let go_rx = std::sync::Mutex::new(go_rx);
    let options = CommitOptions::new().on_step(move |s| {
        if s == (CommitStep::PartPlaced { index: 0 }) {
            let _ = placed_tx.send(());
            let _ = go_rx.lock().unwrap().recv_timeout(Duration::from_secs(60));
        }
    });
    let (root2, loser2) = (root.to_path_buf(), loser.clone());
    let t = std::thread::spawn(move || commit(&root2, &[&loser2], options));
    placed_rx.recv().unwrap();
    commit(root, &[&winner], CommitOptions::new()).unwrap();
    go_tx.send(()).unwrap();
    let err = t.join().unwrap().unwrap_err();
    assert!(matches!(err, Error::PartMismatch { .. }), "{err}");

    // The loser's part is back where it was given, whole; nothing of it under parts/.
    let back = Dataset::open(&loser).unwrap_or_else(|e| panic!("{tag}: loser not back: {e}"));
    assert_eq!(parts::records(&back), expected, "{tag}");
    drop(back);
    let under: Vec<String> = std::fs::read_dir(root.join("parts"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(under, vec![format!("winner-{tag}")], "{tag}");
    gc(root.to_str().unwrap(), Duration::ZERO, &GcOptions::new()).unwrap();
    assert_eq!(Dataset::open(root).unwrap().len(), 5);
    assert_eq!(parts::records(&Dataset::open(&loser).unwrap()), expected);
    // The loser commits elsewhere without trouble.
    let other = root.with_extension("other");
    commit(&other, &[&loser], CommitOptions::new()).unwrap();
    assert_eq!(parts::records(&Dataset::open(&other).unwrap()), expected);
}

#[test]
fn a_renamed_part_goes_back_when_its_commit_fails() {
    let tmp = tempfile::tempdir().unwrap();
    race(tmp.path(), &tmp.path().join("c"), "renamed");
}

#[test]
fn a_copied_part_is_removed_and_its_original_kept_when_its_commit_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let shm = tempfile::Builder::new()
        .prefix("zrecord-moves-back")
        .tempdir_in("/dev/shm")
        .expect("this test needs /dev/shm to copy parts across file systems");
    race(shm.path(), &tmp.path().join("c"), "copied");
}
