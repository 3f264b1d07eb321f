//! Rebalance keeps every record byte-exact (the dataset equals its model after random modifies and deletes), leaves only live bytes in chunks, and never disturbs a snapshot opened before it, even once a later chunk reuses an old chunk's id.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod support;

use std::path::Path;
use support::{read_all, record, Rec, Rng};
use zrecord::{Backend, Dataset, ReadConfig, Writer, WriterConfig};

fn config() -> WriterConfig {
    WriterConfig::default()
        .deflate_level(1)
        .write_buffer_bytes(4096)
}

/// Random appends, modifies, deletes and commits; returns the model of what the writer holds.
fn churn(w: &mut Writer, model: &mut Vec<Rec>, r: &mut Rng, ops: usize) {
    for _ in 0..ops {
        let n = model.len() as u64;
        match r.below(10) {
            0..4 => {
                let rec = record(r.next(), 1500);
                w.append(&rec).unwrap();
                model.push(rec);
            }
            4..6 if n > 0 => {
                let i = r.below(n);
                let rec = record(r.next(), 1500);
                w.modify_record(i, &rec).unwrap();
                model[i as usize] = rec;
            }
            6 if n > 0 => {
                let i = r.below(n);
                let data = support::bytes(r.below(900) as usize, r.next());
                w.modify(i, "b", &data).unwrap();
                model[i as usize][1] = data;
            }
            7..9 if n > 0 => {
                let i = r.below(n);
                w.delete(i).unwrap();
                model.swap_remove(i as usize);
            }
            _ => {
                w.commit().unwrap();
            }
        }
    }
}

fn chunk_files(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("chunk")).unwrap().count()
}

#[test]
fn rebalance_matches_the_model_and_packs_chunks() {
    for seed in 1..=12u64 {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ds");
        let mut w = Writer::create(&dir, &support::schema(4096), config()).unwrap();
        let mut model = Vec::new();
        let mut r = Rng(seed);
        churn(&mut w, &mut model, &mut r, 150);
        // Pending changes are committed by the rebalance itself.
        let rep = w.rebalance().unwrap();
        assert_eq!(rep.records, model.len() as u64, "seed {seed}");
        assert_eq!(
            rep.chunk_bytes_after, rep.live_bytes,
            "seed {seed}: {rep:?}"
        );
        assert!(rep.utilization_before() <= 1.0);
        assert_eq!(rep.utilization_after(), 1.0, "seed {seed}: {rep:?}");
        assert!(rep.capacity_utilization_after() <= 1.0);
        assert!(
            rep.capacity_utilization_after() >= rep.capacity_utilization_before(),
            "seed {seed}: {rep:?}"
        );
        assert!(
            rep.chunk_bytes_before >= rep.chunk_bytes_after,
            "seed {seed}: {rep:?}"
        );
        assert_eq!(
            chunk_files(&dir),
            rep.chunks_after,
            "seed {seed}: old chunks left"
        );
        assert_eq!(read_all(&dir).unwrap(), model, "seed {seed}");
        // The writer goes on after a rebalance, and a second one finds nothing to reclaim.
        churn(&mut w, &mut model, &mut r, 40);
        w.commit().unwrap();
        assert_eq!(read_all(&dir).unwrap(), model, "seed {seed}");
        let again = w.rebalance().unwrap();
        assert_eq!(again.utilization_after(), 1.0);
        drop(w);
        let mut w = Writer::open(&dir, config()).unwrap();
        churn(&mut w, &mut model, &mut r, 20);
        w.commit().unwrap();
        assert_eq!(read_all(&dir).unwrap(), model, "seed {seed}");
    }
}

#[test]
fn rebalance_of_an_empty_dataset() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let mut w = Writer::create(&dir, &support::schema(4096), config()).unwrap();
    for i in 0..5 {
        w.append(&record(i, 800)).unwrap();
    }
    w.commit().unwrap();
    for _ in 0..5 {
        w.delete(0).unwrap();
    }
    let rep = w.rebalance().unwrap();
    assert_eq!(
        (rep.records, rep.live_bytes, rep.chunk_bytes_after),
        (0, 0, 0)
    );
    assert_eq!(rep.chunks_after, 0);
    assert_eq!(chunk_files(&dir), 0);
    assert_eq!(Dataset::open(&dir).unwrap().len(), 0);
    w.append(&record(9, 800)).unwrap();
    w.commit().unwrap();
    assert_eq!(read_all(&dir).unwrap(), vec![record(9, 800)]);
}

#[test]
fn snapshot_opened_before_rebalance_keeps_reading() {
    let opts = [
        ReadConfig::default(),
        ReadConfig::default().with_backend(Backend::Psync),
        ReadConfig::default().with_backend(Backend::Mmap),
        ReadConfig::default().with_backend(Backend::Uring),
        ReadConfig::default().with_direct_io(true),
    ];
    for (k, opt) in opts.into_iter().enumerate() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ds");
        let mut w = Writer::create(&dir, &support::schema(4096), config()).unwrap();
        let mut model = Vec::new();
        let mut r = Rng(100 + k as u64);
        churn(&mut w, &mut model, &mut r, 120);
        w.commit().unwrap();
        let ds = Dataset::open_with(&dir, opt.clone()).unwrap();
        let old = ds.snapshot();
        let before = model.clone();
        w.rebalance().unwrap();
        // A new writer starts its chunk ids from 0 again: new chunks take the old chunks' ids.
        drop(w);
        let mut w = Writer::open(&dir, config()).unwrap();
        for i in 0..20 {
            let rec = record(5000 + i, 1500);
            w.append(&rec).unwrap();
            model.push(rec);
        }
        w.commit().unwrap();
        let idx: Vec<u64> = (0..before.len() as u64).collect();
        let b = old.gather_with(&idx, &opt).unwrap();
        for (i, rec) in before.iter().enumerate() {
            for (f, want) in rec.iter().enumerate() {
                assert!(
                    b.get(i, f).unwrap() == &want[..],
                    "{opt:?}: record {i} field {f}"
                );
            }
        }
        assert!(ds.refresh().unwrap());
        assert_eq!(read_all(&dir).unwrap(), model);
    }
}

#[test]
fn rebalance_of_many_small_chunks() {
    // More old chunks than a rebalance keeps open at once.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let mut w = Writer::create(&dir, &support::schema(1024), config()).unwrap();
    let mut model = Vec::new();
    let mut r = Rng(77);
    churn(&mut w, &mut model, &mut r, 400);
    w.commit().unwrap();
    let rep = w.rebalance().unwrap();
    assert!(rep.chunks_before > 64, "{rep:?}");
    assert_eq!(rep.utilization_after(), 1.0);
    assert_eq!(chunk_files(&dir), rep.chunks_after);
    assert_eq!(read_all(&dir).unwrap(), model);
}
