//! A read the window kept for a gather serves only that file's bytes, and only the bytes its
//! announcing snapshot committed: never a removed or replaced file's bytes (a dataset dropped
//! and re-created at the same path, a chunk id reused after a rebalance), never zeros past the
//! end the file had when it was read, with checksums on or off, on every backend.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::Path;

use zrecord::pipeline::Source;
use zrecord::{Backend, DType, Dataset, Field, ReadConfig, Schema, Writer, WriterConfig};

fn value(i: u64, len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|j| (i as u8).wrapping_mul(29).wrapping_add(j as u8) ^ salt)
        .collect()
}

/// A dataset of `n` records of `len` bytes, ten records a chunk.
fn create(dir: &Path, n: u64, len: usize, salt: u8) {
    let schema = Schema::new()
        .field(Field::new("x", DType::U8))
        .chunk_size_bytes(10 * len as u64);
    let mut w = Writer::create(dir, &schema, WriterConfig::default().num_writers(1)).unwrap();
    for i in 0..n {
        w.append(&[value(i, len, salt)]).unwrap();
    }
    w.commit().unwrap();
}

fn configs() -> Vec<ReadConfig> {
    let mut out = Vec::new();
    for backend in [Backend::Uring, Backend::Psync, Backend::Auto] {
        for verify in [true, false] {
            out.push(
                ReadConfig::default()
                    .with_backend(backend)
                    .with_direct_io(true)
                    .with_verify_checksums(verify),
            );
        }
    }
    out
}

/// Announces `indices` on `ds` and waits until the window's reads are done (kept).
fn announce(ds: &Dataset, session: u64, indices: &[u64]) {
    Source::lookahead(ds, session, indices);
    assert!(
        zrecord::testing::read_window_held(ds) > 0,
        "the window kept nothing for {indices:?}"
    );
}

#[test]
fn a_dataset_recreated_at_the_same_path_never_reads_the_old_files_bytes() {
    for (k, cfg) in configs().into_iter().enumerate() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ds");
        create(&dir, 40, 3000, 0x11);
        let old = Dataset::open_with(&dir, cfg.clone()).unwrap();
        let idx: Vec<u64> = (0..12).collect();
        announce(&old, 1000 + k as u64, &idx);

        // Drop and re-create: same layout, other bytes; the window still keeps the old reads.
        std::fs::remove_dir_all(&dir).unwrap();
        create(&dir, 40, 3000, 0x5a);
        let new = Dataset::open_with(&dir, cfg.clone()).unwrap();
        let b = new
            .gather_blocking(&idx)
            .unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
        for (r, &i) in idx.iter().enumerate() {
            assert_eq!(
                b.get(r, 0).unwrap(),
                &value(i, 3000, 0x5a)[..],
                "{cfg:?}: record {i} has the removed dataset's bytes"
            );
        }
        Source::end_lookahead(&old, 1000 + k as u64);
    }
}

#[test]
fn a_chunk_id_reused_after_a_rebalance_never_serves_the_removed_chunks_bytes() {
    for (k, cfg) in configs().into_iter().enumerate() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ds");
        create(&dir, 30, 2000, 0x21);
        let ds = Dataset::open_with(&dir, cfg.clone()).unwrap();
        // Keep reads of records 20..30 (chunk 2) for a later gather.
        let idx: Vec<u64> = (20..30).collect();
        announce(&ds, 2000 + k as u64, &idx);

        // Delete the first 20 (swap-remove moves 20..30 into 0..10), rebalance (chunks 0-2 are
        // unreferenced, the live records rewritten into chunk 3, full), then append from a new
        // writer: it removes chunks 0-2 and reuses ids 0, 1, 2 for new files whose bytes sit
        // where the old records were.
        let mut w = ds.writer().unwrap();
        for _ in 0..20 {
            w.delete(0).unwrap();
        }
        w.commit().unwrap();
        w.rebalance().unwrap();
        // A new writer removes the files no commit names (chunk 0) before it appends.
        drop(w);
        let mut w = ds.writer().unwrap();
        for i in 0..40 {
            w.append(&[value(i, 2000, 0x77)]).unwrap();
        }
        w.commit().unwrap();
        drop(w);
        ds.refresh().unwrap();
        let len = ds.len();
        let all: Vec<u64> = (0..len).collect();
        let b = ds
            .gather_blocking(&all)
            .unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
        let fresh = Dataset::open_with(&dir, ReadConfig::default()).unwrap();
        let truth = fresh.gather_blocking(&all).unwrap();
        for r in 0..all.len() {
            assert_eq!(
                b.get(r, 0).unwrap(),
                truth.get(r, 0).unwrap(),
                "{cfg:?}: record {r} differs from what the commit holds"
            );
        }
        Source::end_lookahead(&ds, 2000 + k as u64);
    }
}

#[test]
fn a_kept_read_never_serves_bytes_past_the_end_its_file_had() {
    for (k, cfg) in configs().into_iter().enumerate() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ds");
        // 9 records of 100 bytes: one chunk of 900 bytes (of 1,000), inside one 4 KiB block.
        create(&dir, 9, 100, 0x31);
        let ds = Dataset::open_with(&dir, cfg.clone()).unwrap();
        announce(&ds, 3000 + k as u64, &[8]);

        // Modify record 8: its new value is appended to the same chunk, in the same block, past
        // the end the kept read saw.
        let mut w = ds.writer().unwrap();
        w.modify(8, "x", &value(99, 100, 0x44)).unwrap();
        w.commit().unwrap();
        drop(w);
        ds.refresh().unwrap();
        for round in 0..2 {
            let b = ds
                .gather_blocking(&[8])
                .unwrap_or_else(|e| panic!("{cfg:?}, gather {round}: {e}"));
            assert_eq!(
                b.get(0, 0).unwrap(),
                &value(99, 100, 0x44)[..],
                "{cfg:?}, gather {round}: record 8 is not its committed value"
            );
        }
        Source::end_lookahead(&ds, 3000 + k as u64);
    }
}
