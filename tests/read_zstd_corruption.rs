//! Damage to zstd data is a typed error, never other bytes: a flipped byte of a zstd frame (with
//! or without a dictionary) names the chunk, field, record and offset on every backend, and a
//! damaged, short or missing dictionary file names the file when the dataset is opened.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::os::unix::fs::FileExt as _;
use zrecord::{
    Backend, Codec, DType, Dataset, Error, Field, ReadConfig, Schema, Writer, WriterConfig,
};

fn text(i: u64, len: usize) -> Vec<u8> {
    let words = [
        "alpha", "beta", "gamma", "delta", "tree", "house", "river", "stone", "blue",
    ];
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut s = String::new();
    while s.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(words[(x % words.len() as u64) as usize]);
        s.push(' ');
    }
    s.into_bytes()
}

fn make(dir: &std::path::Path) {
    let schema = Schema::new()
        .field(Field::new("plain", DType::Bytes).codec(Codec::zstd()))
        .field(Field::new("dict", DType::Bytes).codec(Codec::zstd_dict()));
    let config = WriterConfig::default().dictionary_sample_bytes(32 << 10);
    let mut w = Writer::create(dir, &schema, config).unwrap();
    for i in 0..400 {
        w.append(&[text(i, 600), text(i + 1, 300)]).unwrap();
    }
    w.commit().unwrap();
}

fn flip(path: &std::path::Path, at: u64) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0x21], at).unwrap();
}

#[test]
fn a_flipped_byte_of_a_zstd_frame_is_a_typed_error_on_every_backend() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    make(&dir);
    let snap = Dataset::open(&dir).unwrap().snapshot();
    for (field, index) in [(0usize, 17u64), (1, 350)] {
        let loc = snap.locate(field, index).unwrap();
        assert_ne!(loc.codec, Codec::Raw);
        if field == 1 {
            assert_eq!(loc.dictionary, Some(1));
        }
        let chunk = loc.chunk.clone().unwrap();
        // A byte in the middle of the frame: past its header, inside its compressed block.
        flip(&chunk, loc.offset + u64::from(loc.stored_len) / 2);
        for backend in [Backend::Uring, Backend::Psync, Backend::Mmap, Backend::Auto] {
            let ds = Dataset::open_with(&dir, ReadConfig::default().with_backend(backend)).unwrap();
            let e = ds.gather_blocking(&[1, index, 2]).unwrap_err();
            match &e {
                Error::ChecksumMismatch {
                    path,
                    field: name,
                    index: at,
                    offset,
                    ..
                }
                | Error::Decompress {
                    path,
                    field: name,
                    index: at,
                    offset,
                    ..
                } => {
                    assert_eq!(path, &chunk, "{e}");
                    assert_eq!(name, ["plain", "dict"][field], "{e}");
                    assert_eq!(*at, index, "{e}");
                    assert_eq!(*offset, loc.offset, "{e}");
                }
                other => panic!("{backend:?}: unexpected {other}"),
            }
            assert!(e.is_corruption());
            // The rest of the dataset reads.
            ds.gather_blocking(&[1, 2, index + 1]).unwrap();
        }
        flip(&chunk, loc.offset + u64::from(loc.stored_len) / 2);
    }
}

#[test]
fn a_damaged_short_or_missing_dictionary_file_is_named_at_open() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    make(&dir);
    let dict = dir.join("dict.1.zdict");
    let good = std::fs::read(&dict).unwrap();

    flip(&dict, good.len() as u64 / 2);
    match Dataset::open(&dir).unwrap_err() {
        Error::DictionaryCorrupt {
            path,
            field,
            number,
            ..
        } => {
            assert_eq!(path, dict);
            assert_eq!(field, "dict");
            assert_eq!(number, 1);
        }
        other => panic!("unexpected {other}"),
    }
    assert!(Writer::open(&dir, WriterConfig::default()).is_err());

    std::fs::write(&dict, &good[..good.len() - 1]).unwrap();
    match Dataset::open(&dir).unwrap_err() {
        Error::Truncated { path, .. } => assert_eq!(path, dict),
        other => panic!("unexpected {other}"),
    }

    std::fs::remove_file(&dict).unwrap();
    let e = Dataset::open(&dir).unwrap_err();
    assert!(e.to_string().contains("dict.1.zdict"), "{e}");

    // Restored, everything reads again.
    std::fs::write(&dict, &good).unwrap();
    let ds = Dataset::open(&dir).unwrap();
    ds.gather_blocking(&(0..400).collect::<Vec<_>>()).unwrap();
}
