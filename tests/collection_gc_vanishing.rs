//! `gc` skips what vanishes while it looks: a writer committing a part in place under `parts/`
//! renames its `meta.json.tmp` over `meta.json` (and a second `gc` removes what the first was
//! about to stat) while two `gc` runs with a 0 s limit loop beside it. Every run succeeds, and
//! the part being written is kept (its writer holds it).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/parts.rs"]
mod parts;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use zrecord::collection::{commit, gc, CommitOptions, GcOptions};
use zrecord::{DType, Dataset, Writer, WriterConfig};

#[test]
fn gc_runs_beside_a_writer_under_parts_never_fail() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("c");
    let first = tmp.path().join("first");
    parts::write(&first, DType::Bytes, None, 2, |i| vec![i as u8; 16]);
    commit(&root, &[&first], CommitOptions::new()).unwrap();
    let part = root.join("parts").join("in-place");
    parts::write(&part, DType::Bytes, None, 1, |_| vec![7; 16]);

    // Held before any gc runs: an unheld, unnamed part is removed by a 0 s limit.
    let mut w = Writer::open(&part, WriterConfig::default()).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let gcs: Vec<_> = (0..2)
        .map(|_| {
            let (done, r) = (Arc::clone(&done), root.to_str().unwrap().to_string());
            std::thread::spawn(move || {
                let mut runs = 0u32;
                while !done.load(Ordering::SeqCst) {
                    gc(&r, Duration::ZERO, &GcOptions::new())
                        .unwrap_or_else(|e| panic!("gc run {runs}: {e}"));
                    runs += 1;
                }
                runs
            })
        })
        .collect();
    for i in 0..300u32 {
        w.append(&[i.to_le_bytes().as_slice()]).unwrap();
        w.commit().unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let runs: u32 = gcs.into_iter().map(|t| t.join().unwrap()).sum();
    drop(w);
    assert!(runs > 0);
    // The part, still unnamed and no longer held, is committed whole.
    commit(&root, &[&part], CommitOptions::new()).unwrap();
    assert_eq!(Dataset::open(&root).unwrap().len(), 2 + 301);
}
