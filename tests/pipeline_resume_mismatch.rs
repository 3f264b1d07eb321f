//! A checkpoint resumed against another dataset generation, source length, configuration,
//! format version, or (best effort) worker count is refused with `ResumeMismatch`, whose message
//! names each differing setting, the checkpoint's value against this loader's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use futures::executor::block_on;
use zrecord::pipeline::{
    BucketConfig, LoaderBuilder, LoaderState, MemorySource, MergePolicy, PrefetchConfig,
    SamplerConfig, SamplerMode, ShardConfig,
};
use zrecord::Error;

fn source(n: u8, generation: u64) -> Arc<MemorySource> {
    Arc::new(
        MemorySource::new((0..n).map(|i| vec![i; usize::from(i % 4)]).collect())
            .with_generation(generation),
    )
}

fn builder(src: Arc<MemorySource>) -> LoaderBuilder<MemorySource> {
    LoaderBuilder::new(src)
        .sampler(
            SamplerConfig::default()
                .mode(SamplerMode::Shuffled)
                .seed(4)
                .epochs(Some(2)),
        )
        .batch_size(4)
        .prefetch(PrefetchConfig::default().num_workers(3))
}

fn checkpoint(b: LoaderBuilder<MemorySource>) -> LoaderState {
    let mut loader = b.build().unwrap();
    for _ in 0..5 {
        block_on(loader.next()).unwrap().unwrap();
    }
    loader.state()
}

fn refused(b: LoaderBuilder<MemorySource>, state: &LoaderState, needle: &str) {
    match b.resume(state) {
        Err(e @ Error::ResumeMismatch { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(needle), "{msg:?} should mention {needle:?}");
        }
        other => panic!("expected ResumeMismatch, got {other:?}"),
    }
}

#[test]
fn mismatches_are_refused_with_a_clear_message() {
    let state = checkpoint(builder(source(50, 7)));
    // The same everything resumes.
    assert!(builder(source(50, 7)).resume(&state).is_ok());
    // Another generation.
    refused(builder(source(50, 8)), &state, "generation 7");
    // Another length.
    refused(builder(source(51, 7)), &state, "50 records");
    // Another seed, batch size, epoch count, shard, or bucketing.
    refused(
        builder(source(50, 7)).seed(5),
        &state,
        "configuration differs: sampler.seed: checkpoint 4, this loader 5",
    );
    refused(
        builder(source(50, 7)).batch_size(5),
        &state,
        "batch.batch_size: checkpoint 4, this loader 5",
    );
    refused(
        builder(source(50, 7)).epochs(Some(3)),
        &state,
        "sampler.epochs: checkpoint Some(2), this loader Some(3)",
    );
    refused(
        builder(source(50, 7)).shard(ShardConfig::default().total(2)),
        &state,
        "shard.total: checkpoint 1, this loader 2",
    );
    refused(
        builder(source(50, 7)).bucket(BucketConfig::default()),
        &state,
        "bucket: checkpoint off, this loader on (buffer_size=1024, pack_size=32, seed=0, key=",
    );
    // Another format version.
    let mut future = state.clone();
    future.version = 99;
    refused(builder(source(50, 7)), &future, "version 99");
    // A tampered per-worker position.
    let mut tampered = state.clone();
    tampered.prefetch.workers[1].consumed += 3;
    refused(builder(source(50, 7)), &tampered, "worker 1");
}

#[test]
fn worker_count_may_change_for_strict_but_not_best_effort_checkpoints() {
    // Strict: another worker count and even the best-effort merge are fine.
    let strict = checkpoint(builder(source(50, 0)));
    assert!(builder(source(50, 0))
        .prefetch(PrefetchConfig::default().num_workers(5))
        .resume(&strict)
        .is_ok());

    // Best effort: a checkpoint whose consumed batches are not a prefix of the sequential order
    // needs the same worker count. Craft one: worker 2 ahead of worker 0.
    let be =
        |b: LoaderBuilder<MemorySource>, workers: usize| {
            b.prefetch(PrefetchConfig::default().num_workers(workers).merge(
                MergePolicy::BestEffort {
                    max_lead: 4,
                    max_skips_per_round: 2,
                },
            ))
        };
    let mut state = checkpoint(be(builder(source(50, 0)), 3));
    let base = state.prefetch.clone();
    state.prefetch.workers = base.workers.clone();
    state.prefetch.workers[0].consumed = 1;
    state.prefetch.workers[1].consumed = 1;
    state.prefetch.workers[2].consumed = 3;
    for (w, ws) in state.prefetch.workers.iter_mut().enumerate() {
        let g = ws.consumed * 3 + w as u64;
        ws.next = Some(zrecord::pipeline::Position {
            epoch: g / 13,
            position: g % 13,
        });
    }
    assert!(be(builder(source(50, 0)), 3).resume(&state).is_ok());
    refused(be(builder(source(50, 0)), 2), &state, "best-effort");
}

#[test]
fn every_differing_setting_is_named_and_nothing_else() {
    let state = checkpoint(builder(source(50, 7)).shard(ShardConfig::default().total(2)));
    let b = builder(source(50, 7))
        .shard(ShardConfig::default().total(3))
        .batch_size(6)
        .drop_last(true);
    let msg = b.resume(&state).unwrap_err().to_string();
    assert!(
        msg.ends_with(
            "the pipeline configuration differs: shard.total: checkpoint 2, this loader 3; \
             batch.batch_size: checkpoint 4, this loader 6; \
             batch.drop_last: checkpoint false, this loader true"
        ),
        "{msg}"
    );
    // Not the whole descriptions: equal settings are not quoted.
    assert!(!msg.contains("sampler"), "{msg}");
    assert!(!msg.contains("index="), "{msg}");

    // A checkpoint whose description cannot be parsed is still refused, quoting both.
    let mut odd = state.clone();
    odd.config = "hand-written".into();
    refused(
        builder(source(50, 7)),
        &odd,
        "checkpoint has `hand-written`",
    );
    // The same description with another fingerprint (a tampered checkpoint) too.
    let mut tampered = checkpoint(builder(source(50, 7)));
    tampered.fingerprint ^= 1;
    refused(builder(source(50, 7)), &tampered, "fingerprint");
}
