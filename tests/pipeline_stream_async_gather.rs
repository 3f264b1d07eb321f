//! A stream prefetch above a user stage with several asynchronous gathers in flight per worker
//! (`gathers_in_flight` above 1) keeps that many gathers going at once, yields exactly the
//! batches of the blocking path (whatever order the gathers finish in), and resumes exactly at
//! every split point.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::executor::block_on;
use futures::StreamExt;
use zrecord::pipeline::{
    BatchConfig, Checkpoint, CheckpointExt, IndexBatch, LoaderBatch, MemorySource, Prefetch,
    PrefetchConfig, Sampler, SamplerConfig, SamplerMode, Source, SourceFuture, Stage,
};

/// Gathers asynchronously only: a gather's future finishes once `partners` gathers have been
/// started in all (so a worker that keeps fewer in flight would wait forever), after a delay
/// that depends on its first index (so later gathers often finish first). The blocking
/// `gather` is never used.
struct Paired {
    inner: MemorySource,
    started: Arc<AtomicUsize>,
    partners: usize,
}

impl Source for Paired {
    type Batch = Vec<Vec<u8>>;

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn item_len(&self, index: u64) -> zrecord::Result<u64> {
        self.inner.item_len(index)
    }

    fn gather(&self, _indices: &[u64]) -> zrecord::Result<Self::Batch> {
        panic!("the blocking gather of an asynchronous worker");
    }

    fn gather_async(self: Arc<Self>, indices: Vec<u64>) -> SourceFuture<Self::Batch> {
        self.started.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = futures::channel::oneshot::channel();
        std::thread::spawn(move || {
            while self.started.load(Ordering::SeqCst) < self.partners {
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(indices.first().map_or(0, |i| i % 3)));
            let _ = tx.send(self.inner.gather(&indices));
        });
        Box::pin(async move { rx.await.unwrap() })
    }
}

type Item = (u64, u64, Vec<u64>, Vec<Vec<u8>>);

fn item(b: zrecord::Result<LoaderBatch<Vec<Vec<u8>>>>) -> Item {
    let b = b.unwrap();
    (b.epoch(), b.position(), b.indices(), b.data)
}

const N: u64 = 30;

fn records() -> MemorySource {
    MemorySource::new((0..N).map(|i| vec![i as u8; 3]).collect())
}

/// sampler (shuffled, 2 epochs) → a user filter (drops multiples of 4) → batches of 2 →
/// prefetch.
fn chain<Src: Source>(
    src: Arc<Src>,
    config: PrefetchConfig,
) -> Prefetch<Src::Batch, impl Checkpoint<Item = zrecord::Result<IndexBatch>> + Unpin> {
    Sampler::new(
        N,
        SamplerConfig::default()
            .mode(SamplerMode::Shuffled)
            .seed(9)
            .epochs(Some(2)),
    )
    .unwrap()
    .cursor()
    .filter_items(|s| s.index % 4 != 0)
    .batch(BatchConfig::new(2))
    .unwrap()
    .prefetch(src, config)
    .unwrap()
}

fn paired(partners: usize) -> Arc<Paired> {
    Arc::new(Paired {
        inner: records(),
        started: Arc::default(),
        partners,
    })
}

#[test]
fn one_worker_keeps_its_window_of_gathers_in_flight() {
    // The first gather finishes only once a second one has started: one worker, one queue slot.
    let config = PrefetchConfig::default()
        .num_workers(1)
        .worker_queue_size(1)
        .gathers_in_flight(2);
    let got: Vec<Item> = block_on(chain(paired(2), config).map(item).collect());
    let blocking: Vec<Item> = block_on(
        chain(Arc::new(records()), PrefetchConfig::default())
            .map(item)
            .collect(),
    );
    assert_eq!(got, blocking);
}

#[test]
fn equals_the_blocking_path_and_resumes_at_every_split_point() {
    let expected: Vec<Item> = block_on(
        chain(Arc::new(records()), PrefetchConfig::default())
            .map(item)
            .collect(),
    );
    for (workers, window, resume_workers, resume_window) in [(1, 3, 2, 2), (2, 2, 1, 4)] {
        let config = |w: usize, g: usize| {
            PrefetchConfig::default()
                .num_workers(w)
                .worker_queue_size(2)
                .gathers_in_flight(g)
        };
        for k in 0..=expected.len() {
            let mut stream = chain(paired(0), config(workers, window));
            for want in &expected[..k] {
                assert_eq!(&item(block_on(stream.next()).unwrap()), want);
            }
            let json = serde_json::to_string(&stream.checkpoint()).unwrap();
            drop(stream);
            let mut resumed = chain(paired(0), config(resume_workers, resume_window));
            resumed
                .restore(serde_json::from_str(&json).unwrap())
                .unwrap();
            let rest: Vec<Item> = block_on(resumed.map(item).collect());
            assert_eq!(rest[..], expected[k..], "{workers} workers, split {k}");
        }
    }
}
