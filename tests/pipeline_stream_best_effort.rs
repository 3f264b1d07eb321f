//! A stream prefetch above a user stage with the best-effort merge, checkpointed while a slow
//! batch has let later batches be consumed first, resumes with exactly the batches not yet
//! consumed, each once (through JSON, with any worker count and either merge), and never lets
//! one worker's consumed batches lead another's by more than `max_lead`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::executor::block_on;
use futures::stream::Stream;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use zrecord::pipeline::{
    BatchConfig, Checkpoint, CheckpointExt, IndexBatch, LoaderBatch, MemorySource, MergePolicy,
    Prefetch, PrefetchConfig, Sample, Sampler, SamplerConfig, SamplerMode, Stage, Transform,
};

/// The user's stage, written against `Stream` + `Checkpoint` only: drops every record whose
/// index is a multiple of 5.
struct DropFives<I> {
    input: I,
}

#[derive(Clone, Serialize, Deserialize)]
struct DropFivesState<St> {
    input: St,
}

impl<I> Stream for DropFives<I>
where
    I: Stream<Item = zrecord::Result<Sample>> + Unpin,
{
    type Item = zrecord::Result<Sample>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            match Pin::new(&mut this.input).poll_next(cx) {
                Poll::Ready(Some(Ok(s))) if s.index % 5 == 0 => continue,
                other => return other,
            }
        }
    }
}

impl<I> Checkpoint for DropFives<I>
where
    I: Checkpoint<Item = zrecord::Result<Sample>> + Unpin,
{
    type State = DropFivesState<I::State>;

    fn checkpoint(&self) -> Self::State {
        DropFivesState {
            input: self.input.checkpoint(),
        }
    }

    fn restore(&mut self, state: Self::State) -> zrecord::Result<()> {
        self.input.restore(state.input)
    }
}

/// A gate the transform of one batch waits at until the test opens it.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    fn wait(&self) {
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.opened.wait(open).unwrap();
        }
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }
}

type Item = (u64, u64, Vec<u64>, Vec<Vec<u8>>);

fn item(b: zrecord::Result<LoaderBatch<Vec<Vec<u8>>>>) -> Item {
    let b = b.unwrap();
    (b.epoch(), b.position(), b.indices(), b.data)
}

const N: u64 = 40;

fn source() -> Arc<MemorySource> {
    Arc::new(MemorySource::new(
        (0..N).map(|i| vec![i as u8; 2]).collect(),
    ))
}

fn best_effort(workers: usize, max_lead: u64) -> PrefetchConfig {
    PrefetchConfig::default()
        .num_workers(workers)
        .worker_queue_size(2)
        .merge(MergePolicy::BestEffort {
            max_lead,
            max_skips_per_round: 1,
        })
}

/// sampler (shuffled, 2 epochs) → the user's stage → batches of 3 → prefetch with `transform`.
fn chain(
    src: &Arc<MemorySource>,
    config: PrefetchConfig,
    transform: Transform<Vec<Vec<u8>>, Vec<Vec<u8>>>,
) -> Prefetch<Vec<Vec<u8>>, impl Checkpoint<Item = zrecord::Result<IndexBatch>> + Unpin> {
    let sampler = Sampler::new(
        N,
        SamplerConfig::default()
            .mode(SamplerMode::Shuffled)
            .seed(3)
            .epochs(Some(2)),
    )
    .unwrap();
    DropFives {
        input: sampler.cursor(),
    }
    .batch(BatchConfig::new(3))
    .unwrap()
    .prefetch_with(Arc::clone(src), config, transform)
    .unwrap()
}

/// A transform that sleeps a fixed time per batch position: later batches often overtake
/// earlier ones, in an order the test does not depend on.
fn slow_by_position() -> Transform<Vec<Vec<u8>>, Vec<Vec<u8>>> {
    Arc::new(|records, batch: &IndexBatch| {
        std::thread::sleep(Duration::from_millis(batch.position % 4 * 2));
        Ok(records)
    })
}

/// Counts every item: each must come exactly once.
fn counts(items: impl IntoIterator<Item = Item>) -> BTreeMap<Item, usize> {
    let mut map = BTreeMap::new();
    for i in items {
        *map.entry(i).or_insert(0) += 1;
    }
    map
}

#[test]
fn a_checkpoint_after_out_of_order_batches_resumes_with_exactly_the_rest() {
    let src = source();
    let identity: Transform<Vec<Vec<u8>>, Vec<Vec<u8>>> = Arc::new(|records, _| Ok(records));
    let full: Vec<Item> = block_on(
        chain(&src, PrefetchConfig::default(), Arc::clone(&identity))
            .map(item)
            .collect(),
    );
    // Batch 0 (worker 0's first) cannot finish before the test has consumed two batches; the
    // only ones ready meanwhile are worker 1's (1, then 3): worker 0's later batches wait
    // behind batch 0.
    let gate = Arc::new(Gate::default());
    let gated: Transform<Vec<Vec<u8>>, Vec<Vec<u8>>> = {
        let gate = Arc::clone(&gate);
        Arc::new(move |records, batch: &IndexBatch| {
            if batch.position == 0 && batch.epoch == 0 {
                gate.wait();
            }
            Ok(records)
        })
    };
    let mut stream = chain(&src, best_effort(2, 3), gated);
    let first = item(block_on(stream.next()).unwrap());
    let second = item(block_on(stream.next()).unwrap());
    assert_eq!((first.1, second.1), (1, 3), "consumed out of order");
    let json = serde_json::to_string(&stream.checkpoint()).unwrap();
    gate.open();
    drop(stream);
    for (workers, config) in [
        (1, PrefetchConfig::default()),
        (3, PrefetchConfig::default().num_workers(3)),
        (2, best_effort(2, 1)),
    ] {
        let mut resumed = chain(&src, config, Arc::clone(&identity));
        resumed
            .restore(serde_json::from_str(&json).unwrap())
            .unwrap();
        let rest: Vec<Item> = block_on(resumed.map(item).collect());
        if config.merge == MergePolicy::Strict {
            // The strict merge resumes in input order, without the two consumed batches.
            let expected: Vec<Item> = full
                .iter()
                .filter(|b| *b != &first && *b != &second)
                .cloned()
                .collect();
            assert_eq!(rest, expected, "{workers} workers, strict");
        }
        let mut all = vec![first.clone(), second.clone()];
        all.extend(rest);
        assert_eq!(
            counts(all),
            counts(full.clone()),
            "{workers} workers: every batch exactly once"
        );
    }
}

#[test]
fn best_effort_checkpoints_resume_exactly_at_every_split_point() {
    let src = source();
    let full = counts(block_on(
        chain(&src, PrefetchConfig::default(), slow_by_position())
            .map(item)
            .collect::<Vec<_>>(),
    ));
    let batches: usize = full.values().sum();
    for (workers, resume_workers, max_lead) in [(2, 2, 1), (3, 1, 2), (2, 3, 4)] {
        for k in 0..=batches {
            let mut stream = chain(&src, best_effort(workers, max_lead), slow_by_position());
            let mut seen = Vec::new();
            for _ in 0..k {
                seen.push(item(block_on(stream.next()).unwrap()));
                assert!(stream.stats().lead <= max_lead);
            }
            assert!(stream.stats().max_lead <= max_lead);
            let json = serde_json::to_string(&stream.checkpoint()).unwrap();
            drop(stream);
            let mut resumed = chain(
                &src,
                best_effort(resume_workers, max_lead),
                slow_by_position(),
            );
            resumed
                .restore(serde_json::from_str(&json).unwrap())
                .unwrap();
            seen.extend(block_on(resumed.map(item).collect::<Vec<_>>()));
            assert_eq!(
                counts(seen),
                full,
                "{workers} workers, resumed with {resume_workers} after {k} batches"
            );
        }
    }
}
