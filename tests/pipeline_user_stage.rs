//! A user-defined `Stream` stage inside a checkpointed stream chain (sampler → user stage →
//! shard → bucket → batch → prefetch) resumes exactly at every split point: a checkpoint taken
//! after any batch, sent through JSON and restored into a freshly built chain (with any worker
//! count), yields exactly the rest of the uninterrupted run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::executor::block_on;
use futures::stream::Stream;
use futures::StreamExt;
use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use zrecord::pipeline::{
    BatchConfig, BucketConfig, BucketKey, Checkpoint, CheckpointExt, LoaderBatch, MemorySource,
    PrefetchConfig, Sample, Sampler, SamplerConfig, SamplerMode, ShardConfig, Stage,
};

/// The user's stage, written against `Stream` + `Checkpoint` only: it drops every record whose
/// index is a multiple of 5 and repeats every other record whose index is a multiple of 3, so
/// it is not a 1:1 map, and it holds an item between two polls (the repeat).
struct DropAndRepeat<I> {
    input: I,
    repeat: Option<Sample>,
}

/// Its checkpoint: the input's, and the repeat still owed.
#[derive(Clone, Serialize, Deserialize)]
struct DropAndRepeatState<St> {
    input: St,
    repeat: Option<Sample>,
}

impl<I> Stream for DropAndRepeat<I>
where
    I: Stream<Item = zrecord::Result<Sample>> + Unpin,
{
    type Item = zrecord::Result<Sample>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(s) = this.repeat.take() {
            return Poll::Ready(Some(Ok(s)));
        }
        loop {
            match Pin::new(&mut this.input).poll_next(cx) {
                Poll::Ready(Some(Ok(s))) if s.index % 5 == 0 => continue,
                Poll::Ready(Some(Ok(s))) => {
                    if s.index % 3 == 0 {
                        this.repeat = Some(s);
                    }
                    return Poll::Ready(Some(Ok(s)));
                }
                other => return other,
            }
        }
    }
}

impl<I> Checkpoint for DropAndRepeat<I>
where
    I: Checkpoint<Item = zrecord::Result<Sample>> + Unpin,
{
    type State = DropAndRepeatState<I::State>;

    fn checkpoint(&self) -> Self::State {
        DropAndRepeatState {
            input: self.input.checkpoint(),
            repeat: self.repeat,
        }
    }

    fn restore(&mut self, state: Self::State) -> zrecord::Result<()> {
        self.input.restore(state.input)?;
        self.repeat = state.repeat;
        Ok(())
    }
}

#[derive(Debug, Clone, Copy)]
struct Case {
    n: u64,
    mode: SamplerMode,
    seed: u64,
    epochs: u64,
    total: u64,
    rank: u64,
    bucket: Option<(u64, u64)>,
    batch_size: u64,
    drop_last: bool,
    workers: usize,
    resume_workers: usize,
}

type Item = (u64, u64, Vec<u64>, Vec<Vec<u8>>);

fn item(b: zrecord::Result<LoaderBatch<Vec<Vec<u8>>>>) -> Item {
    let b = b.unwrap();
    (b.epoch(), b.position(), b.indices(), b.data)
}

fn source(n: u64) -> Arc<MemorySource> {
    Arc::new(MemorySource::new(
        (0..n)
            .map(|i| vec![i as u8; ((i * 7) % 5) as usize])
            .collect(),
    ))
}

/// Runs the check for one chain: `make(workers)` builds it from its start.
fn every_split<C, F>(make: F, case: Case)
where
    C: Checkpoint<Item = zrecord::Result<LoaderBatch<Vec<Vec<u8>>>>> + Unpin,
    F: Fn(usize) -> C,
{
    let full: Vec<Item> = block_on(make(case.workers).map(item).collect());
    for k in 0..=full.len() {
        let mut chain = make(case.workers);
        for expected in &full[..k] {
            assert_eq!(&item(block_on(chain.next()).unwrap()), expected);
        }
        let json = serde_json::to_string(&chain.checkpoint()).unwrap();
        drop(chain);
        let mut resumed = make(case.resume_workers);
        resumed
            .restore(serde_json::from_str(&json).unwrap())
            .unwrap();
        let tail: Vec<Item> = block_on(resumed.map(item).collect());
        assert_eq!(tail[..], full[k..], "{case:?}: resumed after batch {k}");
    }
}

fn check(case: Case) {
    let src = source(case.n);
    let sampler = Sampler::new(
        case.n,
        SamplerConfig::default()
            .mode(case.mode)
            .seed(case.seed)
            .epochs(Some(case.epochs)),
    )
    .unwrap();
    let user = {
        let sampler = sampler.clone();
        move || DropAndRepeat {
            input: sampler.clone().cursor(),
            repeat: None,
        }
    };
    let shard = ShardConfig::new(case.total, case.rank);
    let batch = BatchConfig::new(case.batch_size).drop_last(case.drop_last);
    let prefetch = |w: usize| {
        PrefetchConfig::default()
            .num_workers(w)
            .worker_queue_size(2)
    };
    match case.bucket {
        None => every_split(
            |w| {
                user()
                    .shard(shard)
                    .unwrap()
                    .batch(batch)
                    .unwrap()
                    .prefetch(Arc::clone(&src), prefetch(w))
                    .unwrap()
            },
            case,
        ),
        Some((buffer_size, pack_size)) => every_split(
            |w| {
                let config = BucketConfig::default()
                    .buffer_size(buffer_size)
                    .pack_size(pack_size)
                    .seed(case.seed ^ 1);
                let key = BucketKey::item_len(Arc::clone(&src));
                user()
                    .shard(shard)
                    .unwrap()
                    .bucket(config, key)
                    .unwrap()
                    .batch(batch)
                    .unwrap()
                    .prefetch(Arc::clone(&src), prefetch(w))
                    .unwrap()
            },
            case,
        ),
    }
}

#[test]
fn resumes_exactly_at_every_split_point() {
    for bucket in [None, Some((7, 3)), Some((4, 4))] {
        for (workers, resume_workers) in [(1, 1), (2, 3), (3, 1)] {
            for mode in [SamplerMode::Sequential, SamplerMode::Shuffled] {
                check(Case {
                    n: 41,
                    mode,
                    seed: 5,
                    epochs: 2,
                    total: 2,
                    rank: 1,
                    bucket,
                    batch_size: 3,
                    drop_last: false,
                    workers,
                    resume_workers,
                });
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn resumes_exactly_at_every_split_point_for_random_configurations(
        n in 0..40u64,
        shuffled in any::<bool>(),
        seed in any::<u64>(),
        epochs in 1..3u64,
        total in 1..4u64,
        rank in 0..4u64,
        bucket in proptest::option::of((1..12u64, 1..5u64)),
        batch_size in 1..5u64,
        drop_last in any::<bool>(),
        workers in 1..=3usize,
        resume_workers in 1..=3usize,
    ) {
        check(Case {
            n,
            mode: if shuffled { SamplerMode::Shuffled } else { SamplerMode::Sequential },
            seed,
            epochs,
            total,
            rank: rank % total,
            bucket,
            batch_size,
            drop_last,
            workers,
            resume_workers,
        });
    }
}
