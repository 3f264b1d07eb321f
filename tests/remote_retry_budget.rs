//! One retry budget per request: under a persistent 503, exactly `StoreOptions::retries + 1`
//! requests for one range reach the server (6 by default), whether a gather or a loader asks
//! for it, and a permanent error (a missing object, a range past its end, a checksum mismatch)
//! is tried once and surfaces at once, the loader adding no tries of its own.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/s3.rs"]
mod s3;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::executor::block_on;
use zrecord::pipeline::{
    DatasetSource, Loader, PrefetchConfig, RetryPolicy, SamplerConfig, SamplerMode,
};
use zrecord::remote::{push, RemoteConfig, StoreOptions, TransferOptions};
use zrecord::{DType, Dataset, Error, Field, ReadConfig, Schema, Writer, WriterConfig};
use zrecord_testing::{FaultConfig, FaultProxy, Logged};

const N: u64 = 200;

fn record(i: u64) -> Vec<u8> {
    vec![i as u8; 100 + (i % 50) as usize]
}

/// A server holding a one-field dataset of `N` records in one chunk at `s3://…/sets/budget`.
fn published() -> (s3::S3Server, tempfile::TempDir, String) {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let schema = Schema::new().field(Field::new("x", DType::U8));
    let mut w = Writer::create(&dir, &schema, WriterConfig::default()).unwrap();
    for i in 0..N {
        w.append(&[record(i)]).unwrap();
    }
    w.commit().unwrap();
    let url = server.url("sets/budget");
    push(
        &dir,
        &url,
        &TransferOptions::default().store(server.options()),
    )
    .unwrap();
    (server, tmp, url)
}

/// The default budget through `proxy`, with a 1 ms first wait so the test is quick.
fn through(proxy: &FaultProxy) -> StoreOptions {
    s3::options_for(&proxy.endpoint()).backoff(Duration::from_millis(1))
}

fn open(url: &str, proxy: &FaultProxy, cache: &Path) -> Dataset {
    zrecord::remote::open(
        url,
        ReadConfig::default(),
        RemoteConfig::default()
            .store(through(proxy))
            .cache_dir(cache)
            .cache_bytes(0),
    )
    .unwrap()
}

/// The `GET`s of chunk objects in the log, counted by (object, range).
fn chunk_gets(log: &[Logged]) -> BTreeMap<(String, Option<String>), usize> {
    let mut out = BTreeMap::new();
    for l in log {
        if l.method == "GET" && l.target.contains("/data/chunk/") {
            *out.entry((l.target.clone(), l.range.clone())).or_default() += 1;
        }
    }
    out
}

/// Every request the log holds is a `GET` of a chunk: nothing else was asked (no table page,
/// no listing).
fn only_chunk_gets(log: &[Logged]) {
    for l in log {
        assert!(
            l.method == "GET" && l.target.contains("/data/chunk/"),
            "an unexpected request: {l:?}"
        );
    }
}

/// A loader of one-record batches in index order, one worker, one gather at a time, with the
/// default retry policy (3 tries) apart from a short wait.
fn loader(ds: &Dataset) -> Loader<DatasetSource> {
    Loader::builder(Arc::new(DatasetSource::new(ds)))
        .sampler(
            SamplerConfig::default()
                .mode(SamplerMode::Sequential)
                .epochs(Some(1)),
        )
        .batch_size(1)
        .prefetch(
            PrefetchConfig::default()
                .num_workers(1)
                .gathers_in_flight(1)
                .lookahead(0)
                .retry(RetryPolicy::default().backoff(Duration::from_millis(1))),
        )
        .build()
        .unwrap()
}

/// The first batch of a fresh loader: its error (it must fail), and the loader's failed tries.
fn first_batch_error(ds: &Dataset) -> (Error, u64) {
    let mut l = loader(ds);
    let e = match block_on(l.next()) {
        Some(Err(e)) => e,
        other => panic!(
            "expected the first batch to fail, got {:?}",
            other.map(|b| b.is_ok())
        ),
    };
    drop(block_on(l.next()));
    let failed = l.stats().failed_attempts;
    drop(l);
    (e, failed)
}

#[test]
fn a_persistent_503_is_tried_as_the_budget_says_once() {
    let (server, tmp, url) = published();
    let proxy = FaultProxy::start(&server.endpoint, FaultConfig::default()).unwrap();
    let ds = open(&url, &proxy, &tmp.path().join("cache"));
    // The offset-table page of records 0..N is loaded now: later gathers need only chunks.
    assert_eq!(ds.gather_blocking(&[0, 7]).unwrap().len(), 2);
    let tries = StoreOptions::default().retries as usize + 1;
    assert_eq!(tries, 6, "the documented default budget");

    proxy.set_config(FaultConfig::default().unavailable(1.0));
    proxy.clear_log();
    let e = ds.gather_blocking(&[7]).unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Remote {
                status: Some(503),
                ..
            }
        ),
        "expected a 503 naming the object: {e}"
    );
    let log = proxy.log();
    only_chunk_gets(&log);
    let gets = chunk_gets(&log);
    assert_eq!(gets.len(), 1, "one range: {gets:?}");
    assert_eq!(
        gets.values().copied().collect::<Vec<_>>(),
        [tries],
        "a gather under a persistent 503: {gets:?}"
    );

    // Through the loader: the same tries, not three times as many.
    proxy.clear_log();
    let (e, failed) = first_batch_error(&ds);
    assert!(
        matches!(
            &e,
            Error::Remote {
                status: Some(503),
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(failed, 1, "the loader tried the failed batch again");
    let gets = chunk_gets(&proxy.log());
    let first = gets.values().copied().max().unwrap_or(0);
    assert_eq!(first, tries, "a loader under a persistent 503: {gets:?}");

    // Faults off: the same handle reads again.
    proxy.set_config(FaultConfig::default());
    assert_eq!(ds.gather_blocking(&[7]).unwrap().len(), 1);
}

#[test]
fn permanent_errors_are_tried_once() {
    let (server, tmp, url) = published();
    let proxy = FaultProxy::start(&server.endpoint, FaultConfig::default()).unwrap();
    let ds = open(&url, &proxy, &tmp.path().join("cache"));
    assert_eq!(ds.gather_blocking(&[0, N - 1]).unwrap().len(), 2);
    let chunks = server.object_file("sets/budget/data/chunk");
    let chunk = std::fs::read_dir(&chunks)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_file())
        .expect("the chunk object's file");
    let original = std::fs::read(&chunk).unwrap();

    // A damaged record: its checksum fails once read; no refetch, no loader retry.
    let mut damaged = original.clone();
    let at = damaged.len() - 10;
    damaged[at] ^= 0x40;
    std::fs::write(&chunk, &damaged).unwrap();
    proxy.clear_log();
    let e = ds.gather_blocking(&[N - 1]).unwrap_err();
    assert!(matches!(e, Error::ChecksumMismatch { .. }), "{e}");
    let log = proxy.log();
    only_chunk_gets(&log);
    assert_eq!(log.len(), 1, "a checksum mismatch: {log:?}");
    let range = log[0].range.clone();
    proxy.clear_log();
    let (e, failed) = {
        // Record N - 1 is the last batch: the good ones come first.
        let mut l = loader(&ds);
        let mut failed = None;
        block_on(async {
            while let Some(b) = l.next().await {
                if let Err(e) = b {
                    failed = Some(e);
                    break;
                }
            }
        });
        (
            failed.expect("the damaged record failed"),
            l.stats().failed_attempts,
        )
    };
    assert!(matches!(e, Error::ChecksumMismatch { .. }), "{e}");
    assert_eq!(failed, 1, "the loader tried a checksum mismatch again");
    let log = proxy.log();
    only_chunk_gets(&log);
    let tries = log.iter().filter(|l| l.range == range).count();
    assert_eq!(
        tries, 1,
        "a checksum mismatch through the loader: {range:?} in {log:?}"
    );

    // A range past the object's end (the object cut short on the store): 416, tried once.
    std::fs::write(&chunk, &original[..64]).unwrap();
    proxy.clear_log();
    let e = ds.gather_blocking(&[N - 1]).unwrap_err();
    let log = proxy.log();
    assert_eq!(log.len(), 1, "a range past the end: {log:?}");
    assert_eq!(log[0].status, Some(416), "{log:?}");
    assert!(
        matches!(
            e,
            Error::Remote {
                status: Some(416),
                ..
            }
        ),
        "{e}"
    );

    // The object gone: 404, tried once by a gather and once by the loader.
    std::fs::remove_file(&chunk).unwrap();
    proxy.clear_log();
    let e = ds.gather_blocking(&[7]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Remote {
                status: Some(404),
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(proxy.log().len(), 1, "a 404: {:?}", proxy.log());
    proxy.clear_log();
    let (e, failed) = first_batch_error(&ds);
    assert!(
        matches!(
            e,
            Error::Remote {
                status: Some(404),
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(failed, 1, "the loader tried a 404 again");
    let gets = chunk_gets(&proxy.log());
    assert_eq!(
        gets.values().max(),
        Some(&1),
        "a 404 through the loader: {gets:?}"
    );
}
