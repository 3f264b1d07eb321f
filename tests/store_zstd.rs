//! zstd fields, with and without a trained dictionary, read back byte for byte on every backend,
//! across commits, a reopened writer and a second dictionary; a dataset is format version 2
//! exactly when a field uses zstd.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use zrecord::{Backend, Codec, DType, Dataset, Field, ReadConfig, Schema, Writer, WriterConfig};

/// Caption-like records of about `len` bytes: words of a small vocabulary, so a dictionary helps.
fn caption(i: u64, len: usize) -> Vec<u8> {
    const WORDS: [&str; 24] = [
        "a", "photo", "of", "the", "red", "dog", "running", "on", "beach", "at", "sunset", "with",
        "blue", "sky", "and", "small", "boat", "near", "city", "street", "woman", "holding",
        "umbrella", "rain",
    ];
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut s = format!("{{\"id\": {i}, \"caption\": \"");
    while s.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(WORDS[(x % WORDS.len() as u64) as usize]);
        s.push(' ');
    }
    s.push_str("\"}");
    s.into_bytes()
}

fn incompressible(i: u64, len: usize) -> Vec<u8> {
    let mut x = i.wrapping_add(0x1234_5678_9abc_def1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn record(i: u64) -> Vec<Vec<u8>> {
    let len = 100 + (i as usize * 37) % 400;
    vec![
        caption(i, len),
        caption(i + 7, len),
        if i.is_multiple_of(5) {
            Vec::new()
        } else {
            incompressible(i, 64)
        },
        caption(i, 2000),
    ]
}

fn schema() -> Schema {
    Schema::new()
        .field(Field::new("plain", DType::Bytes).codec(Codec::zstd()))
        .field(Field::new("dict", DType::Bytes).codec(Codec::zstd_dict()))
        .field(Field::new("noise", DType::Bytes).codec(Codec::ZstdDict { level: 1 }))
        .field(Field::new("deflated", DType::U8).codec(Codec::Deflate))
}

fn check_all(dir: &std::path::Path, n: u64) {
    for backend in [Backend::Uring, Backend::Psync, Backend::Mmap, Backend::Auto] {
        for verify in [true, false] {
            let cfg = ReadConfig::default()
                .with_backend(backend)
                .with_verify_checksums(verify);
            let ds = Dataset::open_with(dir, cfg).unwrap();
            assert_eq!(ds.len(), n);
            let idx: Vec<u64> = (0..n).rev().chain([3, 3, 0]).collect();
            let b = ds.gather_blocking(&idx).unwrap();
            for (k, &i) in idx.iter().enumerate() {
                let want = record(i);
                for (f, w) in want.iter().enumerate() {
                    assert_eq!(
                        b.get(k, f).unwrap(),
                        &w[..],
                        "record {i} field {f} {backend:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn zstd_fields_round_trip_and_dictionaries_are_trained_and_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    // A small sample, so the first dictionary is trained early in the run, and small jobs, so
    // the records before it are handed to the append tasks (as plain zstd) before it exists:
    // a job still open when the dictionary is trained is compressed with it.
    let config = || {
        WriterConfig::default()
            .dictionary_sample_bytes(64 << 10)
            .write_buffer_bytes(16 << 10)
    };
    let mut w = Writer::create(&dir, &schema(), config()).unwrap();
    let meta = std::fs::read_to_string(dir.join("meta.json")).unwrap();
    assert!(meta.contains("\"version\":2"), "{meta}");
    for i in 0..600 {
        w.append(&record(i)).unwrap();
    }
    w.commit().unwrap();
    drop(w);
    check_all(&dir, 600);

    let ds = Dataset::open(&dir).unwrap();
    let snap = ds.snapshot();
    // Early records of the dictionary field are plain zstd, later ones name dictionary 1.
    let first = snap.locate(1, 0).unwrap();
    assert_eq!(first.codec, Codec::zstd_dict());
    assert_eq!(first.dictionary, None);
    let last = snap.locate(1, 599).unwrap();
    assert_eq!(last.dictionary, Some(1));
    assert!(dir.join("dict.1.zdict").exists());
    // Incompressible records are stored raw whatever the codec.
    assert_eq!(snap.locate(2, 1).unwrap().codec, Codec::Raw);
    // With the dictionary, caption records are smaller than plain zstd's.
    let stored = |f: usize| -> u64 {
        (300..600)
            .map(|i| u64::from(snap.locate(f, i).unwrap().stored_len))
            .sum()
    };
    assert!(
        stored(1) < stored(0),
        "dict {} plain {}",
        stored(1),
        stored(0)
    );

    // A reopened writer compresses with dictionary 1; an explicit training makes dictionary 2.
    let mut w = Writer::open(&dir, config()).unwrap();
    for i in 600..620 {
        w.append(&record(i)).unwrap();
    }
    let samples: Vec<Vec<u8>> = (0..200).map(|i| caption(i + 9000, 300)).collect();
    assert_eq!(w.train_dictionary("dict", &samples).unwrap(), 2);
    assert!(w.train_dictionary("plain", &samples).is_err());
    assert!(w.train_dictionary("dict", &[b"x".to_vec()]).is_err());
    for i in 620..700 {
        w.append(&record(i)).unwrap();
    }
    w.modify(5, "dict", &record(5)[1]).unwrap();
    w.commit().unwrap();
    drop(w);
    check_all(&dir, 700);
    let ds = Dataset::open(&dir).unwrap();
    let snap = ds.snapshot();
    assert_eq!(snap.locate(1, 600).unwrap().dictionary, Some(1));
    assert_eq!(snap.locate(1, 699).unwrap().dictionary, Some(2));
    assert_eq!(snap.locate(1, 5).unwrap().dictionary, Some(2));
}

#[test]
fn a_dataset_without_zstd_stays_version_1() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let schema = Schema::new().field(Field::new("x", DType::U8).codec(Codec::Deflate));
    let mut w = Writer::create(&dir, &schema, WriterConfig::default()).unwrap();
    w.append(&[vec![1u8; 100]]).unwrap();
    w.commit().unwrap();
    let meta = std::fs::read_to_string(dir.join("meta.json")).unwrap();
    assert!(meta.contains("\"version\":1"), "{meta}");
    assert!(!meta.contains("dictionaries"), "{meta}");
}
