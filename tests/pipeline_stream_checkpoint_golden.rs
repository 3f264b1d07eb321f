//! A stream prefetch's checkpoint keeps its JSON: over a sampler with zrecord 0.1's shuffled
//! order (`Sampler::earlier_permutation`), a strict checkpoint is byte-identical to the one that
//! version wrote (and that golden resumes), and a best-effort checkpoint that records batches
//! consumed ahead of an unfinished one has the shape of its golden, which resumes with exactly
//! the batches not yet consumed; over this version's order the checkpoint names the permutation,
//! and a 0.1 golden is refused with a hint instead of resuming into another order.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::{Arc, Condvar, Mutex};

use futures::executor::block_on;
use futures::StreamExt;
use zrecord::pipeline::{
    BatchConfig, Checkpoint, CheckpointExt, IndexBatch, LoaderBatch, MemorySource, MergePolicy,
    Prefetch, PrefetchConfig, Sampler, SamplerConfig, SamplerMode, Stage, Transform,
};

/// Written by the stream prefetch before it knew the best-effort merge: the checkpoint after
/// three batches of `chain`.
const GOLDEN_STRICT: &str = r#"{"input":{"next":{"input":{"epoch":0,"position":9,"config":"sampler(len=20, mode=Shuffled, seed=5, epochs=Some(2))"},"pending":null,"count":{"epoch":0,"seen":9}}}}"#;

/// A best-effort checkpoint after batches 1 and 3 of the first epoch were consumed while batch
/// 0 was not done: the input's state is that before batch 0, and the two consumed batches are
/// the 2nd and 4th pulled after it.
const GOLDEN_BEST_EFFORT: &str = r#"{"input":{"next":{"input":{"epoch":0,"position":0,"config":"sampler(len=20, mode=Shuffled, seed=5, epochs=Some(2))"},"pending":null,"count":{"epoch":null,"seen":0}}},"consumed_ahead":[1,3]}"#;

type Item = (u64, u64, Vec<u64>);

fn item(b: zrecord::Result<LoaderBatch<Vec<Vec<u8>>>>) -> Item {
    let b = b.unwrap();
    (b.epoch(), b.position(), b.indices())
}

/// A shuffled sampler over 20 records (in 0.1's order if `earlier`), 2 epochs, in batches of 3,
/// prefetched.
fn chain_of(
    earlier: bool,
    config: PrefetchConfig,
    transform: Transform<Vec<Vec<u8>>, Vec<Vec<u8>>>,
) -> Prefetch<Vec<Vec<u8>>, impl Checkpoint<Item = zrecord::Result<IndexBatch>> + Unpin> {
    let src = Arc::new(MemorySource::new((0..20u8).map(|i| vec![i]).collect()));
    let sampler = Sampler::new(
        20,
        SamplerConfig::default()
            .mode(SamplerMode::Shuffled)
            .seed(5)
            .epochs(Some(2)),
    )
    .unwrap();
    let sampler = if earlier {
        sampler.earlier_permutation()
    } else {
        sampler
    };
    sampler
        .cursor()
        .batch(BatchConfig::new(3))
        .unwrap()
        .prefetch_with(src, config, transform)
        .unwrap()
}

/// The chain with zrecord 0.1's order, which the goldens were taken on.
fn chain(
    config: PrefetchConfig,
    transform: Transform<Vec<Vec<u8>>, Vec<Vec<u8>>>,
) -> Prefetch<Vec<Vec<u8>>, impl Checkpoint<Item = zrecord::Result<IndexBatch>> + Unpin> {
    chain_of(true, config, transform)
}

fn identity() -> Transform<Vec<Vec<u8>>, Vec<Vec<u8>>> {
    Arc::new(|records, _| Ok(records))
}

fn full() -> Vec<Item> {
    block_on(
        chain(PrefetchConfig::default(), identity())
            .map(item)
            .collect(),
    )
}

fn resume(json: &str, config: PrefetchConfig) -> Vec<Item> {
    let mut resumed = chain(config, identity());
    resumed
        .restore(serde_json::from_str(json).unwrap())
        .unwrap();
    block_on(resumed.map(item).collect())
}

#[test]
fn a_strict_checkpoint_is_unchanged_and_its_golden_resumes() {
    let full = full();
    let mut stream = chain(PrefetchConfig::default().num_workers(2), identity());
    for _ in 0..3 {
        block_on(stream.next()).unwrap().unwrap();
    }
    let json = serde_json::to_string(&stream.checkpoint()).unwrap();
    assert_eq!(json, GOLDEN_STRICT);
    for workers in [1, 3] {
        let config = PrefetchConfig::default().num_workers(workers);
        assert_eq!(resume(GOLDEN_STRICT, config), full[3..]);
    }
}

#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
}

#[test]
fn a_best_effort_checkpoint_has_the_golden_shape_and_resumes_without_the_consumed_batches() {
    let gate = Arc::new(Gate::default());
    let gated: Transform<Vec<Vec<u8>>, Vec<Vec<u8>>> = {
        let gate = Arc::clone(&gate);
        Arc::new(move |records, batch: &IndexBatch| {
            if batch.epoch == 0 && batch.position == 0 {
                let mut open = gate.open.lock().unwrap();
                while !*open {
                    open = gate.opened.wait(open).unwrap();
                }
            }
            Ok(records)
        })
    };
    let config = PrefetchConfig::default()
        .num_workers(2)
        .worker_queue_size(2)
        .merge(MergePolicy::BestEffort {
            max_lead: 2,
            max_skips_per_round: 1,
        });
    let mut stream = chain(config, gated);
    let first = item(block_on(stream.next()).unwrap());
    let second = item(block_on(stream.next()).unwrap());
    assert_eq!((first.1, second.1), (1, 3));
    let json = serde_json::to_string(&stream.checkpoint()).unwrap();
    *gate.open.lock().unwrap() = true;
    gate.opened.notify_all();
    drop(stream);
    assert_eq!(json, GOLDEN_BEST_EFFORT);
    let expected: Vec<Item> = full()
        .into_iter()
        .filter(|b| *b != first && *b != second)
        .collect();
    assert_eq!(
        resume(GOLDEN_BEST_EFFORT, PrefetchConfig::default()),
        expected
    );
}

#[test]
fn this_versions_order_names_its_permutation_and_refuses_a_0_1_golden() {
    let mut stream = chain_of(true, PrefetchConfig::default(), identity());
    let earlier: Vec<Item> = block_on((&mut stream).map(item).collect());
    let mut stream = chain_of(false, PrefetchConfig::default().num_workers(2), identity());
    for _ in 0..3 {
        block_on(stream.next()).unwrap().unwrap();
    }
    let json = serde_json::to_string(&stream.checkpoint()).unwrap();
    assert_eq!(
        json,
        GOLDEN_STRICT.replace("epochs=Some(2))", "epochs=Some(2), permutation=2)")
    );
    let now: Vec<Item> = block_on(
        chain_of(false, PrefetchConfig::default(), identity())
            .map(item)
            .collect(),
    );
    assert_ne!(now, earlier);
    let mut fresh = chain_of(false, PrefetchConfig::default(), identity());
    let err = fresh
        .restore(serde_json::from_str(GOLDEN_STRICT).unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("Sampler::earlier_permutation"), "{err}");
}
