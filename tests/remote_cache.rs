//! The chunk cache of a remote dataset (s3s-fs started by the test): the first epoch fills it
//! in the background; a dataset opened again reads every record from it with no request to the
//! store, byte-exact; a damaged cache entry is never served (it is dropped and the records
//! read from the store); a second process shares the cache; the size limit evicts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/s3.rs"]
mod s3;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use zrecord::diagnostics::remote_stats as stats;
use zrecord::remote::{push, RemoteConfig, TransferOptions};
use zrecord::{DType, Dataset, Field, ReadConfig, Schema, Writer, WriterConfig};

fn record(i: u64) -> Vec<u8> {
    (0..(64 + i * 31 % 900) as usize)
        .map(|j| (i as u8).wrapping_add((j * 3) as u8))
        .collect()
}

fn write(dir: &Path, n: u64) {
    let schema = Schema::new()
        .field(Field::new("x", DType::U8))
        .chunk_size_bytes(128 << 10);
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    for i in 0..n {
        w.append(&[record(i)]).unwrap();
    }
    w.commit().unwrap();
}

/// The tests here read the process-wide request counter: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn open(server: &s3::S3Server, url: &str, cache: &Path, bytes: u64) -> Dataset {
    let remote = RemoteConfig::default()
        .store(server.options())
        .cache_dir(cache)
        .cache_bytes(bytes);
    zrecord::remote::open(url, ReadConfig::default(), remote).unwrap()
}

fn check_all(ds: &Dataset, n: u64) {
    let all: Vec<u64> = (0..n).rev().collect();
    let b = ds.gather_blocking(&all).unwrap();
    for (r, &i) in all.iter().enumerate() {
        assert_eq!(b.get(r, 0).unwrap(), record(i).as_slice(), "record {i}");
    }
}

/// The dataset a child process opens from its spec `CACHE|URL|ENDPOINT`, with a 1 GiB cache.
fn open_child(spec: &str) -> (Dataset, PathBuf) {
    let mut parts = spec.split('|');
    let (cache, url, endpoint) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    let remote = RemoteConfig::default()
        .store(s3::options_for(endpoint))
        .cache_dir(cache)
        .cache_bytes(1 << 30);
    let ds = zrecord::remote::open(url, ReadConfig::default(), remote).unwrap();
    (ds, PathBuf::from(cache))
}

/// The cached chunk files (complete ones, not temporary files).
fn cached(cache: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(dirs) = std::fs::read_dir(cache.join("objects")) else {
        return out;
    };
    for d in dirs.flatten() {
        for f in std::fs::read_dir(d.path()).unwrap().flatten() {
            if !f.file_name().to_string_lossy().starts_with(".tmp-") {
                out.push(f.path());
            }
        }
    }
    out.sort();
    out
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn cache_fills_serves_verifies_and_evicts() {
    let _serial = serial();
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("ds");
    let n = 3000;
    write(&local, n);
    let chunks = std::fs::read_dir(local.join("chunk")).unwrap().count();
    assert!(chunks >= 8, "{chunks} chunks");
    let url = server.url("cached/a");
    push(
        &local,
        &url,
        &TransferOptions::default().store(server.options()),
    )
    .unwrap();
    let cache = tmp.path().join("cache");

    // Epoch 1 from the store fills the cache in the background.
    let first = open(&server, &url, &cache, 1 << 30);
    check_all(&first, n);
    wait_for("every chunk to be cached", || {
        cached(&cache).len() == chunks
    });

    // Opened again: every chunk is local, no request reaches the store.
    let second = open(&server, &url, &cache, 1 << 30);
    let before = stats().requests;
    check_all(&second, n);
    assert_eq!(
        stats().requests,
        before,
        "reads of cached chunks went to the store"
    );
    // The first handle serves cached objects too (without reopening).
    check_all(&first, n);
    assert_eq!(stats().requests, before);

    // A damaged cache entry is never served: flip a byte of every cached chunk.
    for f in cached(&cache) {
        let mut bytes = std::fs::read(&f).unwrap();
        let at = bytes.len() / 3;
        bytes[at] ^= 0x10;
        std::fs::write(&f, bytes).unwrap();
    }
    check_all(&second, n);
    assert!(
        stats().requests > before,
        "damaged entries were not refetched"
    );
    let third = open(&server, &url, &cache, 1 << 30);
    check_all(&third, n);

    // Another process (a child re-running this binary) shares the cache: it opens the dataset
    // with every chunk cached and reads without a request.
    wait_for("the cache to refill", || cached(&cache).len() == chunks);
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([
            "--exact",
            "child_reads_from_the_shared_cache",
            "--nocapture",
        ])
        .env(
            "ZRECORD_CACHE_CHILD",
            format!("{}|{url}|{}", cache.display(), server.endpoint),
        )
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("child: 0 requests"), "{text}");

    // A small limit keeps the cache under it.
    let small = tmp.path().join("small");
    let limited = open(&server, &url, &small, 300 << 10);
    check_all(&limited, n);
    std::thread::sleep(Duration::from_millis(500));
    check_all(&limited, n);
    wait_for("the fills to settle", || {
        std::fs::read_dir(small.join("objects"))
            .map(|d| {
                d.flatten().all(|d| {
                    std::fs::read_dir(d.path())
                        .unwrap()
                        .flatten()
                        .all(|f| !f.file_name().to_string_lossy().starts_with(".tmp-"))
                })
            })
            .unwrap_or(true)
    });
    let total: u64 = cached(&small)
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .sum();
    assert!(
        total <= 300 << 10,
        "{total} bytes cached over a 300 KiB limit"
    );
}

/// The child of `cache_fills_serves_verifies_and_evicts`: does nothing unless started by it.
#[test]
fn child_reads_from_the_shared_cache() {
    let Ok(spec) = std::env::var("ZRECORD_CACHE_CHILD") else {
        return;
    };
    let (ds, _) = open_child(&spec);
    let before = stats().requests;
    check_all(&ds, 3000);
    println!("child: {} requests", stats().requests - before);
}

/// A cached copy that disappears under an open snapshot (evicted by another process, or
/// dropped as damaged) is read from its object: no `ChunkGone`, no error, the same bytes; and a
/// damaged copy keeps being bypassed on every later gather, not just the first.
#[test]
fn cached_copies_that_go_away_fall_back_to_the_store() {
    let _serial = serial();
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("ds");
    let n = 3000;
    write(&local, n);
    let chunks = std::fs::read_dir(local.join("chunk")).unwrap().count();
    let url = server.url("cached/gone");
    push(
        &local,
        &url,
        &TransferOptions::default().store(server.options()),
    )
    .unwrap();
    let cache = tmp.path().join("cache");
    check_all(&open(&server, &url, &cache, 1 << 30), n);
    wait_for("every chunk to be cached", || {
        cached(&cache).len() == chunks
    });

    // Damaged copies under a snapshot that opened them as local chunks: every gather, not
    // only the first, reads the records from the store.
    let ds = open(&server, &url, &cache, 1 << 30);
    for f in cached(&cache) {
        let mut bytes = std::fs::read(&f).unwrap();
        let at = bytes.len() / 2;
        bytes[at] ^= 0x01;
        std::fs::write(&f, bytes).unwrap();
    }
    for _ in 0..3 {
        check_all(&ds, n);
    }

    // The damaged copies were refilled from the store; the snapshot that found them damaged
    // reads the new copies (not its old descriptors and mappings, which still show the damaged
    // bytes: reading those again would drop each good copy as soon as it is back).
    wait_for("the cache to refill", || cached(&cache).len() == chunks);
    let before = stats().requests;
    for _ in 0..3 {
        check_all(&ds, n);
    }
    assert_eq!(
        stats().requests,
        before,
        "a snapshot read damaged bytes again after the cache was refilled"
    );
    assert_eq!(cached(&cache).len(), chunks);

    // Copies deleted under a snapshot (another process evicted them): still every record.
    let ds = open(&server, &url, &cache, 1 << 30);
    for f in cached(&cache) {
        std::fs::remove_file(f).unwrap();
    }
    check_all(&ds, n);
}

/// Chunks cached at open whose descriptors the budget closed (a process with RLIMIT_NOFILE=64
/// keeps 16), then evicted: every record still reads, from the store.
#[test]
fn evicted_copies_without_a_descriptor_read_from_the_store() {
    if let Ok(spec) = std::env::var("ZRECORD_EVICT_CHILD") {
        return evicted_child(&spec);
    }
    let _serial = serial();
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("ds");
    let schema = Schema::new()
        .field(Field::new("x", DType::U8))
        .chunk_size_bytes(16 << 10);
    let mut w = Writer::create(&local, &schema, WriterConfig::default()).unwrap();
    for i in 0..1500 {
        w.append(&[record(i)]).unwrap();
    }
    w.commit().unwrap();
    drop(w);
    let chunks = std::fs::read_dir(local.join("chunk")).unwrap().count();
    assert!(chunks > 40, "{chunks} chunks");
    let url = server.url("cached/evicted");
    push(
        &local,
        &url,
        &TransferOptions::default().store(server.options()),
    )
    .unwrap();
    let cache = tmp.path().join("cache");
    check_all(&open(&server, &url, &cache, 1 << 30), 1500);
    wait_for("every chunk to be cached", || {
        cached(&cache).len() == chunks
    });

    let me = std::env::current_exe().unwrap();
    let out = std::process::Command::new("prlimit")
        .arg("--nofile=64:64")
        .arg(me)
        .args([
            "--exact",
            "evicted_copies_without_a_descriptor_read_from_the_store",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            "ZRECORD_EVICT_CHILD",
            format!("{}|{url}|{}", cache.display(), server.endpoint),
        )
        .output()
        .expect("run prlimit (util-linux) to start the child under RLIMIT_NOFILE=64");
    let log =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{log}");
    assert!(
        log.contains("child: evicted copies read"),
        "child did not run:\n{log}"
    );
}

fn evicted_child(spec: &str) {
    let (ds, cache) = open_child(spec);
    let before = stats().requests;
    // Every copy evicted (by another process, say) after the snapshot opened them.
    for f in cached(&cache) {
        std::fs::remove_file(f).unwrap();
    }
    check_all(&ds, 1500);
    assert!(stats().requests > before, "nothing was read from the store");
    println!("child: evicted copies read");
}
