//! A loader's read window is released with it: dropped mid-epoch, or stopped and resumed from
//! its checkpoint, it leaves nothing held (the window's counter returns to zero), and the
//! resumed loader still yields exactly the batches of an uninterrupted one; batches that ask
//! for a record twice release what they held too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use futures::executor::block_on;
use zrecord::pipeline::{DatasetSource, Loader, LoaderState, PrefetchConfig};
use zrecord::{DType, Dataset, Field, ReadConfig, Schema, Writer, WriterConfig};

const N: u64 = 800;

fn record(i: u64) -> Vec<u8> {
    (0..3000 + (i % 5) as usize * 700)
        .map(|j| (i as u8) ^ (j as u8).wrapping_mul(3))
        .collect()
}

fn build(dir: &std::path::Path) {
    let schema = Schema::new()
        .field(Field::new("x", DType::U8))
        .chunk_size_bytes(1 << 20);
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    for i in 0..N {
        w.append(&[record(i)]).unwrap();
    }
    w.commit().unwrap();
}

fn evict(dir: &std::path::Path) {
    for e in std::fs::read_dir(dir.join("chunk")).unwrap() {
        zrecord::diagnostics::evict_page_cache(&e.unwrap().path()).unwrap();
    }
}

fn builder(ds: &Dataset) -> zrecord::pipeline::LoaderBuilder<DatasetSource> {
    Loader::builder(Arc::new(DatasetSource::new(ds)))
        .seed(11)
        .epochs(Some(1))
        .batch_size(8)
        .prefetch(PrefetchConfig::default().num_workers(2).lookahead(6))
}

/// Indices of `take` batches (all if `None`), and the checkpoint after them.
fn run(
    mut loader: Loader<DatasetSource>,
    take: Option<usize>,
) -> (Vec<Vec<u64>>, LoaderState, Loader<DatasetSource>) {
    let mut out = Vec::new();
    block_on(async {
        while take.is_none_or(|t| out.len() < t) {
            let Some(b) = loader.next().await else { break };
            let b = b.unwrap();
            for r in 0..b.data.len() {
                assert_eq!(b.data.get(r, 0).unwrap(), &record(b.batch.indices()[r])[..]);
            }
            out.push(b.batch.indices());
        }
    });
    let state = loader.state();
    (out, state, loader)
}

fn dropped_and_resumed(direct: bool, budget: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    build(&dir);
    // A budget of its own: this test's window is not shared with the other's.
    let cfg = ReadConfig::default()
        .with_direct_io(direct)
        .with_max_bytes_in_flight(budget);
    let ds = Dataset::open_with(&dir, cfg).unwrap();
    let (all, _, l) = run(
        builder(&ds)
            .prefetch(PrefetchConfig::default().num_workers(2).lookahead(0))
            .build()
            .unwrap(),
        None,
    );
    block_on(l.shutdown());

    // Dropped mid-epoch, with reads announced and not gathered.
    evict(&dir);
    let (_, _, l) = run(builder(&ds).build().unwrap(), Some(5));
    if direct {
        // Kept O_DIRECT reads of announced batches wait for gathers that never come.
        assert!(zrecord::testing::read_window_held(&ds) > 0);
    }
    drop(l);
    // The workers stop on their own; announcements after the session ended are ignored.
    let (_, _, l) = run(
        builder(&ds)
            .prefetch(PrefetchConfig::default().num_workers(2).lookahead(0))
            .build()
            .unwrap(),
        Some(1),
    );
    block_on(l.shutdown());
    assert_eq!(zrecord::testing::read_window_held(&ds), 0, "dropped");

    // Stopped and resumed from the checkpoint: the same batches, and nothing left held.
    evict(&dir);
    let (first, state, l) = run(builder(&ds).build().unwrap(), Some(7));
    block_on(l.shutdown());
    assert_eq!(zrecord::testing::read_window_held(&ds), 0, "stopped");
    let resumed = builder(&ds).resume(&state).unwrap();
    let (rest, _, l) = run(resumed, None);
    block_on(l.shutdown());
    assert_eq!(zrecord::testing::read_window_held(&ds), 0, "resumed");
    let mut joined = first;
    joined.extend(rest);
    assert_eq!(joined, all);
}

#[test]
fn a_dropped_or_resumed_loader_releases_its_buffered_window() {
    dropped_and_resumed(false, 3 << 20);
}

#[test]
fn a_dropped_or_resumed_loader_releases_its_direct_window() {
    dropped_and_resumed(true, 5 << 20);
}

#[test]
fn announced_batches_with_repeated_records_release_what_they_hold() {
    use zrecord::pipeline::Source;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    build(&dir);
    let cfg = ReadConfig::default()
        .with_direct_io(true)
        .with_max_bytes_in_flight(7 << 20);
    let ds = Dataset::open_with(&dir, cfg).unwrap();
    let src = DatasetSource::new(&ds);
    let session = u64::MAX - 7;
    let batches: [&[u64]; 3] = [&[5, 5, 5, 0, 5], &[9, 8, 9], &[700, 1, 700, 700]];
    for b in batches {
        src.lookahead(session, b);
    }
    // Gathered in order: each takes what was read ahead for it, or reads it itself.
    for b in batches {
        let got = src.gather(b).unwrap();
        for (r, &i) in b.iter().enumerate() {
            assert_eq!(got.get(r, 0).unwrap(), &record(i)[..]);
        }
    }
    src.end_lookahead(session);
    assert_eq!(zrecord::testing::read_window_held(&ds), 0);
    // Announced and never gathered, then ended.
    src.lookahead(session + 1, &[3, 3, 4]);
    src.end_lookahead(session + 1);
    assert_eq!(zrecord::testing::read_window_held(&ds), 0);
}
