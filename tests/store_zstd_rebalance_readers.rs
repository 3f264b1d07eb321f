//! Readers that open and gather while retraining rebalances replace a zstd field's dictionary
//! (the old dictionary files unlinked after each commit) always see every record byte-exact:
//! a snapshot keeps the dictionaries it loaded, and an open that races a commit opens again.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use zrecord::{Codec, DType, Dataset, Field, RebalanceOptions, Schema, Writer, WriterConfig};

fn caption(i: u64) -> Vec<u8> {
    const WORDS: [&str; 12] = [
        "a", "photo", "of", "the", "red", "dog", "on", "beach", "at", "sunset", "blue", "sky",
    ];
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut s = format!("{{\"id\": {i}, \"caption\": \"");
    for _ in 0..(10 + i % 30) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(WORDS[(x % WORDS.len() as u64) as usize]);
        s.push(' ');
    }
    s.push_str("\"}");
    s.into_bytes()
}

#[test]
fn readers_see_every_record_while_dictionaries_are_retrained() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let schema = Schema::new()
        .field(Field::new("text", DType::Bytes).codec(Codec::zstd_dict()))
        .chunk_size_bytes(32 << 10);
    let config = WriterConfig::default().dictionary_sample_bytes(16 << 10);
    let n = 2000u64;
    let mut w = Writer::create(&dir, &schema, config).unwrap();
    for i in 0..n {
        w.append(&[caption(i)]).unwrap();
    }
    w.commit().unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (dir, stop) = (dir.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut rounds = 0u64;
                while !stop.load(Ordering::Acquire) || rounds < 3 {
                    let ds = Dataset::open(&dir).unwrap();
                    let idx: Vec<u64> = (0..n)
                        .filter(|i| (i + rounds + r).is_multiple_of(7))
                        .collect();
                    let b = ds.gather_blocking(&idx).unwrap();
                    for (k, &i) in idx.iter().enumerate() {
                        assert_eq!(b.get(k, 0).unwrap(), &caption(i)[..], "record {i}");
                    }
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    for _ in 0..6 {
        w.rebalance_with(RebalanceOptions::default().retrain_dictionaries(true))
            .unwrap();
    }
    stop.store(true, Ordering::Release);
    for r in readers {
        assert!(r.join().unwrap() >= 3);
    }
    // One dictionary file is left: each rebalance removed the one before.
    let dicts = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".zdict")
        })
        .count();
    assert_eq!(dicts, 1);
}
