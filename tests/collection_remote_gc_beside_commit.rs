//! `gc --older-than 0s` of a collection on an object store never removes what a live commit
//! holds: run to completion inside a commit, after the commit pushed its first part under
//! `parts/` and before any manifest names it, it removes none of the commit's parts; the commit
//! lands and every record of every part reads back byte-exact.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/parts.rs"]
mod parts;
#[path = "support/s3.rs"]
mod s3;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use zrecord::collection::{commit_url, gc, CommitOptions, CommitStep, GcOptions, GcReport};
use zrecord::remote::{RemoteConfig, TransferOptions};
use zrecord::{DType, ReadConfig};

/// The bytes of record `i` of part `name`.
fn record(name: &str, i: u32) -> Vec<u8> {
    format!("{name}/{i}/")
        .repeat(1 + i as usize % 7)
        .into_bytes()
}

/// A part named `name` under `dir` holding `n` records.
fn make(dir: &Path, name: &str, n: u32) -> PathBuf {
    let p = dir.join(name);
    parts::write(&p, DType::Bytes, Some(4 << 10), n, |i| record(name, i));
    p
}

#[test]
fn gc_inside_a_commit_removes_none_of_its_parts() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let prefix = "colls/gc-beside";
    let url = server.url(prefix);
    let t = TransferOptions::default().store(server.options());
    // gc needs a collection: a first commit creates it.
    let first = make(tmp.path(), "first", 3);
    commit_url(
        &url,
        &[first.display().to_string()],
        CommitOptions::new(),
        &t,
    )
    .unwrap();

    let names = ["p0", "p1", "p2"];
    let given: Vec<String> = names
        .iter()
        .map(|n| make(tmp.path(), n, 40).display().to_string())
        .collect();
    let ran: Arc<Mutex<Option<zrecord::Result<GcReport>>>> = Arc::new(Mutex::new(None));
    let options = {
        let (ran, url, store) = (Arc::clone(&ran), url.clone(), server.options());
        CommitOptions::new().on_step(move |s| {
            if s != (CommitStep::PartPlaced { index: 0 }) {
                return;
            }
            // Part p0 is under parts/ and no manifest names it yet; its objects are older
            // than 0 s once a millisecond has passed.
            std::thread::sleep(Duration::from_millis(20));
            let report = gc(&url, Duration::ZERO, &GcOptions::new().store(store.clone()));
            *ran.lock().unwrap() = Some(report);
        })
    };
    let report = commit_url(&url, &given, options, &t).unwrap();
    assert_eq!(report.ids, names, "{report:?}");
    let gc_report = ran
        .lock()
        .unwrap()
        .take()
        .expect("the commit reached PartPlaced { index: 0 }")
        .unwrap();
    for id in names.iter().chain(&["first"]) {
        assert!(
            !gc_report.removed.iter().any(|r| r == id),
            "gc removed part {id} beside the commit that names it: {gc_report:?}"
        );
    }

    // Every record of every part, byte-exact, in commit order.
    let ds = zrecord::remote::open(
        &url,
        ReadConfig::default(),
        RemoteConfig::default()
            .store(server.options())
            .cache_dir(tmp.path().join("cache")),
    )
    .unwrap();
    assert_eq!(ds.len(), 3 + 3 * 40);
    let got = parts::records(&ds);
    let mut want: Vec<Vec<u8>> = (0..3).map(|i| record("first", i)).collect();
    for n in names {
        want.extend((0..40).map(|i| record(n, i)));
    }
    assert_eq!(got.len(), want.len());
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "record {k}");
    }

    // The commit left nothing that holds its parts, and a later gc removes no named part.
    let after = gc(
        &url,
        Duration::ZERO,
        &GcOptions::new().store(server.options()),
    )
    .unwrap();
    assert!(after.removed.is_empty(), "{after:?}");
    let leases = server.object_file(&format!("{prefix}/_collection/leases"));
    let left: Vec<_> = std::fs::read_dir(&leases)
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "leases left behind: {left:?}");
}
