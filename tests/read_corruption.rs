//! A damaged chunk byte is a typed error naming the chunk file, field, record and offset on every
//! backend; the undamaged records of the same batch's dataset stay readable.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::os::unix::fs::FileExt as _;
use zrecord::{
    Backend, Codec, DType, Dataset, Error, Field, ReadConfig, Schema, Writer, WriterConfig,
};

#[test]
fn a_flipped_chunk_byte_is_reported_by_every_backend() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let schema = Schema::new()
        .field(Field::new("raw", DType::U8))
        .field(Field::new("packed", DType::U8).codec(Codec::Deflate));
    let mut w = Writer::create(&dir, &schema, WriterConfig::default()).unwrap();
    let rec = |i: u64| -> Vec<Vec<u8>> {
        vec![
            (0..5000).map(|j| (i * 7 + j) as u8).collect(),
            (0..5000).map(|j| ((j % 13) ^ i) as u8).collect(),
        ]
    };
    for i in 0..20 {
        w.append(&rec(i)).unwrap();
    }
    w.commit().unwrap();
    drop(w);

    // Find record 7's bytes through a healthy read, then damage one byte of each field.
    let chunk = dir.join("chunk").join("00000.zr");
    let data = std::fs::read(&chunk).unwrap();
    let raw7 = &rec(7)[0];
    let at = data
        .windows(raw7.len())
        .position(|w| w == &raw7[..])
        .unwrap() as u64;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&chunk)
        .unwrap();
    let byte = data[at as usize + 100] ^ 0x10;
    f.write_all_at(&[byte], at + 100).unwrap();
    drop(f);
    // Evict nothing: the page cache holds the damaged byte, which is what every backend reads.

    for backend in [Backend::Uring, Backend::Psync, Backend::Mmap, Backend::Auto] {
        for direct in [false, true] {
            let opts = ReadConfig::default()
                .with_backend(backend)
                .with_direct_io(direct);
            let ds = Dataset::open_with(&dir, opts.clone()).unwrap();
            let e = ds.gather_blocking(&[1, 7, 2]).unwrap_err();
            match &e {
                Error::ChecksumMismatch {
                    path,
                    field,
                    index,
                    offset,
                    ..
                } => {
                    assert_eq!(path, &chunk, "{backend}");
                    assert_eq!(field, "raw");
                    assert_eq!(*index, 7);
                    assert_eq!(*offset, at);
                }
                other => {
                    panic!("{backend} direct={direct}: expected ChecksumMismatch, got {other}")
                }
            }
            assert!(e.is_corruption());
            assert!(e.to_string().contains("00000.zr"), "{e}");
            // The other field of record 7, and every other record, still read.
            let b = ds.gather_fields_blocking(&[7], &["packed"]).unwrap();
            assert_eq!(b.get(0, 0).unwrap(), &rec(7)[1][..]);
            let ok: Vec<u64> = (0..20).filter(|&i| i != 7).collect();
            let b = ds.gather_blocking(&ok).unwrap();
            for (r, &i) in ok.iter().enumerate() {
                assert_eq!(b.get(r, 0).unwrap(), &rec(i)[0][..]);
                assert_eq!(b.get(r, 1).unwrap(), &rec(i)[1][..]);
            }
            // With verification off the damaged raw bytes come back: that is the trade-off.
            let ds = Dataset::open_with(&dir, opts.with_verify_checksums(false)).unwrap();
            let b = ds.gather_blocking(&[7]).unwrap();
            assert_ne!(b.get(0, 0).unwrap(), &rec(7)[0][..]);
        }
    }
}

/// The same in a batch big enough to be checked on several threads: the damaged record is
/// reported, by index, whichever thread checks it.
#[test]
fn a_flipped_byte_in_a_big_batch_is_reported_by_every_backend() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let schema = Schema::new()
        .field(Field::new("raw", DType::U8))
        .field(Field::new("packed", DType::U8).codec(Codec::Deflate));
    let mut w = Writer::create(&dir, &schema, WriterConfig::default()).unwrap();
    let rec = |i: u64| -> Vec<Vec<u8>> {
        vec![
            (0..256 * 1024)
                .map(|j| (i * 13 + j * 7 + j / 251) as u8)
                .collect(),
            (0..64 * 1024).map(|j| ((j % 29) ^ i) as u8).collect(),
        ]
    };
    for i in 0..40 {
        w.append(&rec(i)).unwrap();
    }
    w.commit().unwrap();
    drop(w);
    let loc = Dataset::open(&dir)
        .unwrap()
        .snapshot()
        .locate(0, 30)
        .unwrap();
    let (chunk, at) = (loc.chunk.unwrap(), loc.offset);
    let data = std::fs::read(&chunk).unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&chunk)
        .unwrap();
    f.write_all_at(&[data[at as usize + 200_000] ^ 1], at + 200_000)
        .unwrap();
    drop(f);
    let all: Vec<u64> = (0..40).collect();
    for backend in [Backend::Uring, Backend::Psync, Backend::Mmap, Backend::Auto] {
        let ds = Dataset::open_with(&dir, ReadConfig::default().with_backend(backend)).unwrap();
        match ds.gather_blocking(&all).unwrap_err() {
            Error::ChecksumMismatch { index, offset, .. } => {
                assert_eq!(index, 30, "{backend}");
                assert_eq!(offset, at, "{backend}");
            }
            other => panic!("{backend}: {other}"),
        }
        let ok: Vec<u64> = (0..40).filter(|&i| i != 30).collect();
        let b = ds.gather_blocking(&ok).unwrap();
        for (r, &i) in ok.iter().enumerate() {
            assert_eq!(b.get(r, 0).unwrap(), &rec(i)[0][..], "{backend} record {i}");
            assert_eq!(b.get(r, 1).unwrap(), &rec(i)[1][..], "{backend} record {i}");
        }
    }
}

/// Two damaged records in a batch big enough to be finished on several threads: the one that
/// comes first in the caller's order is reported, whichever thread gets to it first.
#[test]
fn the_first_damaged_record_in_batch_order_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let schema = Schema::new().field(Field::new("packed", DType::U8).codec(Codec::Deflate));
    let mut w = Writer::create(&dir, &schema, WriterConfig::default()).unwrap();
    let rec = |i: u64| -> Vec<u8> { (0..64 * 1024).map(|j| ((j % 31) ^ i) as u8).collect() };
    for i in 0..256 {
        w.append(&[&rec(i)]).unwrap();
    }
    w.commit().unwrap();
    drop(w);
    let snap = Dataset::open(&dir).unwrap().snapshot();
    for i in [40, 200] {
        let loc = snap.locate(0, i).unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(loc.chunk.as_ref().unwrap())
            .unwrap();
        let at = loc.offset + u64::from(loc.stored_len / 2);
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, at).unwrap();
        f.write_all_at(&[b[0] ^ 0x40], at).unwrap();
    }
    drop(snap);
    let up: Vec<u64> = (0..256).collect();
    let down: Vec<u64> = (0..256).rev().collect();
    for backend in [Backend::Uring, Backend::Psync, Backend::Mmap, Backend::Auto] {
        let ds = Dataset::open_with(&dir, ReadConfig::default().with_backend(backend)).unwrap();
        for (indices, first) in [(&up, 40), (&down, 200)] {
            match ds.gather_blocking(indices).unwrap_err() {
                Error::ChecksumMismatch { index, .. } => assert_eq!(index, first, "{backend}"),
                other => panic!("{backend}: {other}"),
            }
        }
        // Checksums off: the damaged streams are still caught, as decompression errors or
        // wrong bytes, never a panic; the first damaged one in order is the one named.
        let ds = Dataset::open_with(
            &dir,
            ReadConfig::default()
                .with_backend(backend)
                .with_verify_checksums(false),
        )
        .unwrap();
        if let Err(Error::Decompress { index, .. }) = ds.gather_blocking(&up) {
            assert!(index == 40 || index == 200, "{backend}: {index}");
        }
    }
}
