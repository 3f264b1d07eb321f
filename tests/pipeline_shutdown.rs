//! Dropping a loader (even with full queues or a worker stuck in a gather) returns at once and
//! its workers exit and release the source; `shutdown()` waits for that; a dropped `next()`
//! future loses no batch.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use futures::executor::block_on;
use futures::{FutureExt, StreamExt};
use zrecord::pipeline::{
    IndexBatch, Loader, LoaderBuilder, MemorySource, PrefetchConfig, SamplerConfig, SamplerMode,
    Source, Stage,
};

/// Hang guard only (a failing test must not hang CI); never a synchronisation.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// Announces its own drop; can hold gathers of record 0 until released.
struct Watched {
    inner: MemorySource,
    dropped: Mutex<Option<mpsc::Sender<()>>>,
    hold: Mutex<bool>,
    cv: Condvar,
}

impl Watched {
    fn new(n: u8, hold: bool) -> (Arc<Self>, mpsc::Receiver<()>) {
        let (tx, rx) = mpsc::channel();
        let s = Arc::new(Self {
            inner: MemorySource::new((0..n).map(|i| vec![i; 3]).collect()),
            dropped: Mutex::new(Some(tx)),
            hold: Mutex::new(hold),
            cv: Condvar::new(),
        });
        (s, rx)
    }

    fn release(&self) {
        *self.hold.lock().unwrap() = false;
        self.cv.notify_all();
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let Some(tx) = self.dropped.lock().unwrap().take() {
            let _ = tx.send(());
        }
    }
}

impl Source for Watched {
    type Batch = Vec<Vec<u8>>;

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn item_len(&self, index: u64) -> zrecord::Result<u64> {
        self.inner.item_len(index)
    }

    fn gather(&self, indices: &[u64]) -> zrecord::Result<Self::Batch> {
        if indices.contains(&0) {
            let mut hold = self.hold.lock().unwrap();
            while *hold {
                hold = self.cv.wait(hold).unwrap();
            }
        }
        self.inner.gather(indices)
    }
}

fn builder<S: Source>(src: Arc<S>) -> LoaderBuilder<S> {
    LoaderBuilder::new(src)
        .sampler(
            SamplerConfig::default()
                .mode(SamplerMode::Sequential)
                .seed(0)
                .epochs(None),
        )
        .batch_size(2)
        .prefetch(
            PrefetchConfig::default()
                .num_workers(4)
                .worker_queue_size(1)
                .consumer_queue_size(1),
        )
}

#[test]
fn dropping_with_full_queues_stops_the_workers() {
    let (src, dropped) = Watched::new(50, false);
    let mut loader = builder(src).build().unwrap();
    // An infinite stream: after one batch every worker soon blocks on its full queue.
    block_on(loader.next()).unwrap().unwrap();
    drop(loader);
    // Every worker released its handle on the source, so it was dropped.
    dropped.recv_timeout(HANG_GUARD).expect("workers exited");
}

#[test]
fn dropping_with_a_worker_stuck_in_a_gather_returns_at_once() {
    let (src, dropped) = Watched::new(50, true);
    let loader = builder(Arc::clone(&src)).build().unwrap();
    // Worker 0 is stuck gathering records 0 and 1; dropping does not wait for it.
    drop(loader);
    assert!(
        dropped.try_recv().is_err(),
        "the stuck worker still holds the source"
    );
    src.release();
    drop(src);
    dropped
        .recv_timeout(HANG_GUARD)
        .expect("the worker exited after its gather");
}

#[test]
fn shutdown_waits_for_every_worker() {
    let src = Arc::new(MemorySource::new((0..50u8).map(|i| vec![i]).collect()));
    let mut loader = builder(Arc::clone(&src)).build().unwrap();
    block_on(loader.next()).unwrap().unwrap();
    assert!(Arc::strong_count(&src) > 1);
    block_on(loader.shutdown());
    assert_eq!(Arc::strong_count(&src), 1);
}

#[test]
fn dropped_next_futures_lose_no_batch() {
    let src = Arc::new(MemorySource::new((0..101u8).map(|i| vec![i]).collect()));
    let b = builder(Arc::clone(&src)).epochs(Some(2)).sampler(
        SamplerConfig::default()
            .mode(SamplerMode::Shuffled)
            .seed(1)
            .epochs(Some(2)),
    );
    let want: Vec<IndexBatch> = b
        .index_chain()
        .unwrap()
        .cursor()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let mut loader: Loader<MemorySource> = b.build().unwrap();
    let mut got = Vec::new();
    let mut pending_polls = 0u64;
    loop {
        // Poll a fresh `next()` future once and drop it, whatever it returned.
        match loader.next().now_or_never() {
            Some(Some(b)) => {
                let b = b.unwrap();
                got.push(b.batch);
                // The checkpoint moves with the consumed batches only.
                assert_eq!(loader.state().prefetch.consumed(), got.len() as u64);
            }
            Some(None) => break,
            None => {
                pending_polls += 1;
                std::thread::yield_now();
            }
        }
    }
    println!("{pending_polls} next() futures dropped while pending");
    assert_eq!(got, want);
    assert!(loader.next().now_or_never().unwrap().is_none());
    assert_eq!(want.len() as u64, 2 * b_len(&src));
}

fn b_len(src: &Arc<MemorySource>) -> u64 {
    builder(Arc::clone(src)).index_chain().unwrap().epoch_len()
}

#[test]
fn the_loader_is_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Loader<MemorySource>>();
    send_sync::<Loader<zrecord::pipeline::DatasetSource>>();
    send_sync::<Loader<zrecord::Dataset, (Vec<u8>, usize)>>();
    let _ = StreamExt::boxed(
        builder(Arc::new(MemorySource::new(vec![vec![1]])))
            .build()
            .unwrap()
            .take(1),
    );
}
