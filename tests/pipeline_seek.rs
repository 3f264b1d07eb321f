//! Seeking deep into a 100M-record shuffled epoch (a cursor resumed there, or a loader resumed
//! from a checkpoint there) gives exactly what stepping to that position gives.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use futures::executor::block_on;
use futures::StreamExt;
use zrecord::pipeline::{
    BucketConfig, Cursor, CursorState, IndexBatch, LoaderBuilder, Position, PrefetchConfig,
    Sampler, SamplerConfig, SamplerMode, Source, Stage,
};

const N: u64 = 100_000_000;

/// 100M synthetic records: record `i` is its index, its length a function of it. Nothing is
/// materialised.
struct Synthetic;

impl Source for Synthetic {
    type Batch = Vec<u64>;

    fn len(&self) -> u64 {
        N
    }

    fn item_len(&self, index: u64) -> zrecord::Result<u64> {
        Ok(index.wrapping_mul(0x9e37_79b9) % 1000)
    }

    fn gather(&self, indices: &[u64]) -> zrecord::Result<Vec<u64>> {
        Ok(indices.to_vec())
    }
}

fn shuffled(epochs: Option<u64>) -> SamplerConfig {
    SamplerConfig::default()
        .mode(SamplerMode::Shuffled)
        .seed(2024)
        .epochs(epochs)
}

#[test]
fn cursor_seek_equals_stepping_deep_in_the_epoch() {
    let sampler = Sampler::new(N, shuffled(Some(3))).unwrap();
    for (epoch, deep) in [(0, 99_999_000), (1, 54_321_987), (2, 1)] {
        let start = CursorState {
            epoch,
            position: deep - 1,
            config: zrecord::pipeline::describe(&sampler),
        };
        let mut stepped = Cursor::resume(sampler.clone(), &start).unwrap();
        let mut seen = Vec::new();
        for i in 0..999u64 {
            let s = stepped.next_item().unwrap().unwrap();
            seen.push(s.index);
            assert!(s.index < N);
            assert_eq!(s.index, sampler.index_at(epoch, deep - 1 + i).unwrap());
            // A cursor seeked straight to this position agrees with the stepped one.
            if i % 97 == 0 {
                let mut direct = Cursor::resume(
                    sampler.clone(),
                    &CursorState {
                        epoch,
                        position: deep - 1 + i,
                        config: zrecord::pipeline::describe(&sampler),
                    },
                )
                .unwrap();
                assert_eq!(direct.next_item().unwrap().unwrap().index, s.index);
            }
        }
        // A window of a permutation has no repeats.
        let len = seen.len();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), len);
    }
    // The end of the epoch rolls over into the next one.
    let last = CursorState {
        epoch: 0,
        position: N - 1,
        config: zrecord::pipeline::describe(&sampler),
    };
    let mut c = Cursor::resume(sampler.clone(), &last).unwrap();
    c.next_item().unwrap().unwrap();
    assert_eq!(c.state().epoch, 1);
    assert_eq!(c.state().position, 0);
}

fn batches(stage: &impl Stage<Item = IndexBatch>, from: u64, count: u64) -> Vec<Vec<u64>> {
    let mut s = stage.clone();
    (from..from + count)
        .map(|p| s.get(0, p).unwrap().indices())
        .collect()
}

#[test]
fn loader_resumed_deep_in_a_100m_epoch_equals_stepping() {
    for bucket in [false, true] {
        let mut b = LoaderBuilder::new(Arc::new(Synthetic))
            .sampler(shuffled(Some(1)))
            .batch_size(8)
            .prefetch(PrefetchConfig::default().num_workers(1));
        if bucket {
            b = b.bucket(
                BucketConfig::default()
                    .buffer_size(1024)
                    .pack_size(8)
                    .seed(3),
            );
        }
        let chain = b.index_chain().unwrap();
        assert_eq!(chain.epoch_len(), N / 8);
        // Step through a window of batches the slow way: one position after the other.
        let deep = N / 8 - 200;
        let stepped = batches(&chain, deep - 10, 60);

        // A checkpoint at batch `deep`, as a 1-worker loader would have written it.
        let mut state = LoaderBuilder::new(Arc::new(Synthetic))
            .config(*b.current_config())
            .build()
            .unwrap()
            .state();
        state.prefetch.workers[0].consumed = deep;
        state.prefetch.workers[0].next = Some(Position {
            epoch: 0,
            position: deep,
        });

        for workers in [1, 4] {
            let builder = LoaderBuilder::new(Arc::new(Synthetic))
                .config(*b.current_config())
                .prefetch(b.current_config().prefetch.num_workers(workers));
            let loader = builder.resume(&state).unwrap();
            let got: Vec<Vec<u64>> = block_on(loader.take(50).map(|b| b.unwrap().data).collect());
            assert_eq!(got[..], stepped[10..], "bucket={bucket} workers={workers}");
        }
    }
}

#[test]
fn a_whole_stepped_epoch_is_a_permutation_and_matches_random_seeks() {
    let n = (1u64 << 20) + 3;
    let sampler = Sampler::new(n, shuffled(Some(1))).unwrap();
    let mut seen = vec![false; n as usize];
    let mut order = Vec::with_capacity(n as usize);
    for s in sampler.clone().cursor().into_iter() {
        let i = s.unwrap().index;
        assert!(!seen[i as usize], "index {i} twice");
        seen[i as usize] = true;
        order.push(i);
    }
    assert_eq!(order.len() as u64, n);
    let mut p = 12345u64;
    for _ in 0..1000 {
        p = (p
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407))
            % n;
        assert_eq!(sampler.index_at(0, p).unwrap(), order[p as usize]);
    }
}
