//! A rebalance keeps every record of a zstd field byte-exact: records are checked against the
//! CRC32C of their logical bytes while copied (a damaged frame is a typed error naming the
//! field and record, never copied), each keeps the dictionary it names, and a retraining
//! rebalance recompresses the field with one new dictionary (records appended before any
//! dictionary included), drops the dictionaries no record names any more, and later appends
//! use the new one.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use zrecord::{
    Codec, DType, Dataset, Error, Field, RebalanceOptions, Schema, Writer, WriterConfig,
};

/// Caption-like records: words of a small vocabulary, so a dictionary helps.
fn caption(i: u64, len: usize) -> Vec<u8> {
    const WORDS: [&str; 20] = [
        "a", "photo", "of", "the", "red", "dog", "running", "on", "beach", "at", "sunset", "with",
        "blue", "sky", "and", "small", "boat", "near", "city", "street",
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

fn record(i: u64) -> Vec<Vec<u8>> {
    let len = 80 + (i as usize * 37) % 300;
    vec![
        caption(i, len),
        caption(i + 3, len),
        i.to_le_bytes().to_vec(),
    ]
}

fn schema() -> Schema {
    Schema::new()
        .field(Field::new("plain", DType::Bytes).codec(Codec::zstd()))
        .field(Field::new("dict", DType::Bytes).codec(Codec::zstd_dict()))
        .field(Field::new("id", DType::U8))
        .chunk_size_bytes(64 << 10)
}

fn config() -> WriterConfig {
    // A small sample and small jobs: the first records of "dict" are plain zstd.
    WriterConfig::default()
        .dictionary_sample_bytes(32 << 10)
        .write_buffer_bytes(8 << 10)
}

/// Every record reads back byte-exact.
fn check(dir: &std::path::Path, model: &[Vec<Vec<u8>>]) {
    let ds = Dataset::open(dir).unwrap();
    assert_eq!(ds.len(), model.len() as u64);
    let idx: Vec<u64> = (0..model.len() as u64).collect();
    let b = ds.gather_blocking(&idx).unwrap();
    for (i, want) in model.iter().enumerate() {
        for (f, w) in want.iter().enumerate() {
            assert_eq!(b.get(i, f).unwrap(), &w[..], "record {i} field {f}");
        }
    }
}

fn dictionaries(dir: &std::path::Path) -> Vec<u8> {
    let ds = Dataset::open(dir).unwrap();
    let snap = ds.snapshot();
    let mut n: Vec<u8> = (0..ds.len())
        .filter_map(|i| snap.locate(1, i).unwrap().dictionary)
        .collect();
    n.sort_unstable();
    n.dedup();
    n
}

fn build(dir: &std::path::Path) -> Vec<Vec<Vec<u8>>> {
    let mut w = Writer::create(dir, &schema(), config()).unwrap();
    let mut model = Vec::new();
    for i in 0..900 {
        w.append(&record(i)).unwrap();
        model.push(record(i));
    }
    w.commit().unwrap();
    let samples: Vec<Vec<u8>> = (0..200).map(|i| caption(i + 5000, 200)).collect();
    w.train_dictionary("dict", &samples).unwrap();
    for i in 900..1000 {
        w.append(&record(i)).unwrap();
        model.push(record(i));
    }
    // A delete moves the last record into the hole.
    for i in (0..100).step_by(7) {
        w.delete(i).unwrap();
        model.swap_remove(i as usize);
    }
    w.modify(10, "dict", &caption(77, 150)).unwrap();
    model[10][1] = caption(77, 150);
    w.commit().unwrap();
    model
}

#[test]
fn a_rebalance_keeps_zstd_records_and_their_dictionaries() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let model = build(&dir);
    check(&dir, &model);
    assert_eq!(dictionaries(&dir), vec![1, 2]);
    let mut w = Writer::open(&dir, config()).unwrap();
    w.rebalance().unwrap();
    drop(w);
    check(&dir, &model);
    assert_eq!(dictionaries(&dir), vec![1, 2]);
}

#[test]
fn a_retraining_rebalance_recompresses_with_one_new_dictionary() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let mut model = build(&dir);
    let stored = |dir: &std::path::Path| -> u64 {
        let ds = Dataset::open(dir).unwrap();
        let snap = ds.snapshot();
        (0..ds.len())
            .map(|i| u64::from(snap.locate(1, i).unwrap().stored_len))
            .sum()
    };
    let before = stored(&dir);
    let plain_before = Dataset::open(&dir)
        .unwrap()
        .snapshot()
        .locate(1, 1)
        .unwrap()
        .dictionary;
    assert_eq!(plain_before, None, "the first records are plain zstd");
    let mut w = Writer::open(&dir, config()).unwrap();
    w.rebalance_with(RebalanceOptions::default().retrain_dictionaries(true))
        .unwrap();
    for i in 1000..1100 {
        w.append(&record(i)).unwrap();
        model.push(record(i));
    }
    w.commit().unwrap();
    drop(w);
    check(&dir, &model);
    // One dictionary, number 3 (1 and 2 were in use while it was written), named by every
    // live record, the old appended ones included; the files of 1 and 2 are gone.
    assert_eq!(dictionaries(&dir), vec![3]);
    assert!(dir.join("dict.3.zdict").exists());
    assert!(!dir.join("dict.1.zdict").exists());
    assert!(!dir.join("dict.2.zdict").exists());
    let meta = std::fs::read_to_string(dir.join("meta.json")).unwrap();
    assert!(!meta.contains("\"number\":1"), "{meta}");
    let ds = Dataset::open(&dir).unwrap();
    assert_eq!(ds.snapshot().locate(1, 1).unwrap().dictionary, Some(3));
    assert_eq!(ds.snapshot().locate(1, 1050).unwrap().dictionary, Some(3));
    assert!(stored(&dir) < before, "{} !< {before}", stored(&dir));
    // Plain zstd and raw fields are not retrained.
    assert_eq!(ds.snapshot().locate(0, 1).unwrap().dictionary, None);
}

#[test]
fn a_damaged_zstd_frame_stops_a_rebalance_with_a_typed_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let model = build(&dir);
    // Flip a byte inside record 500's "dict" frame.
    let ds = Dataset::open(&dir).unwrap();
    let at = ds.snapshot().locate(1, 500).unwrap();
    drop(ds);
    let path = at.chunk.clone().unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let k = (at.offset + u64::from(at.stored_len) / 2) as usize;
    bytes[k] ^= 0x20;
    std::fs::write(&path, bytes).unwrap();
    for retrain in [false, true] {
        let mut w = Writer::open(&dir, config()).unwrap();
        let err = w
            .rebalance_with(RebalanceOptions::default().retrain_dictionaries(retrain))
            .unwrap_err();
        match &err {
            Error::ChecksumMismatch { field, index, .. }
            | Error::Decompress { field, index, .. } => {
                assert_eq!((field.as_str(), *index), ("dict", 500), "{err}")
            }
            other => panic!("{other:?}"),
        }
        drop(w);
        // Nothing committed is lost: every other record still reads.
        let ds = Dataset::open(&dir).unwrap();
        let keep: Vec<u64> = (0..model.len() as u64).filter(|&i| i != 500).collect();
        let b = ds.gather_blocking(&keep).unwrap();
        for (k, &i) in keep.iter().enumerate() {
            assert_eq!(
                b.get(k, 1).unwrap(),
                &model[i as usize][1][..],
                "record {i}"
            );
        }
    }
}
