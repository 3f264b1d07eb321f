//! A merge of checkpoints that are not one run's ranks, or that do not fit this loader, is
//! refused with an error that names the rank and what differs (expected against found), never
//! merged into a stream that repeats or loses items.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use futures::executor::block_on;
use zrecord::pipeline::{LoaderBuilder, LoaderState, MemorySource, SamplerConfig, ShardConfig};
use zrecord::Error;

fn source(n: u8, generation: u64) -> Arc<MemorySource> {
    Arc::new(MemorySource::new((0..n).map(|i| vec![i]).collect()).with_generation(generation))
}

fn builder(
    src: &Arc<MemorySource>,
    seed: u64,
    epochs: u64,
    total: u64,
    rank: u64,
) -> LoaderBuilder<MemorySource> {
    LoaderBuilder::new(Arc::clone(src))
        .sampler(SamplerConfig::default().seed(seed).epochs(Some(epochs)))
        .shard(ShardConfig::new(total, rank))
        .batch_size(3)
}

/// The checkpoints of a 4-rank run, each rank after `rank + 1` batches.
fn run(src: &Arc<MemorySource>, seed: u64, epochs: u64) -> Vec<LoaderState> {
    run_after(src, seed, epochs, 1)
}

/// The checkpoints of a 4-rank run, each rank after `rank + extra` batches.
fn run_after(src: &Arc<MemorySource>, seed: u64, epochs: u64, extra: u64) -> Vec<LoaderState> {
    (0..4)
        .map(|rank| {
            let mut loader = builder(src, seed, epochs, 4, rank).build().unwrap();
            for _ in 0..rank + extra {
                block_on(loader.next()).unwrap().unwrap();
            }
            loader.state()
        })
        .collect()
}

#[track_caller]
fn refused(states: &[LoaderState], new: LoaderBuilder<MemorySource>, needles: &[&str]) {
    match new.merge_checkpoints(states) {
        Err(e @ Error::ResumeMismatch { .. }) => {
            let msg = e.to_string();
            for needle in needles {
                assert!(msg.contains(needle), "{msg:?} should mention {needle:?}");
            }
        }
        Err(other) => panic!("expected ResumeMismatch, got {other:?}"),
        Ok(_) => panic!("merged checkpoints that should be refused"),
    }
}

#[test]
fn merges_that_cannot_be_exact_are_refused_by_name() {
    let src = source(100, 7);
    let states = run(&src, 5, 2);
    let new = |seed, epochs| builder(&src, seed, epochs, 3, 1);
    assert!(new(5, 2).merge_checkpoints(&states).is_ok());

    refused(
        &states,
        new(6, 2),
        &["rank 0 of 4", "sampler.seed: checkpoint 5, this loader 6"],
    );
    refused(
        &states,
        new(5, 3),
        &["sampler.epochs: checkpoint Some(2), this loader Some(3)"],
    );
    refused(
        &states,
        new(5, 2).batch_size(4),
        &["batch.batch_size: checkpoint 3, this loader 4"],
    );
    refused(
        &states[..3],
        new(5, 2),
        &["of 4, but 3 checkpoints were given"],
    );
    let mut twice = states.clone();
    twice[3] = twice[2].clone();
    refused(&twice, new(5, 2), &["two checkpoints of rank 2 of 4"]);
    refused(&[], new(5, 2), &["no checkpoint to merge"]);

    // Another dataset: another generation, another length.
    let other = source(100, 8);
    refused(
        &states,
        builder(&other, 5, 2, 3, 1),
        &["checkpoint 0 of 4", "generation 7", "generation 8"],
    );
    let shorter = source(99, 7);
    refused(
        &states,
        builder(&shorter, 5, 2, 3, 1),
        &["100 records", "this one has 99"],
    );

    // Ranks that resumed from different merges are not one run.
    let other_run = run_after(&src, 5, 2, 2);
    let mixed = vec![
        builder(&src, 5, 2, 2, 0)
            .merge_checkpoints(&states)
            .unwrap(),
        builder(&src, 5, 2, 2, 1)
            .merge_checkpoints(&other_run)
            .unwrap(),
    ];
    refused(
        &mixed,
        builder(&src, 5, 2, 3, 0),
        &["rank 1's checkpoint resumed from another elastic merge"],
    );
}
