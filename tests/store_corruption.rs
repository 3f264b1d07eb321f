//! Damaged bytes on disk — any single-bit flip or truncation of `meta.json`, of an offset table
//! or patch log, and bit flips in chunk files — are reported as typed errors naming the file,
//! never a panic and never wrong bytes; undamaged records stay readable.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use zrecord::{Codec, DType, Dataset, Error, Field, Schema, Writer, WriterConfig};

const N: u64 = 1000;

fn record(i: u64) -> Vec<Vec<u8>> {
    let text: Vec<u8> = format!("record {i} ")
        .repeat(1 + (i % 9) as usize)
        .into_bytes();
    let raw: Vec<u8> = (0..(1 + i % 200))
        .map(|j| (j as u8).wrapping_mul(31) ^ i as u8)
        .collect();
    vec![text, raw]
}

/// A dataset of `N` records in two fields (deflate and raw) over several chunks; with
/// `patches`, a few records are modified so the fields have patch logs.
fn build(dir: &Path, patches: bool) {
    let schema = Schema::new()
        .field(Field::new("text", DType::U8).codec(Codec::Deflate))
        .field(Field::new("raw", DType::U8))
        .chunk_size_bytes(64 * 1024);
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    for i in 0..N {
        w.append(&record(i)).unwrap();
    }
    w.commit().unwrap();
    if patches {
        for i in (0..N).step_by(100) {
            w.modify_record(i, &record(i)).unwrap();
        }
        w.commit().unwrap();
    }
}

fn flip(path: &Path, bit: u64) {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, bit / 8).unwrap();
    b[0] ^= 1 << (bit % 8);
    f.write_all_at(&b, bit / 8).unwrap();
}

fn names(err: &Error, path: &Path) -> bool {
    let name = path.file_name().unwrap().to_str().unwrap();
    err.to_string().contains(name)
}

fn assert_all_correct(ds: &Dataset) {
    for i in 0..N {
        let got = ds.get(i).unwrap();
        let want = record(i);
        assert_eq!(&got[0][..], &want[0][..]);
        assert_eq!(&got[1][..], &want[1][..]);
    }
}

#[test]
fn every_bit_flip_and_truncation_of_meta_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    build(&dir, true);
    let meta = dir.join("meta.json");
    let good = std::fs::read(&meta).unwrap();
    let mut checked = 0;
    for bit in 0..(good.len() as u64 * 8) {
        let mut bad = good.clone();
        bad[(bit / 8) as usize] ^= 1 << (bit % 8);
        std::fs::write(&meta, &bad).unwrap();
        match Dataset::open(&dir) {
            Err(e) => {
                assert!(
                    e.is_corruption() || matches!(e, Error::UnsupportedVersion { .. }),
                    "{e}"
                );
                assert!(names(&e, &meta), "error does not name meta.json: {e}");
                checked += 1;
            }
            // Only the trailing newline may change harmlessly... and it cannot become whitespace.
            Ok(_) => panic!("flip of bit {bit} went unnoticed"),
        }
        // The writer must refuse too, and must not "clean up" anything.
        assert!(Writer::open(&dir, WriterConfig::default()).is_err());
    }
    for n in 0..good.len() - 1 {
        std::fs::write(&meta, &good[..n]).unwrap();
        let e = Dataset::open(&dir).unwrap_err();
        assert!(names(&e, &meta), "{e}");
        checked += 1;
    }
    std::fs::write(&meta, &good).unwrap();
    assert_all_correct(&Dataset::open(&dir).unwrap());
    println!("meta.json: {checked} damaged versions, all reported");
}

fn table_path(dir: &Path, field: &str) -> PathBuf {
    dir.join(format!("{field}.0.offsets"))
}

#[test]
fn every_bit_flip_of_an_offset_table_is_reported_on_read() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    build(&dir, false);
    let ds = Dataset::open(&dir).unwrap();
    for (f, field) in ["text", "raw"].into_iter().enumerate() {
        let path = table_path(&dir, field);
        let len = std::fs::metadata(&path).unwrap().len();
        assert_eq!(len, N * 24, "a 1,000-entry table");
        for bit in 0..len * 8 {
            flip(&path, bit);
            let index = bit / 8 / 24;
            // The damaged entry is reported, naming the table, the record and the byte offset.
            let e = ds.get(index).unwrap_err();
            match &e {
                Error::OffsetCorrupt {
                    path: p,
                    index: i,
                    offset,
                    ..
                } => {
                    assert_eq!(p, &path);
                    assert_eq!(*i, index);
                    assert_eq!(*offset, index * 24);
                }
                other => panic!("bit {bit}: expected OffsetCorrupt, got {other}"),
            }
            // A batch containing it fails as a whole; neighbours stay readable.
            assert!(ds.gather_blocking(&[0, index]).is_err());
            let other = (index + 1) % N;
            assert_eq!(&ds.get(other).unwrap()[f][..], &record(other)[f][..]);
            flip(&path, bit);
        }
    }
    assert_all_correct(&ds);
}

#[test]
fn every_truncation_of_an_offset_table_or_patch_log_is_reported_at_open() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    build(&dir, true);
    for path in [table_path(&dir, "raw"), dir.join("text.0.patches")] {
        let good = std::fs::read(&path).unwrap();
        for n in 0..good.len() {
            std::fs::write(&path, &good[..n]).unwrap();
            match Dataset::open(&dir) {
                Err(e @ Error::Truncated { .. }) => assert!(names(&e, &path), "{e}"),
                Err(e) => panic!("truncation to {n}: expected Truncated, got {e}"),
                Ok(_) => panic!("truncation to {n} went unnoticed"),
            }
            // The writer refuses as well, leaving the file as it is.
            assert!(Writer::open(&dir, WriterConfig::default()).is_err());
            assert_eq!(std::fs::metadata(&path).unwrap().len(), n as u64);
        }
        std::fs::write(&path, &good).unwrap();
    }
    assert_all_correct(&Dataset::open(&dir).unwrap());
}

#[test]
fn every_bit_flip_of_a_patch_log_is_reported_at_open() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    build(&dir, true);
    let path = dir.join("raw.0.patches");
    let len = std::fs::metadata(&path).unwrap().len();
    assert_eq!(len, 10 * 32);
    for bit in 0..len * 8 {
        flip(&path, bit);
        match Dataset::open(&dir) {
            Err(e @ Error::OffsetCorrupt { .. }) => assert!(names(&e, &path), "{e}"),
            Err(e) => panic!("bit {bit}: expected OffsetCorrupt, got {e}"),
            Ok(_) => panic!("flip of bit {bit} went unnoticed"),
        }
        flip(&path, bit);
    }
    assert_all_correct(&Dataset::open(&dir).unwrap());
}

#[test]
fn random_bit_flips_in_chunks_fail_exactly_the_damaged_record() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    build(&dir, false);
    let ds = Dataset::open(&dir).unwrap();
    let mut chunks: Vec<PathBuf> = std::fs::read_dir(dir.join("chunk"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    chunks.sort();
    assert!(chunks.len() > 1, "the dataset spans several chunks");
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..300 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let path = &chunks[(x % chunks.len() as u64) as usize];
        let bit = (x >> 16) % (std::fs::metadata(path).unwrap().len() * 8);
        flip(path, bit);
        let mut errors = 0;
        for i in 0..N {
            match ds.get(i) {
                Ok(got) => {
                    let want = record(i);
                    assert!(
                        got[0][..] == want[0][..] && got[1][..] == want[1][..],
                        "record {i}: wrong bytes returned"
                    );
                }
                Err(e @ (Error::ChecksumMismatch { .. } | Error::Decompress { .. })) => {
                    assert!(names(&e, path), "{e}");
                    errors += 1;
                }
                Err(e) => panic!("unexpected error {e}"),
            }
        }
        // Every chunk byte belongs to exactly one stored record.
        assert_eq!(
            errors,
            1,
            "a flip of bit {bit} in {} should fail exactly one record",
            path.display()
        );
        flip(path, bit);
    }
    assert_all_correct(&ds);
}

#[test]
fn truncated_chunk_is_reported_at_open() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    build(&dir, false);
    let path = dir.join("chunk").join("00000.zr");
    let len = std::fs::metadata(&path).unwrap().len();
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(len - 1).unwrap();
    let e = Dataset::open(&dir).unwrap_err();
    assert!(
        matches!(e, Error::Truncated { expected, actual, .. } if expected == len && actual == len - 1),
        "{e}"
    );
    assert!(names(&e, &path));
}
