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
            assert!(!msg.contains("  "), "{msg:?} has a run of spaces");
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
        &["3 checkpoints were given for 4 ranks", "rank 3 is missing"],
    );
    let mut twice = states.clone();
    twice[3] = twice[2].clone();
    refused(
        &twice,
        new(5, 2),
        &["rank 2 is given twice", "rank 3 is missing"],
    );
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

/// Checkpoints of some but not all ranks are refused naming every missing rank (or the first
/// few of many), and a rank given twice is named too.
#[test]
fn a_merge_names_the_missing_ranks() {
    let src = source(100, 7);
    let states = run(&src, 5, 2);
    let new = builder(&src, 5, 2, 3, 1);
    let pick = |ranks: &[usize]| ranks.iter().map(|&r| states[r].clone()).collect::<Vec<_>>();
    refused(
        &pick(&[0, 1, 3]),
        new.clone(),
        &["3 checkpoints were given for 4 ranks", "rank 2 is missing"],
    );
    refused(
        &pick(&[3, 0]),
        new.clone(),
        &[
            "2 checkpoints were given for 4 ranks",
            "ranks 1 and 2 are missing",
        ],
    );
    refused(
        &pick(&[2]),
        new.clone(),
        &[
            "1 checkpoint was given for 4 ranks",
            "ranks 0, 1 and 3 are missing",
        ],
    );
    refused(
        &pick(&[0, 1, 1]),
        new.clone(),
        &["rank 1 is given twice", "ranks 2 and 3 are missing"],
    );
    refused(
        &pick(&[0, 1, 2, 3, 2]),
        new.clone(),
        &[
            "5 checkpoints were given for 4 ranks",
            "rank 2 is given twice",
        ],
    );

    // A run of many ranks: the first few missing ones and how many more.
    let wide = |rank| {
        let mut loader = builder(&src, 5, 2, 40, rank).build().unwrap();
        block_on(loader.next()).unwrap().unwrap();
        loader.state()
    };
    let few: Vec<LoaderState> = [0, 5, 39].into_iter().map(wide).collect();
    refused(
        &few,
        new.clone(),
        &[
            "3 checkpoints were given for 40 ranks",
            "ranks 1, 2, 3, 4, 6, 7, 8, 9 and 29 more are missing",
        ],
    );

    // Checkpoints of runs with different rank counts.
    let mut mixed = pick(&[0, 1, 2]);
    mixed.push(wide(3));
    refused(
        &mixed,
        new.clone(),
        &[
            "checkpoint 3 was taken by rank 3 of 40",
            "checkpoint 0 by rank 0 of 4",
        ],
    );
}

/// Ranks whose shard settings differ beyond the rank index are refused in one readable line.
#[test]
fn ranks_of_different_shard_modes_are_refused() {
    let src = source(100, 7);
    let mut states = run(&src, 5, 2);
    let mut loader = builder(&src, 5, 2, 4, 3)
        .shard(ShardConfig::new(4, 3).drop_remainder(true))
        .build()
        .unwrap();
    block_on(loader.next()).unwrap().unwrap();
    states[3] = loader.state();
    refused(
        &states,
        builder(&src, 5, 2, 3, 1),
        &[
            "rank 3's shard settings",
            "differ from checkpoint 0's (",
            "not one run's ranks",
        ],
    );
}
