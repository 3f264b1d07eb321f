//! Committers, writers, `gc` with a 0 s limit and readers racing on one local collection,
//! against a plain model: every part a successful commit reported reads back byte-exact, in
//! every snapshot a reader opens and at the end; a commit fails only where the model allows it
//! (a part written in place under `parts/` that nobody held when `gc` ran); and `gc` removes only
//! what no manifest and no live process holds: after a last run, `parts/` holds exactly the
//! committed parts. Parts come from this file system (renamed) and from /dev/shm (copied).
//! `ZRECORD_HEAVY=1` runs 24 cases instead of 4.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/parts.rs"]
mod parts;

use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use zrecord::collection::{commit, gc, CommitOptions, GcOptions};
use zrecord::{DType, Dataset, Error, Writer, WriterConfig};

/// Where a part is written before its commit.
#[derive(Clone, Copy, Debug)]
enum From {
    /// This file system: renamed under `parts/`.
    Here,
    /// /dev/shm: copied under `parts/`.
    Shm,
    /// Under `parts/` itself, by a writer that closes before the commit takes it.
    InPlace,
    /// Under `parts/`, never committed (what a killed committer leaves): `gc` removes it.
    Orphan,
}

fn from() -> impl Strategy<Value = From> {
    prop_oneof![
        3 => Just(From::Here),
        3 => Just(From::Shm),
        1 => Just(From::InPlace),
        1 => Just(From::Orphan),
    ]
}

/// The bytes of record `i` of part `name`.
fn record(name: &str, i: u32) -> Vec<u8> {
    format!("{name}/{i}/")
        .repeat(1 + i as usize % 5)
        .into_bytes()
}

fn write(dir: &Path, name: &str, n: u32) -> PathBuf {
    let p = dir.join(name);
    let schema = zrecord::Schema::new().field(zrecord::Field::new("x", DType::Bytes));
    let mut w = Writer::create(&p, &schema, WriterConfig::default()).unwrap();
    for i in 0..n {
        w.append(&[record(name, i)]).unwrap();
    }
    w.commit().unwrap();
    p
}

/// Checks every record of the collection at `root` against the names its parts carry, and
/// that each part committed by then (`must`) is in it. Returns the part ids it holds.
fn check(root: &Path, sizes: &BTreeMap<String, u32>) -> BTreeSet<String> {
    let ds = match Dataset::open(root) {
        Ok(ds) => ds,
        // Before the first manifest: nothing to read yet.
        Err(Error::NotADataset { .. }) => return BTreeSet::new(),
        Err(e) => panic!("open: {e}"),
    };
    let got = parts::records(&ds);
    let snap = ds.snapshot();
    let mut at = 0;
    let mut ids = BTreeSet::new();
    for (id, part) in snap.part_ids().iter().zip(snap.parts()) {
        assert_eq!(Some(&(part.len() as u32)), sizes.get(id), "part {id}");
        for i in 0..part.len() as u32 {
            assert_eq!(got[at], record(id, i), "part {id} record {i}");
            at += 1;
        }
        ids.insert(id.clone());
    }
    ids
}

fn run(plans: Vec<Vec<(From, u32)>>) {
    let tmp = tempfile::tempdir().unwrap();
    let shm = tempfile::Builder::new()
        .prefix("zrecord-race-model")
        .tempdir_in("/dev/shm")
        .expect("this test needs /dev/shm to copy parts across file systems");
    let root = tmp.path().join("c");
    std::fs::create_dir_all(tmp.path().join("src")).unwrap();
    // The sizes every part is written with, by name (names are unique, so ids are names).
    let mut sizes = BTreeMap::new();
    for (c, plan) in plans.iter().enumerate() {
        for (k, (_, n)) in plan.iter().enumerate() {
            sizes.insert(format!("c{c}p{k}"), *n);
        }
    }
    let sizes = Arc::new(sizes);
    let done = Arc::new(AtomicBool::new(false));
    let gc_thread = {
        let (done, r) = (Arc::clone(&done), root.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                if r.join("_collection").is_dir() {
                    gc(r.to_str().unwrap(), Duration::ZERO, &GcOptions::new())
                        .unwrap_or_else(|e| panic!("gc: {e}"));
                } else {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        })
    };
    let reader = {
        let (done, r, sizes) = (Arc::clone(&done), root.clone(), Arc::clone(&sizes));
        std::thread::spawn(move || {
            let mut seen = BTreeSet::new();
            while !done.load(Ordering::SeqCst) {
                let now = check(&r, &sizes);
                // Parts are never taken out of a collection: each snapshot holds the last's.
                assert!(seen.is_subset(&now), "a committed part vanished");
                seen = now;
            }
        })
    };
    let committers: Vec<_> = plans
        .into_iter()
        .enumerate()
        .map(|(c, plan)| {
            let (root, src, shm) = (
                root.clone(),
                tmp.path().join("src"),
                shm.path().to_path_buf(),
            );
            std::thread::spawn(move || {
                let mut committed = Vec::new();
                for (k, (from, n)) in plan.into_iter().enumerate() {
                    let name = format!("c{c}p{k}");
                    let dir = match from {
                        From::Here => write(&src, &name, n),
                        From::Shm => write(&shm, &name, n),
                        From::InPlace | From::Orphan => {
                            if !root.join("parts").is_dir() {
                                // No collection yet: this part comes from here instead.
                                write(&src, &name, n)
                            } else {
                                write(&root.join("parts"), &name, n)
                            }
                        }
                    };
                    if matches!(from, From::Orphan) && dir.starts_with(&root) {
                        continue;
                    }
                    match commit(&root, &[&dir], CommitOptions::new()) {
                        Ok(report) => {
                            assert_eq!(report.ids, vec![name.clone()]);
                            committed.push(name);
                        }
                        // Allowed only for a part nobody held under parts/: gc took it.
                        Err(Error::NotADataset { .. })
                            if matches!(from, From::InPlace) && dir.starts_with(&root) => {}
                        Err(e) => panic!("commit of {name} ({from:?}): {e}"),
                    }
                }
                committed
            })
        })
        .collect();
    let mut committed = BTreeSet::new();
    for t in committers {
        committed.extend(t.join().unwrap());
    }
    done.store(true, Ordering::SeqCst);
    gc_thread.join().unwrap();
    reader.join().unwrap();
    if committed.is_empty() {
        return;
    }
    assert_eq!(check(&root, &sizes), committed);
    // Nothing is held any more: a last gc leaves exactly the committed parts.
    gc(root.to_str().unwrap(), Duration::ZERO, &GcOptions::new()).unwrap();
    let under: BTreeSet<String> = std::fs::read_dir(root.join("parts"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(under, committed);
}

fn cases() -> u32 {
    if std::env::var_os("ZRECORD_HEAVY").is_some() {
        24
    } else {
        4
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn racing_commits_gc_and_readers_keep_every_committed_part(
        plans in proptest::collection::vec(
            proptest::collection::vec((from(), 1u32..5), 1..7),
            2..4,
        )
    ) {
        run(plans);
    }
}
