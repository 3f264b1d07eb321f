//! A loader's checkpoint over 100,000,000 records stays under 4 KiB of JSON, also after an
//! elastic resume from 8 ranks stopped at different places to 5 (issue #24: "`Loader` with
//! elastic resume on it with state < 4 KiB"), and no position is delivered twice across the
//! change.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::HashSet;
use std::sync::Arc;

use futures::executor::block_on;
use zrecord::pipeline::{
    Loader, LoaderBuilder, LoaderState, PrefetchConfig, SamplerConfig, SamplerMode, ShardConfig,
    Source,
};

const N: u64 = 100_000_000;
const LIMIT: usize = 4096;

/// 100M records of 64 bytes that are never read: a batch is its indices.
struct Synthetic;

impl Source for Synthetic {
    type Batch = usize;

    fn len(&self) -> u64 {
        N
    }

    fn item_len(&self, _index: u64) -> zrecord::Result<u64> {
        Ok(64)
    }

    fn gather(&self, indices: &[u64]) -> zrecord::Result<usize> {
        Ok(indices.len())
    }
}

fn builder(src: &Arc<Synthetic>, world: u64, rank: u64) -> LoaderBuilder<Synthetic> {
    LoaderBuilder::new(Arc::clone(src))
        .sampler(
            SamplerConfig::default()
                .mode(SamplerMode::Shuffled)
                .seed(3)
                .epochs(Some(2)),
        )
        .shard(ShardConfig::new(world, rank))
        .batch_size(256)
        .prefetch(PrefetchConfig::default().num_workers(2))
}

/// Takes `k` batches; returns their (epoch, position) pairs and the checkpoint, through JSON,
/// with the JSON's length.
fn take(mut loader: Loader<Synthetic>, k: usize) -> (Vec<(u64, u64)>, LoaderState, usize) {
    let mut got = Vec::new();
    for _ in 0..k {
        let b = block_on(loader.next()).unwrap().unwrap();
        got.extend(b.batch.samples.iter().map(|s| (s.epoch, s.position)));
    }
    let json = serde_json::to_string(&loader.state()).unwrap();
    (got, serde_json::from_str(&json).unwrap(), json.len())
}

#[test]
fn checkpoints_over_100m_records_stay_under_4_kib_through_an_elastic_resume() {
    let src = Arc::new(Synthetic);
    let mut seen = HashSet::new();
    let mut states = Vec::new();
    let mut largest = 0;
    for rank in 0..8 {
        let (got, state, bytes) = take(builder(&src, 8, rank).build().unwrap(), 3 + rank as usize);
        assert!(bytes < LIMIT, "rank {rank} of 8: a {bytes}-byte checkpoint");
        largest = largest.max(bytes);
        for p in got {
            assert!(seen.insert(p), "{p:?} delivered twice");
        }
        states.push(state);
    }
    let mut resumed_largest = 0;
    for rank in 0..5 {
        let loader = builder(&src, 5, rank).resume_elastic(&states).unwrap();
        let (got, _, bytes) = take(loader, 7);
        assert!(
            bytes < LIMIT,
            "rank {rank} of 5 after the resume: a {bytes}-byte checkpoint"
        );
        resumed_largest = resumed_largest.max(bytes);
        for p in got {
            assert!(seen.insert(p), "{p:?} delivered twice across the resume");
        }
    }
    eprintln!(
        "checkpoint JSON over {N} records: up to {largest} bytes on 8 ranks, up to \
         {resumed_largest} bytes on 5 ranks after the elastic resume"
    );
}
