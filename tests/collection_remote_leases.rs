//! Leases of a collection on an object store (`_collection/leases/`, docs/FORMAT.md) do what
//! they say, on s3s-fs with leases written by hand: `gc` keeps every part a live commit lease
//! names, whatever its limit, and once the lease is dead (older than `LEASE_TTL`) removes the
//! part and the lease; a live lease `gc` cannot read keeps every part; a commit takes no part a
//! live `gc` lease names (a local part goes under another id and is pushed again, a part given
//! by URL is no dataset), and neither does a push of a whole collection; a live `gc` lease a
//! commit cannot read stops the commit, naming it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/parts.rs"]
mod parts;
#[path = "support/s3.rs"]
mod s3;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use zrecord::collection::{
    commit, commit_url, gc, CommitOptions, CommitStep, GcOptions, LEASE_TTL,
};
use zrecord::remote::{push, RemoteConfig, TransferOptions};
use zrecord::{DType, Error, ReadConfig};

/// The bytes of record `i` of part `name`.
fn record(name: &str, i: u32) -> Vec<u8> {
    format!("{name}/{i}").repeat(3).into_bytes()
}

fn make(dir: &Path, name: &str, n: u32) -> PathBuf {
    let p = dir.join(name);
    parts::write(&p, DType::Bytes, None, n, |i| record(name, i));
    p
}

/// A lease's object: `kind` ("commit" or "gc") naming `parts`, in the envelope of
/// docs/FORMAT.md.
fn lease(kind: &str, parts: &[&str]) -> Vec<u8> {
    let body = serde_json::json!({
        "format": "zrecord-collection-lease",
        "version": 1,
        "kind": kind,
        "nonce": "00000000000000aa",
        "host": "test",
        "pid": 1,
        "created_unix_ms": 0,
        "parts": parts,
    })
    .to_string();
    let crc = zrecord::diagnostics::crc32c(body.as_bytes());
    format!("{{\"lease\":{body},\"crc32c\":{crc}}}").into_bytes()
}

/// Writes object `key` of the bucket straight into s3s-fs's folder.
fn put(server: &s3::S3Server, key: &str, bytes: &[u8]) {
    let file = server.object_file(key);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(file, bytes).unwrap();
}

/// A collection at `prefix` holding part `first`, and a part `orphan` pushed under its
/// `parts/` that no manifest names.
fn collection(server: &s3::S3Server, tmp: &Path, prefix: &str) -> String {
    let url = server.url(prefix);
    let t = TransferOptions::default().store(server.options());
    let first = make(tmp, "first", 2);
    commit_url(
        &url,
        &[first.display().to_string()],
        CommitOptions::new(),
        &t,
    )
    .unwrap();
    let orphan = make(tmp, "orphan", 2);
    push(&orphan, &format!("{url}/parts/orphan"), &t).unwrap();
    url
}

fn gc_at(server: &s3::S3Server, url: &str, now: SystemTime) -> zrecord::collection::GcReport {
    gc(
        url,
        Duration::ZERO,
        &GcOptions::new().now(now).store(server.options()),
    )
    .unwrap()
}

#[test]
fn gc_keeps_what_a_live_commit_lease_names_until_it_is_dead() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let prefix = "leases/live";
    let url = collection(&server, tmp.path(), prefix);
    let key = format!("{prefix}/_collection/leases/commit-00000000000000aa.json");
    put(&server, &key, &lease("commit", &["orphan"]));
    std::thread::sleep(Duration::from_millis(20));

    let now = SystemTime::now();
    let r = gc_at(&server, &url, now);
    assert!(r.removed.is_empty(), "{r:?}");
    assert!(r.kept.contains(&"orphan".to_string()), "{r:?}");
    assert!(
        server.object_file(&key).is_file(),
        "a live lease was removed"
    );

    // The holder died: once the lease is older than LEASE_TTL, the part goes, and the lease.
    let r = gc_at(&server, &url, now + LEASE_TTL + Duration::from_secs(60));
    assert_eq!(r.removed, ["orphan"], "{r:?}");
    assert!(r.leftovers >= 1, "{r:?}");
    assert!(!server.object_file(&key).is_file(), "a dead lease was kept");
}

#[test]
fn a_live_lease_gc_cannot_read_keeps_every_part() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let prefix = "leases/unreadable";
    let url = collection(&server, tmp.path(), prefix);
    let mut bytes = lease("commit", &["someone-else"]);
    let at = bytes.len() / 2;
    bytes[at] ^= 0x20;
    put(
        &server,
        &format!("{prefix}/_collection/leases/commit-00000000000000bb.json"),
        &bytes,
    );
    std::thread::sleep(Duration::from_millis(20));
    let now = SystemTime::now();
    let r = gc_at(&server, &url, now);
    assert!(r.removed.is_empty(), "{r:?}");
    // Dead, it holds nothing.
    let r = gc_at(&server, &url, now + LEASE_TTL + Duration::from_secs(60));
    assert_eq!(r.removed, ["orphan"], "{r:?}");
}

#[test]
fn a_commit_takes_no_part_a_gc_is_removing() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let prefix = "leases/removing";
    let url = collection(&server, tmp.path(), prefix);
    let t = TransferOptions::default().store(server.options());

    // A commit cut short after it pushed part p: a retry would take that push as its own.
    let p = make(tmp.path(), "p", 4);
    let cut = CommitOptions::new().on_step(|s| {
        if s == (CommitStep::PartPlaced { index: 0 }) {
            panic!("cut short");
        }
    });
    let given = [p.display().to_string()];
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        commit_url(&url, &given, cut, &t)
    }));
    assert!(r.is_err(), "not cut short: {r:?}");
    assert!(server
        .object_file(&format!("{prefix}/parts/p/_source"))
        .is_file());

    // A gc is removing it (and the orphan): the retry pushes p again under another id.
    put(
        &server,
        &format!("{prefix}/_collection/leases/gc-00000000000000cc.json"),
        &lease("gc", &["p", "orphan"]),
    );
    let r = commit_url(&url, &given, CommitOptions::new(), &t).unwrap();
    assert_eq!(r.ids.len(), 1);
    assert!(
        r.ids[0].starts_with("p-"),
        "took a part gc is removing: {r:?}"
    );
    let ds = zrecord::remote::open(
        &url,
        ReadConfig::default(),
        RemoteConfig::default()
            .store(server.options())
            .cache_dir(tmp.path().join("cache")),
    )
    .unwrap();
    let got = parts::records(&ds);
    let want: Vec<Vec<u8>> = (0..2)
        .map(|i| record("first", i))
        .chain((0..4).map(|i| record("p", i)))
        .collect();
    assert_eq!(got, want);

    // A part given by URL that a gc is removing is no dataset.
    match commit_url(
        &url,
        &[format!("{url}/parts/orphan")],
        CommitOptions::new(),
        &t,
    ) {
        Err(Error::NotADataset { path, reason }) => {
            assert_eq!(path, PathBuf::from(format!("{url}/parts/orphan")));
            assert!(reason.contains("gc is removing it"), "{reason}");
        }
        other => panic!("{other:?}"),
    }

    // Nor does a push of a whole collection push on top of it.
    let root = tmp.path().join("local");
    let orphan = tmp.path().join("orphan");
    commit(&root, &[&orphan], CommitOptions::new()).unwrap();
    put(
        &server,
        "leases/pushed/_collection/leases/gc-00000000000000cc.json",
        &lease("gc", &["orphan"]),
    );
    let target = server.url("leases/pushed");
    match push(&root, &target, &t) {
        Err(Error::PublishConflict { url: u, reason }) => {
            assert_eq!(u, format!("{target}/parts/orphan"));
            assert!(reason.contains("gc is removing"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_commit_stops_at_a_live_gc_lease_it_cannot_read() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let prefix = "leases/gc-unreadable";
    let url = collection(&server, tmp.path(), prefix);
    let t = TransferOptions::default().store(server.options());
    let key = format!("{prefix}/_collection/leases/gc-00000000000000dd.json");
    put(&server, &key, b"{\"lease\":{},\"crc32c\":0}");
    let p = make(tmp.path(), "p", 1);
    match commit_url(&url, &[p.display().to_string()], CommitOptions::new(), &t) {
        Err(Error::MetaCorrupt { path, reason }) => {
            assert_eq!(
                path,
                PathBuf::from(format!("{url}/_collection/leases/gc-00000000000000dd.json"))
            );
            assert!(reason.contains("cannot be read"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // Nothing was pushed, and the commit's own lease is gone.
    assert!(!server.object_file(&format!("{prefix}/parts/p")).exists());
    let leases: Vec<_> =
        std::fs::read_dir(server.object_file(&format!("{prefix}/_collection/leases")))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
    assert_eq!(leases, ["gc-00000000000000dd.json"]);
}
