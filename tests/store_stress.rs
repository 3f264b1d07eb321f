//! Readers never see a torn or wrong record while one writer appends, modifies, deletes and
//! commits: 8 reader threads (io_uring and mmap) refresh and gather random batches, and every
//! record they get equals the model of the generation their snapshot shows.
//!
//! Bounded by the number of commits, not by time; seeded. A SIGBUS (a mapping reaching past a
//! file's end) would kill the test process.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod support;

use support::Rng;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use zrecord::{Backend, Codec, DType, Dataset, Field, ReadConfig, Schema, Writer, WriterConfig};

type Rec = Arc<Vec<Vec<u8>>>;
type Models = Mutex<HashMap<u64, Arc<Vec<Rec>>>>;

fn value(r: &mut Rng) -> Vec<u8> {
    let len = match r.below(8) {
        0 => 0,
        1..=5 => r.below(700),
        6 => 1000 + r.below(4000),
        _ => 70_000 + r.below(10_000), // bigger than a chunk
    } as usize;
    let x = r.next();
    if x.is_multiple_of(2) {
        (0..len).map(|i| ((i as u64 % 29) ^ x) as u8).collect()
    } else {
        let mut n = Rng(x);
        (0..len).map(|_| n.next() as u8).collect()
    }
}

const COMMITS: u64 = 150;
const READERS: usize = 8;

fn write(dir: &std::path::Path, models: &Models, stop: &AtomicBool) {
    let mut w = Writer::open(
        dir,
        WriterConfig::default()
            .deflate_level(1)
            .write_buffer_bytes(32 << 10),
    )
    .unwrap();
    let mut r = Rng(7);
    let mut model: Vec<Rec> = Vec::new();
    for _ in 0..COMMITS {
        for _ in 0..1 + r.below(20) {
            let len = model.len() as u64;
            let pick = r.below(10);
            if len == 0 || pick < 5 || len < 50 {
                let rec = Arc::new(vec![value(&mut r), value(&mut r)]);
                w.append(&rec[..]).unwrap();
                model.push(rec);
            } else if pick < 8 {
                let i = r.below(len) as usize;
                let f = r.below(2) as usize;
                let v = value(&mut r);
                w.modify(i as u64, ["a", "b"][f], &v).unwrap();
                let mut rec = (*model[i]).clone();
                rec[f] = v;
                model[i] = Arc::new(rec);
            } else {
                let i = r.below(len);
                w.delete(i).unwrap();
                model.swap_remove(i as usize);
            }
        }
        // Published before the commit, so a reader can never see a generation without a model.
        let next = w.generation() + 1;
        models.lock().unwrap().insert(next, Arc::new(model.clone()));
        assert_eq!(w.commit().unwrap(), next);
    }
    stop.store(true, Ordering::Release);
}

fn read(
    dir: &std::path::Path,
    backend: Backend,
    seed: u64,
    models: &Models,
    stop: &AtomicBool,
) -> (u64, u64) {
    let ds = Dataset::open_with(dir, ReadConfig::default().with_backend(backend)).unwrap();
    let opts = ds.read_config().clone();
    let mut r = Rng(seed);
    let (mut records, mut generations) = (0u64, 0u64);
    let mut last = u64::MAX;
    // At least a few batches after the writer stops, so the last generation is read too.
    let mut after_stop = 0;
    while after_stop < 3 {
        if stop.load(Ordering::Acquire) {
            after_stop += 1;
        }
        ds.refresh().unwrap();
        let snap = ds.snapshot();
        let generation = snap.generation();
        if generation != last {
            generations += 1;
            last = generation;
        }
        let model = models.lock().unwrap().get(&generation).cloned();
        let model = model.unwrap_or_else(|| panic!("generation {generation} has no model"));
        assert_eq!(
            snap.len(),
            model.len() as u64,
            "generation {generation}: length"
        );
        if model.is_empty() {
            continue;
        }
        let indices: Vec<u64> = (0..1 + r.below(96))
            .map(|_| r.below(model.len() as u64))
            .collect();
        let batch = snap
            .gather_with(&indices, &opts)
            .unwrap_or_else(|e| panic!("generation {generation}: {e}"));
        for (slot, &i) in indices.iter().enumerate() {
            for f in 0..2 {
                assert!(
                    batch.get(slot, f).unwrap() == &model[i as usize][f][..],
                    "{backend:?} generation {generation}: record {i} field {f} is wrong"
                );
            }
        }
        records += indices.len() as u64;
    }
    (records, generations)
}

#[test]
fn readers_see_only_whole_commits_while_a_writer_works() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let schema = Schema::new()
        .field(Field::new("a", DType::Bytes).codec(Codec::Deflate))
        .field(Field::new("b", DType::U8))
        .chunk_size_bytes(64 << 10);
    drop(Writer::create(&dir, &schema, WriterConfig::default()).unwrap());
    let models = Models::default();
    models.lock().unwrap().insert(0, Arc::new(Vec::new()));
    let stop = AtomicBool::new(false);
    let checked = AtomicU64::new(0);
    std::thread::scope(|s| {
        let mut readers = Vec::new();
        for k in 0..READERS {
            let backend = if k % 2 == 0 {
                Backend::Uring
            } else {
                Backend::Mmap
            };
            let (dir, models, stop) = (&dir, &models, &stop);
            readers
                .push(s.spawn(move || (backend, read(dir, backend, k as u64 + 1, models, stop))));
        }
        s.spawn(|| write(&dir, &models, &stop));
        for h in readers {
            let (backend, (records, generations)) = h.join().unwrap();
            println!(
                "{backend:?} reader: {records} records checked over {generations} generations"
            );
            assert!(records > 0, "{backend:?} reader checked nothing");
            checked.fetch_add(records, Ordering::Relaxed);
        }
    });
    println!(
        "{COMMITS} commits, {READERS} readers, {} records checked, 0 wrong",
        checked.load(Ordering::Relaxed)
    );
}
