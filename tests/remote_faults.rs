//! Through a fault-injecting proxy in front of a real S3 server (s3s-fs), transient faults (503s,
//! connection resets, truncated bodies) are hidden by retries and reads stay byte-identical to
//! the local dataset; a truncated body is never data; a fault that outlasts the retries is a
//! typed `Error::Remote` naming the object, the range and the last HTTP status.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/s3.rs"]
mod s3;

use std::path::Path;
use std::time::{Duration, Instant};

use zrecord::remote::{pull, push, RemoteConfig, StoreOptions, TransferOptions};
use zrecord::{Codec, DType, Dataset, Error, Field, ReadConfig, Schema, Writer, WriterConfig};
use zrecord_testing::{FaultConfig, FaultProxy};

const N: u64 = 3000;

fn record(i: u64) -> Vec<u8> {
    (0..(i * 37 % 700) as usize)
        .map(|j| (i as u8).wrapping_mul(13).wrapping_add((j % 7) as u8))
        .collect()
}

/// A local dataset of `N` records in several chunks.
fn write(dir: &Path) {
    let schema = Schema::new()
        .field(Field::new("x", DType::U8).codec(Codec::Deflate))
        .field(Field::new("raw", DType::U8))
        .chunk_size_bytes(128 << 10);
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    for i in 0..N {
        w.append(&[record(i), record(i + 1)]).unwrap();
    }
    w.commit().unwrap();
}

/// Client options through `proxy`: `retries` retries from a 2 ms backoff.
fn through(proxy: &FaultProxy, retries: u32) -> StoreOptions {
    s3::options_for(&proxy.endpoint())
        .retries(retries)
        .backoff(Duration::from_millis(2))
        .timeout(Duration::from_secs(10))
}

fn open(url: &str, store: StoreOptions, cache: &Path) -> zrecord::Result<Dataset> {
    zrecord::remote::open(
        url,
        ReadConfig::default(),
        RemoteConfig::default().store(store).cache_dir(cache),
    )
}

fn records(ds: &Dataset, indices: &[u64]) -> zrecord::Result<Vec<Vec<Vec<u8>>>> {
    Ok(ds
        .gather_blocking(indices)?
        .into_records()
        .into_iter()
        .map(|r| r.into_iter().map(|b| b.to_vec()).collect())
        .collect())
}

/// `n` pseudo-random indices below `N`.
fn batch(x: &mut u64, n: usize) -> Vec<u64> {
    (0..n)
        .map(|_| {
            *x ^= *x << 13;
            *x ^= *x >> 7;
            *x ^= *x << 17;
            *x % N
        })
        .collect()
}

/// A server holding the local dataset (pushed without faults) at `s3://…/sets/<name>`.
fn published(name: &str) -> (s3::S3Server, tempfile::TempDir, String) {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    write(&tmp.path().join("ds"));
    let url = server.url(&format!("sets/{name}"));
    push(
        tmp.path().join("ds"),
        &url,
        &TransferOptions::default().store(server.options()),
    )
    .unwrap();
    (server, tmp, url)
}

/// The object and range of a remote error, after checking it names a chunk of `url` or one of
/// its offset tables (read on demand, in pages, by the gathers).
fn remote_error(e: &Error, url: &str) -> (Option<u16>, std::ops::Range<u64>) {
    match e {
        Error::Remote {
            object,
            range: Some(range),
            status,
            ..
        } => {
            let table = object.starts_with(&format!("{url}/data/")) && object.contains(".offsets.");
            assert!(
                object.starts_with(&format!("{url}/data/chunk/")) || table,
                "the error names {object}, not a chunk or table of {url}: {e}"
            );
            assert!(range.start < range.end, "{e}");
            let text = e.to_string();
            assert!(text.contains(object.as_str()), "{text}");
            assert!(
                text.contains(&format!("{}..{}", range.start, range.end))
                    || text.contains(&format!("{}-{}", range.start, range.end)),
                "the message does not show the range: {text}"
            );
            (*status, range.clone())
        }
        other => panic!("expected Error::Remote with a range, got {other:?}"),
    }
}

#[test]
fn retries_hide_transient_faults() {
    let (server, tmp, url) = published("transient");
    let faults = FaultConfig::default()
        .unavailable(0.3)
        .reset(0.1)
        .latency(Duration::from_millis(1))
        .seed(11);
    let proxy = FaultProxy::start(&server.endpoint, faults).unwrap();
    let local = Dataset::open(tmp.path().join("ds")).unwrap();
    // Opening (the commit listing, the manifest, the patch logs) goes through the 503s and
    // resets; truncated bodies come after, as a cut listing body is not retried yet (see
    // `a_cut_listing_is_retried`).
    let remote = open(&url, through(&proxy, 10), &tmp.path().join("cache")).unwrap();
    assert_eq!(remote.len(), N);
    proxy.set_config(faults.truncate(0.1));

    let mut x = 0x5eed_u64;
    for size in [1usize, 7, 64, 300, 1000, 1000, 1000] {
        let indices = batch(&mut x, size);
        assert_eq!(
            records(&remote, &indices).unwrap(),
            records(&local, &indices).unwrap(),
            "batch of {size}"
        );
    }
    let all: Vec<u64> = (0..N).collect();
    assert_eq!(
        records(&remote, &all).unwrap(),
        records(&local, &all).unwrap()
    );
    let c = proxy.counts();
    assert!(
        c.unavailable > 0 && c.resets > 0 && c.truncated > 0,
        "not every fault happened: {c:?}"
    );
    assert!(c.forwarded > c.truncated, "{c:?}");
}

#[test]
fn truncated_bodies_are_errors_never_data() {
    let (server, tmp, url) = published("truncated");
    let proxy = FaultProxy::start(&server.endpoint, FaultConfig::default()).unwrap();
    let local = Dataset::open(tmp.path().join("ds")).unwrap();
    let cache = tmp.path().join("cache");
    let remote = open(&url, through(&proxy, 0), &cache).unwrap();
    let retrying = open(&url, through(&proxy, 3), &cache).unwrap();

    // Half the bodies cut and no retries: each batch is exact or an error, never other bytes.
    proxy.set_config(FaultConfig::default().truncate(0.5).seed(3));
    let (mut exact, mut failed) = (0, 0);
    let mut x = 0xfeed_u64;
    for _ in 0..12 {
        let indices = batch(&mut x, 200);
        match records(&remote, &indices) {
            Ok(got) => {
                assert_eq!(got, records(&local, &indices).unwrap());
                exact += 1;
            }
            Err(e) => {
                remote_error(&e, &url);
                failed += 1;
            }
        }
    }
    assert!(proxy.counts().truncated > 0, "{:?}", proxy.counts());
    assert!(failed > 0, "no batch met a cut body");
    assert_eq!(exact + failed, 12);

    // Every body cut: once the request's tries are spent (4: `retries(3)`), an error naming
    // the object and the range.
    proxy.set_config(FaultConfig::default().truncate(1.0));
    let before = proxy.counts().truncated;
    let e = records(&retrying, &[5, 2999]).unwrap_err();
    let (status, _) = remote_error(&e, &url);
    assert_eq!(status, None, "{e}");
    assert!(
        proxy.counts().truncated >= before + 4,
        "{:?}",
        proxy.counts()
    );

    // Faults off: the same handles read exact again.
    proxy.set_config(FaultConfig::default());
    let all: Vec<u64> = (0..N).collect();
    let want = records(&local, &all).unwrap();
    assert_eq!(records(&retrying, &all).unwrap(), want);
    assert_eq!(records(&remote, &all).unwrap(), want);
}

#[test]
fn a_permanent_503_is_a_typed_error_in_bounded_time() {
    let (server, tmp, url) = published("unavailable");
    let proxy = FaultProxy::start(&server.endpoint, FaultConfig::default()).unwrap();
    let remote = open(&url, through(&proxy, 2), &tmp.path().join("cache")).unwrap();

    let before = proxy.counts();
    proxy.set_config(FaultConfig::default().unavailable(1.0));
    let start = Instant::now();
    let e = records(&remote, &[0, 1500, 2999]).unwrap_err();
    let elapsed = start.elapsed();
    let (status, _) = remote_error(&e, &url);
    assert_eq!(status, Some(503), "{e}");
    assert!(e.to_string().contains("503"), "{e}");
    // A hang guard, not a timing claim: 3 tries per request, 2 ms then 4 ms apart.
    assert!(elapsed < Duration::from_secs(30), "{elapsed:?}");
    // Nothing reached the store while the fault was on. (A request the client gave up on
    // mid-send, once a sibling's error ended the gather, counts as a request but neither
    // answered nor forwarded: `requests` may exceed the two.)
    let c = proxy.counts();
    assert!(
        c.unavailable >= before.unavailable + 3 && c.forwarded == before.forwarded,
        "{before:?} -> {c:?}"
    );

    // Opening under the same fault: the same typed error, about the commit list or manifest.
    match open(&url, through(&proxy, 1), &tmp.path().join("cache2")) {
        Err(Error::Remote { object, status, .. }) => {
            assert_eq!(status, Some(503));
            assert!(object.starts_with(&url), "{object}");
        }
        other => panic!("expected Error::Remote, got {other:?}"),
    }

    // Faults off: the same handle reads again.
    proxy.set_config(FaultConfig::default());
    assert_eq!(remote.gather_blocking(&[0, 1500, 2999]).unwrap().len(), 3);
}

#[test]
fn push_and_pull_through_faults_complete() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("ds");
    write(&local);
    // Pushing meets 503s only: a reset commit create is not retried yet (see
    // `a_reset_commit_is_retried`).
    let proxy = FaultProxy::start(
        &server.endpoint,
        FaultConfig::default().unavailable(0.3).seed(5),
    )
    .unwrap();
    let url = server.url("sets/pushed");
    let opts = TransferOptions::default().store(through(&proxy, 10));
    let report = push(&local, &url, &opts).unwrap();
    assert!(!report.already_done);
    let c = proxy.counts();
    assert!(c.unavailable > 0 && c.forwarded > 0, "{c:?}");

    // Read back without faults, straight from the server: exact.
    let all: Vec<u64> = (0..N).collect();
    let direct = open(&url, server.options(), &tmp.path().join("cache")).unwrap();
    let want = records(&Dataset::open(&local).unwrap(), &all).unwrap();
    assert_eq!(records(&direct, &all).unwrap(), want);

    // Pulled back through 503s and resets: exact too.
    proxy.set_config(FaultConfig::default().unavailable(0.3).reset(0.1).seed(6));
    let pulled = tmp.path().join("pulled");
    pull(&url, &pulled, &opts).unwrap();
    assert_eq!(
        records(&Dataset::open(&pulled).unwrap(), &all).unwrap(),
        want
    );
    assert!(proxy.counts().resets > 0, "{:?}", proxy.counts());
}

/// A commit create (`PUT` with `If-None-Match: *`) whose connection is reset is tried again
/// (object_store does not retry a non-idempotent request after a reset); the push reads its
/// commit back, so a retry that finds its own manifest is a success, another's a conflict.
#[test]
fn a_reset_commit_is_retried() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("ds");
    write(&local);
    for seed in 0..8 {
        let proxy = FaultProxy::start(
            &server.endpoint,
            FaultConfig::default().reset(0.3).seed(seed),
        )
        .unwrap();
        let url = server.url(&format!("sets/reset{seed}"));
        let opts = TransferOptions::default().store(through(&proxy, 10));
        if let Err(e) = push(&local, &url, &opts) {
            panic!("seed {seed}: {e}");
        }
    }
}

/// A listing whose body is cut is started again (object_store resumes a cut object body, not a
/// cut list response), so opening, pushing and pulling get past it.
#[test]
fn a_cut_listing_is_retried() {
    let (server, tmp, url) = published("cut-listing");
    for seed in 0..8 {
        let proxy = FaultProxy::start(
            &server.endpoint,
            FaultConfig::default().truncate(0.5).seed(seed),
        )
        .unwrap();
        let cache = tmp.path().join(format!("cache{seed}"));
        if let Err(e) = open(&url, through(&proxy, 10), &cache) {
            panic!("seed {seed}: {e}");
        }
    }
}
