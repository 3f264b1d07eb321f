//! A rebalance's report measures "before" on the dataset as it was: its utilization before is
//! `zrecord info`'s (live stored bytes / chunk bytes), with and without retraining (which
//! changes the stored bytes after). A rebalance with nothing to reclaim rewrites and commits
//! nothing: the generation and every file stay, and the report says so.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::Path;
use std::process::Command;
use zrecord::{Codec, DType, Field, RebalanceOptions, Schema, Writer, WriterConfig};

fn caption(i: u64) -> Vec<u8> {
    const WORDS: [&str; 8] = ["a", "photo", "of", "the", "red", "dog", "on", "beach"];
    let mut s = format!("{{\"id\": {i}, \"caption\": \"");
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    while s.len() < 200 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(WORDS[(x % 8) as usize]);
        s.push(' ');
    }
    s.into_bytes()
}

/// A dataset of 600 captions in a `zstd_dict` field whose first records were written before
/// it had a dictionary: every stored byte is live.
fn make(dir: &Path) {
    let schema = Schema::new()
        .field(Field::new("caption", DType::Bytes).codec(Codec::zstd_dict()))
        .chunk_size_bytes(64 << 10);
    let config = WriterConfig::default()
        .dictionary_sample_bytes(16 << 10)
        .write_buffer_bytes(8 << 10);
    let mut w = Writer::create(dir, &schema, config).unwrap();
    for i in 0..600 {
        w.append(&[caption(i)]).unwrap();
    }
    w.commit().unwrap();
}

/// `zrecord info --json`'s utilization.
fn info_utilization(dir: &Path) -> f64 {
    let out = Command::new(env!("CARGO_BIN_EXE_zrecord"))
        .args(["info", dir.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["utilization"].as_f64().unwrap()
}

/// Every file of `dir` with its bytes.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for e in walk(dir) {
        if e.file_name().is_some_and(|n| n != "writer.lock") {
            out.push((e.display().to_string(), std::fs::read(&e).unwrap()));
        }
    }
    out.sort();
    out
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn utilization_before_is_infos_with_and_without_retraining() {
    for retrain in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ds");
        make(&dir);
        // Dead bytes: some records rewritten.
        let mut w = Writer::open(&dir, WriterConfig::default()).unwrap();
        for i in (0..600).step_by(7) {
            w.modify(i, "caption", &caption(i + 1000)).unwrap();
        }
        w.commit().unwrap();
        let expected = info_utilization(&dir);
        assert!(expected < 1.0, "the modifies left dead bytes");
        let r = w
            .rebalance_with(RebalanceOptions::default().retrain_dictionaries(retrain))
            .unwrap();
        assert!(r.rewritten);
        assert!(
            (r.utilization_before() - expected).abs() < 1e-9,
            "retrain={retrain}: report {} vs info {expected}",
            r.utilization_before()
        );
        assert!((r.utilization_after() - 1.0).abs() < 1e-9);
        assert!((info_utilization(&dir) - 1.0).abs() < 1e-9);
    }
    // Retraining a dataset whose every byte is live: before is 1.0, as info says, though the
    // records compress differently after.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    make(&dir);
    assert!((info_utilization(&dir) - 1.0).abs() < 1e-9);
    let r = Writer::open(&dir, WriterConfig::default())
        .unwrap()
        .rebalance_with(RebalanceOptions::default().retrain_dictionaries(true))
        .unwrap();
    assert!(r.rewritten);
    assert!((r.utilization_before() - 1.0).abs() < 1e-9, "{r:?}");
    assert_ne!(r.live_bytes, r.live_bytes_before, "retraining recompressed");
}

#[test]
fn a_rebalance_with_nothing_to_reclaim_commits_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    make(&dir);
    let before = files(&dir);
    let mut w = Writer::open(&dir, WriterConfig::default()).unwrap();
    let generation = w.generation();
    let r = w.rebalance().unwrap();
    assert!(!r.rewritten, "{r:?}");
    assert_eq!(r.generation, generation);
    assert_eq!(w.generation(), generation);
    assert_eq!(r.live_bytes, r.live_bytes_before);
    assert_eq!(r.chunk_bytes_before, r.chunk_bytes_after);
    assert!((r.utilization_before() - 1.0).abs() < 1e-9);
    drop(w);
    assert_eq!(files(&dir), before, "nothing on disk changed");
    // Once, and again: a rebalance after a real one has nothing to reclaim either.
    let mut w = Writer::open(&dir, WriterConfig::default()).unwrap();
    w.modify(3, "caption", &caption(77)).unwrap();
    w.commit().unwrap();
    assert!(w.rebalance().unwrap().rewritten);
    let g = w.generation();
    assert!(!w.rebalance().unwrap().rewritten);
    assert_eq!(w.generation(), g);
}
