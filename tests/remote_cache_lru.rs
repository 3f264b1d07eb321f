//! The chunk cache evicts the least recently read chunks, whatever path read them (chunks
//! cached when the snapshot opened are read zero-copy by the local engine), and the disk it
//! takes stays under its limit: blocks of evicted files that this process still held open are
//! let go (those chunks are read from their objects). Against s3s-fs, started by the test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/s3.rs"]
mod s3;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use zrecord::diagnostics::pending_fills;
use zrecord::remote::{push, RemoteConfig, TransferOptions};
use zrecord::{DType, Dataset, Field, ReadConfig, Schema, Writer, WriterConfig};

fn record(i: u64) -> Vec<u8> {
    (0..(700 + i % 7 * 50) as usize)
        .map(|j| (i as u8).wrapping_add((j * 3) as u8))
        .collect()
}

fn open(server: &s3::S3Server, url: &str, cache: &Path, bytes: u64) -> Dataset {
    let remote = RemoteConfig::default()
        .store(server.options())
        .cache_dir(cache)
        .cache_bytes(bytes);
    zrecord::remote::open(url, ReadConfig::default(), remote).unwrap()
}

/// The cached chunk files, complete ones.
fn cached(cache: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for d in std::fs::read_dir(cache.join("objects")).unwrap().flatten() {
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

/// Blocks of the files under `dir`, in bytes.
fn linked(dir: &Path) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let Ok(m) = e.metadata() else { continue };
        n += if m.is_dir() {
            linked(&e.path())
        } else {
            m.blocks() * 512
        };
    }
    n
}

/// Bytes of disk under `cache`: its files' blocks, plus the blocks of files under it that are
/// no longer linked but that this process still holds open or mapped.
fn disk_bytes(cache: &Path) -> u64 {
    let prefix = cache.to_string_lossy().into_owned();
    let mut held = BTreeMap::new();
    for proc_dir in ["/proc/self/fd", "/proc/self/map_files"] {
        let Ok(entries) = std::fs::read_dir(proc_dir) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(target) = std::fs::read_link(e.path()) else {
                continue;
            };
            let t = target.to_string_lossy();
            if t.starts_with(&prefix) && t.ends_with(" (deleted)") {
                // Only files no directory links any more (a name removed from a link
                // directory of one open, its file still linked as a mirror, is counted above).
                match std::fs::metadata(e.path()) {
                    Ok(m) if m.nlink() == 0 => {
                        held.insert((m.dev(), m.ino()), m.blocks() * 512);
                    }
                    _ => {}
                }
            }
        }
    }
    linked(cache) + held.values().sum::<u64>()
}

#[test]
fn hot_chunks_survive_eviction_and_disk_stays_under_the_limit() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("ds");
    let schema = Schema::new()
        .field(Field::new("x", DType::U8))
        .chunk_size_bytes(64 << 10);
    let mut w = Writer::create(&local, &schema, WriterConfig::default()).unwrap();
    let n = 1600;
    for i in 0..n {
        w.append(&[record(i)]).unwrap();
    }
    w.commit().unwrap();
    drop(w);
    let url = server.url("lru");
    push(
        &local,
        &url,
        &TransferOptions::default().store(server.options()),
    )
    .unwrap();
    let chunks = std::fs::read_dir(local.join("chunk")).unwrap().count();
    assert!(chunks >= 16, "{chunks} chunks");
    let cache = tmp.path().join("cache");

    // Everything cached, then made an hour old.
    {
        let all: Vec<u64> = (0..n).collect();
        open(&server, &url, &cache, 1 << 30)
            .gather_blocking(&all)
            .unwrap();
        wait_for("every chunk to be cached", || {
            cached(&cache).len() == chunks && pending_fills() == 0
        });
    }
    let hour_ago = SystemTime::now() - Duration::from_secs(3600);
    for f in cached(&cache) {
        std::fs::File::options()
            .write(true)
            .open(&f)
            .unwrap()
            .set_modified(hour_ago)
            .unwrap();
    }

    // A reader with room for the hot half, one chunk more and the mirrored tables (they count
    // against the limit), opened with every chunk cached.
    let files = cached(&cache);
    let size = |f: &PathBuf| std::fs::metadata(f).unwrap().blocks() * 512;
    let (hot, cold) = files.split_at(files.len() / 2);
    let largest_cold = cold.iter().map(size).max().unwrap();
    let mirrors = linked(&cache.join("mirrors"));
    let limit = hot.iter().map(size).sum::<u64>() + largest_cold + mirrors + 4096;
    let ds = open(&server, &url, &cache, limit);
    let snap = ds.snapshot();
    let mut by_chunk: BTreeMap<PathBuf, Vec<u64>> = BTreeMap::new();
    for i in 0..n {
        let at = snap.locate(0, i).unwrap();
        by_chunk.entry(at.chunk.unwrap()).or_default().push(i);
    }
    let hot_records: Vec<u64> = hot
        .iter()
        .flat_map(|f| by_chunk[f].iter().copied())
        .collect();
    for _ in 0..3 {
        let b = ds.gather_blocking(&hot_records).unwrap();
        for (r, &i) in hot_records.iter().enumerate() {
            assert_eq!(b.get(r, 0).unwrap(), record(i).as_slice());
        }
    }

    // Another process evicts the last chunk; reading it fills it again, which takes the
    // cache past its limit: the cold chunks go, the hot ones stay.
    let last = cold.last().unwrap();
    std::fs::remove_file(last).unwrap();
    let last_records = by_chunk[last].clone();
    let b = ds.gather_blocking(&last_records).unwrap();
    for (r, &i) in last_records.iter().enumerate() {
        assert_eq!(b.get(r, 0).unwrap(), record(i).as_slice());
    }
    drop(b);
    wait_for("the fill to finish", || {
        pending_fills() == 0 && last.exists()
    });
    for f in hot {
        assert!(f.exists(), "hot chunk {} was evicted", f.display());
    }
    let evicted = cold.iter().filter(|f| !f.exists()).count();
    assert!(evicted > 0, "nothing was evicted");
    let disk = disk_bytes(&cache);
    assert!(
        disk <= limit,
        "the cache takes {disk} bytes of disk (open files included) over its {limit}-byte limit"
    );

    // Every record still reads, the evicted ones from the store.
    let all: Vec<u64> = (0..n).collect();
    let b = ds.gather_blocking(&all).unwrap();
    for i in 0..n {
        assert_eq!(b.get(i as usize, 0).unwrap(), record(i).as_slice());
    }
}
