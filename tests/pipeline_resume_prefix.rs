//! Resuming from a checkpoint taken after any batch reproduces the uninterrupted stream from
//! that batch on, exactly (the prefix property), also through JSON and with another worker count.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use futures::executor::block_on;
use futures::StreamExt;
use proptest::prelude::*;
mod common;

use zrecord::pipeline::{
    BatchConfig, BucketConfig, IndexBatch, Loader, LoaderBuilder, LoaderConfig, LoaderState,
    MemorySource, MergePolicy, PrefetchConfig, SamplerConfig, SamplerMode, ShardConfig, ShardMode,
};

fn source(n: u64) -> Arc<MemorySource> {
    Arc::new(MemorySource::new(
        (0..n)
            .map(|i| vec![i as u8; ((i * 13) % 9) as usize])
            .collect(),
    ))
}

type Item = (IndexBatch, Vec<Vec<u8>>);

fn unwrap(b: zrecord::Result<zrecord::pipeline::LoaderBatch<Vec<Vec<u8>>>>) -> Item {
    let b = b.unwrap();
    (b.batch, b.data)
}

fn run_all(builder: LoaderBuilder<MemorySource>) -> Vec<Item> {
    block_on(builder.build().unwrap().map(unwrap).collect())
}

/// Consumes `k` batches, checkpoints (through JSON), drops the loader with whatever it
/// prefetched, resumes with `resume_workers` workers and returns the rest.
fn split_at(
    src: &Arc<MemorySource>,
    config: LoaderConfig,
    k: usize,
    resume_workers: usize,
) -> (Vec<Item>, Vec<Item>) {
    let mut loader = LoaderBuilder::new(Arc::clone(src))
        .config(config)
        .build()
        .unwrap();
    let head: Vec<Item> = block_on(async {
        let mut v = Vec::new();
        for _ in 0..k {
            v.push(unwrap(loader.next().await.unwrap()));
        }
        v
    });
    let json = serde_json::to_string(&loader.state()).unwrap();
    drop(loader);
    let state: LoaderState = serde_json::from_str(&json).unwrap();
    let mut config = config;
    config.prefetch.num_workers = resume_workers;
    let resumed =
        Loader::resume(LoaderBuilder::new(Arc::clone(src)).config(config), &state).unwrap();
    let tail = block_on(resumed.map(unwrap).collect());
    (head, tail)
}

fn config(mode: SamplerMode, bucket: bool, num_workers: usize) -> LoaderConfig {
    LoaderConfig::default()
        .sampler(SamplerConfig::default().mode(mode).seed(11).epochs(Some(2)))
        .shard(
            ShardConfig::new(2, 1)
                .mode(ShardMode::Interleaved)
                .pad_to_equal(true)
                .drop_remainder(false),
        )
        .bucket(bucket.then_some(BucketConfig::default().buffer_size(8).pack_size(3).seed(2)))
        .batch(BatchConfig::new(3).drop_last(false))
        .prefetch(
            PrefetchConfig::default()
                .num_workers(num_workers)
                .worker_queue_size(2)
                .consumer_queue_size(2)
                .merge(MergePolicy::Strict),
        )
}

#[test]
fn resume_after_every_position_on_small_data() {
    let src = source(37);
    for (mode, bucket) in [
        (SamplerMode::SequentialWrap { window_len: 4 }, false),
        (SamplerMode::Sequential, false),
        (SamplerMode::Shuffled, true),
        (SamplerMode::Random, false),
    ] {
        for workers in [1, 3] {
            let cfg = config(mode, bucket, workers);
            let full = run_all(LoaderBuilder::new(Arc::clone(&src)).config(cfg));
            assert_eq!(full.len(), 14, "2 epochs of ceil(19 / 3) batches");
            for k in 0..=full.len() {
                // Same worker count, and a different one (strict checkpoints allow it).
                for resume_workers in [workers, 2] {
                    let (head, tail) = split_at(&src, cfg, k, resume_workers);
                    assert_eq!(head[..], full[..k]);
                    assert_eq!(
                        tail[..],
                        full[k..],
                        "{mode:?} k={k} workers {workers}->{resume_workers}"
                    );
                }
            }
        }
    }
}

#[test]
fn resume_of_an_infinite_stream() {
    let src = source(10);
    let mut cfg = config(SamplerMode::Shuffled, false, 3);
    cfg.sampler.epochs = None;
    let full: Vec<Item> = block_on(
        LoaderBuilder::new(Arc::clone(&src))
            .config(cfg)
            .build()
            .unwrap()
            .take(40)
            .map(unwrap)
            .collect(),
    );
    let mut loader = LoaderBuilder::new(Arc::clone(&src))
        .config(cfg)
        .build()
        .unwrap();
    for item in &full[..17] {
        assert_eq!(&unwrap(block_on(loader.next()).unwrap()), item);
    }
    let state = loader.state();
    drop(loader);
    let resumed = LoaderBuilder::new(Arc::clone(&src))
        .config(cfg)
        .resume(&state)
        .unwrap();
    let tail: Vec<Item> = block_on(resumed.take(23).map(unwrap).collect());
    assert_eq!(tail[..], full[17..]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn resume_at_random_positions_on_larger_data(
        n in 500..2000u64,
        kind in 0..3u8,
        bucket in any::<bool>(),
        workers in 1..6usize,
        resume_workers in 1..6usize,
        cut in 0.0..1.0f64,
    ) {
        let mode = match kind {
            0 => SamplerMode::Sequential,
            1 => SamplerMode::Shuffled,
            _ => SamplerMode::Random,
        };
        let src = source(n);
        let cfg = config(mode, bucket, workers);
        let full = run_all(LoaderBuilder::new(Arc::clone(&src)).config(cfg));
        let k = (cut * full.len() as f64) as usize;
        let (head, tail) = split_at(&src, cfg, k, resume_workers);
        prop_assert_eq!(&head[..], &full[..k]);
        prop_assert_eq!(&tail[..], &full[k..]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random small configurations (sampler × shard mode × padding × bucket × batch × 1–8
    /// workers): a checkpoint after every batch position resumes to exactly the rest.
    #[test]
    fn resume_after_every_position_for_random_small_configurations(
        n in 0..40u64,
        config in common::loader_config(),
        resume_workers in 1..=8usize,
    ) {
        let src = source(n);
        let full = run_all(LoaderBuilder::new(Arc::clone(&src)).config(config));
        for k in 0..=full.len() {
            let (head, tail) = split_at(&src, config, k, resume_workers);
            prop_assert_eq!(&head[..], &full[..k]);
            prop_assert_eq!(&tail[..], &full[k..], "k={}", k);
        }
    }
}
