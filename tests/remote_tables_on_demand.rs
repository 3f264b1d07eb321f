//! Offset tables of a dataset on an object store, read on demand in pages (s3s-fs, started by the test), never give a record other bytes than the model's: gathers, lengths, scans and a loader with lookahead equal the model with pages much smaller than a batch's spread, and fetch a small fraction of the table; a byte flipped in a table object is `OffsetCorrupt` for the record it damages; a page damaged in the local cache is fetched again and the cache repaired.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/s3.rs"]
mod s3;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::executor::block_on;
use zrecord::diagnostics::remote_stats as stats;
use zrecord::pipeline::{DatasetSource, Loader, PrefetchConfig};
use zrecord::remote::{push, RemoteConfig, TransferOptions};
use zrecord::{Codec, DType, Dataset, Error, Field, ReadConfig, Schema, Writer, WriterConfig};

/// The tests count table requests, which are process-wide: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Entries per page in these tests: 10 (240 bytes), so a batch spans many pages.
const PAGE_BYTES: u64 = 240;

/// Record `i`'s two fields: the model. Some values are empty; lengths vary.
fn record(i: u64) -> [Vec<u8>; 2] {
    let a = (0..(i * 7 % 41) as usize)
        .map(|j| (i as u8).wrapping_mul(31).wrapping_add((j % 5) as u8))
        .collect();
    let b = (0..(i % 3) as usize * 4)
        .map(|j| (i >> 3) as u8 ^ j as u8)
        .collect();
    [a, b]
}

/// A pushed dataset of `n` records and the server holding it.
struct Fixture {
    server: s3::S3Server,
    tmp: tempfile::TempDir,
    url: String,
    n: u64,
}

fn fixture(n: u64) -> Fixture {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("ds");
    let schema = Schema::new()
        .field(Field::new("a", DType::U8).codec(Codec::Deflate))
        .field(Field::new("b", DType::U8))
        .chunk_size_bytes(64 << 10);
    let mut w = Writer::create(&local, &schema, WriterConfig::default()).unwrap();
    for i in 0..n {
        w.append(&record(i)).unwrap();
    }
    w.commit().unwrap();
    drop(w);
    let url = server.url("paged");
    push(
        &local,
        &url,
        &TransferOptions::default().store(server.options()),
    )
    .unwrap();
    Fixture {
        server,
        tmp,
        url,
        n,
    }
}

impl Fixture {
    fn config(&self, cache: &str) -> RemoteConfig {
        RemoteConfig::default()
            .store(self.server.options())
            .cache_dir(self.tmp.path().join(cache))
            .table_page_bytes(PAGE_BYTES)
    }

    fn open(&self, config: RemoteConfig) -> Dataset {
        zrecord::remote::open(&self.url, ReadConfig::default(), config).unwrap()
    }

    /// The file s3s-fs keeps field `field`'s offset table in.
    fn table_object(&self, field: &str) -> PathBuf {
        let dir = self.server.object_file("paged/data");
        let prefix = format!("{field}.0.offsets.");
        std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(&prefix)
            })
            .unwrap()
    }
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Checks a gather of `indices` against the model.
fn check(ds: &Dataset, indices: &[u64]) {
    let batch = ds.gather_blocking(indices).unwrap();
    for (r, &i) in indices.iter().enumerate() {
        let want = record(i);
        for (f, value) in want.iter().enumerate() {
            assert_eq!(batch.get(r, f).unwrap(), value.as_slice(), "record {i}");
        }
    }
}

/// Bytes of disk the files under `dir` take (allocated blocks: a sparse file counts what it
/// holds).
fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_bytes(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

/// The page files under a cache directory.
fn page_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(page_files(&p));
        } else if p.to_string_lossy().ends_with(".pages") {
            out.push(p);
        }
    }
    out.sort();
    out
}

#[test]
fn reads_equal_the_model_and_fetch_only_the_pages_batches_need() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let fx = fixture(200_000);
    let table_bytes = fx.n * 24;
    let before = stats();
    let ds = fx.open(fx.config("cache"));
    assert_eq!(ds.len(), fx.n);
    assert_eq!(
        stats().table_bytes_fetched,
        before.table_bytes_fetched,
        "opening read table bytes"
    );
    let cached = disk_bytes(&fx.tmp.path().join("cache"));
    assert!(
        cached * 10 < table_bytes,
        "opening put {cached} bytes in the cache directory for a table of {table_bytes}"
    );

    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    let mut pages = 0u64;
    for size in [1usize, 7, 256, 256, 1000] {
        let indices: Vec<u64> = (0..size).map(|_| xorshift(&mut x) % fx.n).collect();
        let mut distinct: Vec<u64> = indices.iter().map(|i| i / 10).collect();
        distinct.sort_unstable();
        distinct.dedup();
        pages += distinct.len() as u64;
        check(&ds, &indices);
    }
    let fetched = stats().table_bytes_fetched - before.table_bytes_fetched;
    // Two fields, each page at most 240 bytes.
    assert!(
        fetched <= 2 * pages * PAGE_BYTES,
        "{fetched} table bytes fetched for {pages} pages per field"
    );
    assert!(
        fetched * 10 < 2 * table_bytes,
        "{fetched} of {} table bytes fetched",
        2 * table_bytes
    );

    // A run of consecutive records, the first and the last.
    check(&ds, &(12_345..12_345 + 300).collect::<Vec<_>>());
    check(&ds, &[0, fx.n - 1, fx.n - 1, 0]);
    // Out of range is still the error it is.
    assert!(matches!(
        ds.gather_blocking(&[fx.n]),
        Err(Error::IndexOutOfRange { .. })
    ));

    // Lengths from the table alone, and a scan of every entry, as `info` and `verify` make.
    let snap = ds.snapshot();
    for i in [3u64, 199_999, 17_001] {
        assert_eq!(snap.record_len(0, i).unwrap(), record(i)[0].len() as u64);
    }
    let mut lens = Vec::new();
    let some: Vec<u64> = (0..500).map(|k| k * 59 % fx.n).collect();
    snap.add_record_lens(1, &some, &mut lens).unwrap();
    for (k, &i) in some.iter().enumerate() {
        assert_eq!(lens[k], record(i)[1].len() as u64);
    }
    for f in 0..2 {
        let mut n = 0u64;
        for (i, e) in snap.scan(f).unwrap().enumerate() {
            assert_eq!(e.unwrap().logical_len as usize, record(i as u64)[f].len());
            n += 1;
        }
        assert_eq!(n, fx.n);
    }

    // Mirrored tables, the switch kept for comparison, read the same.
    let mirrored = fx.open(fx.config("mirrored").mirror_tables(true));
    let indices: Vec<u64> = (0..256).map(|_| xorshift(&mut x) % fx.n).collect();
    check(&mirrored, &indices);
    check(&ds, &indices);
}

#[test]
fn a_loader_with_lookahead_delivers_every_record_exactly() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let fx = fixture(3000);
    let ds = fx.open(fx.config("cache").lookahead_bytes(64 << 20));
    let mut loader = Loader::builder(Arc::new(DatasetSource::new(&ds)))
        .seed(11)
        .batch_size(64)
        .prefetch(PrefetchConfig::default().num_workers(2).lookahead(4))
        .build()
        .unwrap();
    let mut seen = vec![0u32; fx.n as usize];
    while let Some(b) = block_on(loader.next()) {
        let b = b.unwrap();
        for (r, &i) in b.data.indices().iter().enumerate() {
            let want = record(i);
            assert_eq!(b.data.get(r, 0).unwrap(), want[0].as_slice(), "record {i}");
            assert_eq!(b.data.get(r, 1).unwrap(), want[1].as_slice(), "record {i}");
            seen[i as usize] += 1;
        }
    }
    assert!(
        seen.iter().all(|&c| c == 1),
        "an epoch delivers every index once"
    );
}

#[test]
fn a_flipped_byte_in_a_table_object_is_an_error_never_other_bytes() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let fx = fixture(400);
    let object = fx.table_object("a");
    let good = std::fs::read(&object).unwrap();
    // Bytes of entries 0, 57 (chunk id), 123 (offset), 250 (length), 399 (its CRC).
    for (case, at) in [3usize, 57 * 24, 123 * 24 + 4, 250 * 24 + 8, 399 * 24 + 22]
        .into_iter()
        .enumerate()
    {
        let damaged = (at / 24) as u64;
        let mut bytes = good.clone();
        bytes[at] ^= 0x04;
        std::fs::write(&object, &bytes).unwrap();
        let ds = fx.open(fx.config(&format!("cache{case}")));
        for i in 0..fx.n {
            match ds.gather_blocking(&[i]) {
                Ok(b) => {
                    assert_ne!(i, damaged, "the damaged entry of record {i} was served");
                    assert_eq!(b.get(0, 0).unwrap(), record(i)[0].as_slice(), "record {i}");
                }
                Err(Error::OffsetCorrupt { index, field, .. }) => {
                    assert_eq!((index, i, field.as_str()), (damaged, damaged, "a"));
                }
                Err(e) => panic!("record {i}: {e}"),
            }
        }
        // In a batch, the batch fails naming the record.
        let batch: Vec<u64> = (0..fx.n).rev().collect();
        match ds.gather_blocking(&batch) {
            Err(Error::OffsetCorrupt { index, .. }) => assert_eq!(index, damaged),
            other => panic!("expected OffsetCorrupt, got {:?}", other.map(|_| ())),
        }
        // The damaged page was not kept in the cache: a reader after the repair reads it all.
        std::fs::write(&object, &good).unwrap();
        let again = fx.open(fx.config(&format!("cache{case}")));
        check(&again, &(0..fx.n).collect::<Vec<_>>());
    }
}

#[test]
fn a_page_damaged_in_the_cache_is_fetched_again_and_the_cache_repaired() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let fx = fixture(2000);
    let all: Vec<u64> = (0..fx.n).collect();
    check(&fx.open(fx.config("cache")), &all);
    let files = page_files(&fx.tmp.path().join("cache"));
    assert_eq!(files.len(), 2, "{files:?}");
    let object = fx.table_object("a");
    let good = std::fs::read(&object).unwrap();
    let file = files
        .iter()
        .find(|f| {
            std::fs::read(f).unwrap() == good
                && f.to_string_lossy()
                    .contains(&*object.file_name().unwrap().to_string_lossy())
        })
        .expect("field a's page file holds its table");

    // Everything is cached: a new reader fetches no page.
    let before = stats();
    check(&fx.open(fx.config("cache")), &all);
    assert_eq!(stats().table_requests, before.table_requests);

    // Damage: a flipped bit, a zeroed page (a torn write), and a file cut short.
    let mut bytes = good.clone();
    bytes[55 * 24 + 9] ^= 0x80;
    bytes[700 * 24..710 * 24].fill(0);
    std::fs::write(file, &bytes).unwrap();
    let before = stats();
    check(&fx.open(fx.config("cache")), &all);
    let after = stats();
    assert!(
        after.table_requests > before.table_requests,
        "not refetched"
    );
    assert!(
        after.table_bytes_fetched - before.table_bytes_fetched <= 2 * PAGE_BYTES,
        "only the two damaged pages are fetched again"
    );
    assert_eq!(std::fs::read(file).unwrap(), good, "the cache is repaired");

    std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .unwrap()
        .set_len(1000 * 24 + 5)
        .unwrap();
    check(&fx.open(fx.config("cache")), &all);
    assert_eq!(std::fs::read(file).unwrap(), good, "the cache is refilled");
}

#[test]
fn readers_with_and_without_mirrors_keep_each_others_copies() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let fx = fixture(500);
    let all: Vec<u64> = (0..fx.n).collect();
    let cache = fx.tmp.path().join("shared");
    check(&fx.open(fx.config("shared")), &all);
    let pages = page_files(&cache);
    assert_eq!(pages.len(), 2);
    check(&fx.open(fx.config("shared").mirror_tables(true)), &all);
    assert!(
        pages.iter().all(|p| p.exists()),
        "a mirrored open removed the page files"
    );
    let before = stats();
    check(&fx.open(fx.config("shared")), &all);
    assert_eq!(
        stats().table_requests,
        before.table_requests,
        "pages fetched again"
    );
    let mirrors: Vec<PathBuf> = pages
        .iter()
        .map(|p| PathBuf::from(p.to_string_lossy().trim_end_matches(".pages")))
        .collect();
    assert!(
        mirrors.iter().all(|m| m.exists()),
        "an open on demand removed the mirrors"
    );
}
