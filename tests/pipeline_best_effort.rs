//! The best-effort merge yields every index exactly once per epoch, never lets a worker lead the
//! slowest active one by more than `max_lead` consumed items, and its checkpoints lose and repeat
//! nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};

use futures::executor::block_on;
use futures::{FutureExt, StreamExt};
use zrecord::pipeline::{
    BatchConfig, LoaderBuilder, LoaderConfig, MemorySource, MergePolicy, PrefetchConfig,
    SamplerConfig, SamplerMode, Source,
};

/// A source whose gathers of record `blocked` wait until the gate opens, and whose other gathers
/// do a pseudo-random amount of work (to shake the merge order).
struct Gated {
    inner: MemorySource,
    blocked: Option<u64>,
    open: Mutex<bool>,
    cv: Condvar,
}

impl Gated {
    fn new(n: u64, blocked: Option<u64>) -> Arc<Self> {
        Arc::new(Self {
            inner: MemorySource::new((0..n).map(|i| i.to_le_bytes().to_vec()).collect()),
            blocked,
            open: Mutex::new(false),
            cv: Condvar::new(),
        })
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }
}

impl Source for Gated {
    type Batch = Vec<Vec<u8>>;

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn item_len(&self, index: u64) -> zrecord::Result<u64> {
        self.inner.item_len(index)
    }

    fn gather(&self, indices: &[u64]) -> zrecord::Result<Self::Batch> {
        if self.blocked.is_some_and(|b| indices.contains(&b)) {
            let mut open = self.open.lock().unwrap();
            while !*open {
                open = self.cv.wait(open).unwrap();
            }
        }
        let mut x = indices
            .iter()
            .fold(7u64, |a, &i| a.wrapping_mul(31).wrapping_add(i));
        for _ in 0..(x % 5000) {
            x = std::hint::black_box(x.rotate_left(5) ^ 0x9e37);
        }
        self.inner.gather(indices)
    }
}

fn config(
    num_workers: usize,
    max_lead: u64,
    max_skips_per_round: u64,
    epochs: u64,
) -> LoaderConfig {
    LoaderConfig::default()
        .sampler(
            SamplerConfig::default()
                .mode(SamplerMode::Shuffled)
                .seed(3)
                .epochs(Some(epochs)),
        )
        .batch(BatchConfig::new(2).drop_last(false))
        .prefetch(
            PrefetchConfig::default()
                .num_workers(num_workers)
                .worker_queue_size(8)
                .consumer_queue_size(1)
                .merge(MergePolicy::BestEffort {
                    max_lead,
                    max_skips_per_round,
                }),
        )
}

type Out = Vec<(u64, Vec<u64>)>;

fn record(out: &mut Out, b: zrecord::pipeline::LoaderBatch<Vec<Vec<u8>>>) {
    // The gathered bytes are the indices: check them too.
    let from_data: Vec<u64> = b
        .data
        .iter()
        .map(|r| u64::from_le_bytes(r[..8].try_into().unwrap()))
        .collect();
    assert_eq!(from_data, b.indices());
    out.push((b.epoch(), b.indices()));
}

fn assert_exactly_once_per_epoch(out: &Out, n: u64, epochs: u64) {
    let mut per_epoch: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for (e, idx) in out {
        per_epoch.entry(*e).or_default().extend(idx);
    }
    assert_eq!(per_epoch.len() as u64, epochs);
    for (e, mut v) in per_epoch {
        v.sort_unstable();
        assert_eq!(v, (0..n).collect::<Vec<_>>(), "epoch {e}");
    }
}

#[test]
fn a_stalled_worker_bounds_the_others_lead() {
    let n = 200;
    let (workers, max_lead) = (4usize, 3u64);
    // Sequential order: worker 0's first batch holds records 0 and 1; block it.
    let src = Gated::new(n, Some(0));
    let mut cfg = config(workers, max_lead, 4, 1);
    cfg.sampler.mode = SamplerMode::Sequential;
    let mut loader = LoaderBuilder::new(Arc::clone(&src))
        .config(cfg)
        .build()
        .unwrap();
    let mut out = Out::new();
    // Exactly (workers - 1) * max_lead batches can pass worker 0.
    for _ in 0..(workers - 1) * max_lead as usize {
        let b = block_on(loader.next()).unwrap().unwrap();
        assert_ne!(b.position() % workers as u64, 0, "worker 0 is stalled");
        record(&mut out, b);
    }
    // The next one must wait for worker 0: the others are at the lead bound.
    assert!(loader.next().now_or_never().is_none());
    let state = loader.state().prefetch;
    assert_eq!(state.workers[0].consumed, 0);
    assert!(state.workers[1..].iter().all(|w| w.consumed == max_lead));
    assert!(loader.max_observed_lead() <= max_lead);
    src.open();
    while let Some(b) = block_on(loader.next()) {
        record(&mut out, b.unwrap());
    }
    assert!(loader.max_observed_lead() <= max_lead);
    assert_eq!(out.len(), 100);
    assert_exactly_once_per_epoch(&out, n, 1);
}

#[test]
fn resume_with_a_stalled_worker_loses_and_repeats_nothing() {
    let n = 120;
    let src = Gated::new(n, Some(0));
    let mut cfg = config(3, 2, 3, 2);
    cfg.sampler.mode = SamplerMode::Sequential;
    let mut loader = LoaderBuilder::new(Arc::clone(&src))
        .config(cfg)
        .build()
        .unwrap();
    let mut out = Out::new();
    for _ in 0..4 {
        record(&mut out, block_on(loader.next()).unwrap().unwrap());
    }
    let json = serde_json::to_string(&loader.state()).unwrap();
    // Dropping must not wait for the stalled worker.
    drop(loader);
    // The checkpoint is not a prefix of the sequential order: worker 0 consumed nothing.
    let resumed_src = Gated::new(n, None);
    let state = serde_json::from_str(&json).unwrap();
    let resumed = LoaderBuilder::new(Arc::clone(&resumed_src))
        .config(cfg)
        .resume(&state)
        .unwrap();
    let mut resumed = resumed;
    while let Some(b) = block_on(resumed.next()) {
        record(&mut out, b.unwrap());
    }
    assert!(resumed.max_observed_lead() <= 2);
    assert_exactly_once_per_epoch(&out, n, 2);
    src.open();
}

#[test]
fn random_schedules_and_resume_points_lose_and_repeat_nothing() {
    let n = 301;
    let epochs = 2;
    for (i, (workers, max_lead, skips)) in [(2, 1, 0), (5, 2, 1), (8, 3, 8), (3, 1, 2), (6, 4, 0)]
        .into_iter()
        .enumerate()
    {
        let src = Gated::new(n, None);
        let cfg = config(workers, max_lead, skips, epochs);
        let mut loader = LoaderBuilder::new(Arc::clone(&src))
            .config(cfg)
            .build()
            .unwrap();
        let total = 2 * 151;
        let cut = (i * 67 + 13) % total;
        let mut out = Out::new();
        for _ in 0..cut {
            record(&mut out, block_on(loader.next()).unwrap().unwrap());
        }
        assert!(loader.max_observed_lead() <= max_lead);
        let state = loader.state();
        drop(loader);
        let resumed = LoaderBuilder::new(Arc::clone(&src))
            .config(cfg)
            .resume(&state)
            .unwrap();
        let max_lead_seen = {
            let mut resumed = resumed;
            while let Some(b) = block_on(resumed.next()) {
                record(&mut out, b.unwrap());
            }
            resumed.max_observed_lead()
        };
        assert!(max_lead_seen <= max_lead);
        assert_eq!(out.len(), total);
        assert_exactly_once_per_epoch(&out, n, epochs);
    }
}

#[test]
fn best_effort_without_interruption_is_a_permutation_per_epoch() {
    let src = Gated::new(500, None);
    let loader = LoaderBuilder::new(Arc::clone(&src))
        .config(config(7, 2, 3, 3))
        .build()
        .unwrap();
    let mut out = Out::new();
    for b in block_on(loader.collect::<Vec<_>>()) {
        record(&mut out, b.unwrap());
    }
    assert_exactly_once_per_epoch(&out, 500, 3);
}

/// A source whose gathers of records `≡ 0 (mod every)` each wait for one permit from the test.
struct Paced {
    inner: MemorySource,
    every: u64,
    permits: Mutex<std::sync::mpsc::Receiver<()>>,
}

impl Source for Paced {
    type Batch = Vec<Vec<u8>>;

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn item_len(&self, index: u64) -> zrecord::Result<u64> {
        self.inner.item_len(index)
    }

    fn gather(&self, indices: &[u64]) -> zrecord::Result<Self::Batch> {
        if indices.iter().any(|i| i % self.every == 0) {
            // A closed channel (the test ended) lets the gather through.
            let _ = self.permits.lock().unwrap().recv();
        }
        self.inner.gather(indices)
    }
}

#[test]
fn with_a_large_consumer_queue_the_consumed_lead_stays_within_max_lead() {
    let (n, workers, max_lead) = (120u64, 3usize, 2u64);
    let (permit, permits) = std::sync::mpsc::channel();
    let src = Arc::new(Paced {
        inner: MemorySource::new((0..n).map(|i| i.to_le_bytes().to_vec()).collect()),
        every: workers as u64,
        permits: Mutex::new(permits),
    });
    let cfg = LoaderConfig::default()
        .sampler(
            SamplerConfig::default()
                .mode(SamplerMode::Sequential)
                .epochs(Some(1)),
        )
        .batch(BatchConfig::new(1))
        .prefetch(
            PrefetchConfig::default()
                .num_workers(workers)
                .worker_queue_size(4)
                .consumer_queue_size(32)
                .merge(MergePolicy::BestEffort {
                    max_lead,
                    max_skips_per_round: workers as u64,
                }),
        );
    // Worker 0 runs the records ≡ 0 (mod 3): each of its gathers waits for a permit, given only
    // when the loader has nothing ready, so the other workers run ahead as far as the merge lets
    // them.
    let mut loader = LoaderBuilder::new(Arc::clone(&src))
        .config(cfg)
        .build()
        .unwrap();
    let mut out = Out::new();
    loop {
        let b = match loader.next().now_or_never() {
            Some(b) => b,
            None => {
                permit.send(()).unwrap();
                block_on(loader.next())
            }
        };
        let Some(b) = b else { break };
        record(&mut out, b.unwrap());
        let consumed: Vec<u64> = loader
            .state()
            .prefetch
            .workers
            .iter()
            .map(|w| w.consumed)
            .collect();
        let (lo, hi) = (
            *consumed.iter().min().unwrap(),
            *consumed.iter().max().unwrap(),
        );
        assert!(
            hi - lo <= max_lead,
            "after {} batches the consumed counts are {consumed:?}",
            out.len()
        );
        assert!(loader.max_observed_lead() <= max_lead);
    }
    assert_eq!(out.len() as u64, n);
    assert_exactly_once_per_epoch(&out, n, 1);
}
