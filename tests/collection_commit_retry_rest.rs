//! A cross-device commit killed while it removed the original of a copy its manifest already
//! names (the original's `meta.json` gone, the rest still there) is completed by running the
//! same commit again: it adds nothing, and removes the rest.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/parts.rs"]
mod parts;

use std::path::{Path, PathBuf};
use zrecord::collection::{commit, CommitOptions, CommitStep};
use zrecord::{DType, Dataset};

fn make(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    parts::write(&p, DType::U8, None, 5, |i| vec![i as u8; 8]);
    p
}

fn cp_r(from: &Path, to: &Path) {
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(st.success());
}

#[test]
fn a_retry_after_a_kill_in_the_originals_removal_adds_nothing_and_cleans_up() {
    let away = tempfile::Builder::new()
        .prefix("zrecord-retry-rest")
        .tempdir_in("/dev/shm")
        .expect("this test needs /dev/shm to copy parts across file systems");
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("coll");
    let src = make(away.path(), "shard0");
    let bak = away.path().join("bak");
    let (s2, b2) = (src.clone(), bak.clone());
    let options = CommitOptions::new().on_step(move |s| {
        if s == CommitStep::ManifestLinked {
            cp_r(&s2, &b2);
        }
    });
    commit(&root, &[&src], options).unwrap();
    assert!(!src.exists());
    // The state a SIGKILL leaves after remove_part(original) removed meta.json only.
    std::fs::rename(&bak, &src).unwrap();
    std::fs::remove_file(src.join("meta.json")).unwrap();
    let retry = commit(&root, &[&src], CommitOptions::new());
    eprintln!(
        "retry: {:?}",
        retry.as_ref().map(|r| (r.ids.clone(), r.added.clone()))
    );
    assert!(
        retry.is_ok(),
        "retry of a commit that happened: {}",
        retry.unwrap_err()
    );
    let retry = retry.unwrap();
    assert!(retry.added.is_empty(), "{:?}", retry.added);
    assert_eq!(Dataset::open(&root).unwrap().len(), 5);
    // What was left of the original is gone.
    assert!(!src.exists());
}
