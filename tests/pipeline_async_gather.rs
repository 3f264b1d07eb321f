//! A worker with several asynchronous gathers in flight (`gathers_in_flight` above 1) delivers
//! exactly the stream of the blocking path, whatever order the gathers finish in; it never has
//! more than its window alive; and its checkpoint resumes exactly at every split point.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::executor::block_on;
use zrecord::pipeline::{
    LoaderBuilder, LoaderState, MemorySource, PrefetchConfig, SamplerConfig, SamplerMode, Source,
    SourceFuture,
};

/// Gathers on a thread of their own that sleeps a little (more for some batches than others,
/// so they finish out of order); the blocking `gather` is never used once `async_only`.
struct Delayed {
    inner: MemorySource,
    async_only: bool,
    alive: Arc<AtomicUsize>,
    max_alive: Arc<AtomicUsize>,
    /// Indices whose first gather fails.
    fail_once: Mutex<Vec<u64>>,
}

impl Delayed {
    fn new(n: u32, async_only: bool) -> Arc<Self> {
        Arc::new(Self {
            inner: MemorySource::new((0..n).map(|i| i.to_le_bytes().to_vec()).collect()),
            async_only,
            alive: Arc::default(),
            max_alive: Arc::default(),
            fail_once: Mutex::new(vec![5]),
        })
    }
}

/// Counts the futures alive (made and not dropped).
struct Alive(Arc<AtomicUsize>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Source for Delayed {
    type Batch = Vec<Vec<u8>>;

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn item_len(&self, index: u64) -> zrecord::Result<u64> {
        self.inner.item_len(index)
    }

    fn gather(&self, indices: &[u64]) -> zrecord::Result<Self::Batch> {
        assert!(
            !self.async_only,
            "the window must gather through gather_async"
        );
        self.inner.gather(indices)
    }

    fn gather_async(self: Arc<Self>, indices: Vec<u64>) -> SourceFuture<Self::Batch> {
        let now = self.alive.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_alive.fetch_max(now, Ordering::SeqCst);
        let alive = Alive(Arc::clone(&self.alive));
        let fails = {
            let mut f = self.fail_once.lock().unwrap();
            let hit = f.iter().position(|i| indices.contains(i));
            hit.map(|p| f.remove(p)).is_some()
        };
        let (tx, rx) = futures::channel::oneshot::channel();
        let this = Arc::clone(&self);
        let delay = Duration::from_micros(indices.first().map_or(0, |i| (i * 7919) % 3000));
        std::thread::spawn(move || {
            std::thread::sleep(delay);
            let r = if fails {
                Err(zrecord::Error::InvalidConfig {
                    reason: "first try fails".into(),
                })
            } else {
                this.inner.gather(&indices)
            };
            let _ = tx.send(r);
        });
        Box::pin(async move {
            let _alive = alive;
            rx.await.unwrap()
        })
    }
}

fn builder(source: Arc<Delayed>, workers: usize, window: usize) -> LoaderBuilder<Delayed> {
    LoaderBuilder::new(source)
        .sampler(
            SamplerConfig::default()
                .mode(SamplerMode::Shuffled)
                .seed(11)
                .epochs(Some(2)),
        )
        .batch_size(8)
        .prefetch(
            PrefetchConfig::default()
                .num_workers(workers)
                .gathers_in_flight(window)
                .retry(zrecord::pipeline::RetryPolicy::default().backoff(Duration::from_millis(1))),
        )
}

/// A batch's indices and bytes, and the checkpoint after it.
type Delivered = (Vec<u64>, Vec<Vec<u8>>, LoaderState);

/// Every batch (indices and bytes) and the checkpoint after it.
fn run(
    source: Arc<Delayed>,
    workers: usize,
    window: usize,
    from: Option<&LoaderState>,
) -> Vec<Delivered> {
    let b = builder(source, workers, window);
    let mut loader = match from {
        Some(s) => b.resume(s).unwrap(),
        None => b.build().unwrap(),
    };
    let mut out = Vec::new();
    block_on(async {
        while let Some(batch) = loader.next().await {
            let batch = batch.unwrap();
            out.push((batch.indices(), batch.data, loader.state()));
        }
    });
    out
}

#[test]
fn a_window_of_async_gathers_is_the_blocking_stream() {
    let baseline = run(Delayed::new(100, false), 1, 1, None);
    assert_eq!(baseline.len(), 26);
    for workers in [1, 2, 3] {
        for window in [2, 4] {
            let source = Delayed::new(100, true);
            let got = run(Arc::clone(&source), workers, window, None);
            let strip = |v: &[Delivered]| {
                v.iter()
                    .map(|(i, d, _)| (i.clone(), d.clone()))
                    .collect::<Vec<_>>()
            };
            assert_eq!(
                strip(&got),
                strip(&baseline),
                "workers={workers} window={window}"
            );
            // Every worker filled its window, and never went past it.
            let max = source.max_alive.load(Ordering::SeqCst);
            assert!(max >= window && max <= workers * window, "max alive {max}");
            assert_eq!(source.alive.load(Ordering::SeqCst), 0);
            // Resumed after every batch, with this window: exactly the rest.
            for (k, (_, _, state)) in got.iter().enumerate() {
                let state: LoaderState =
                    serde_json::from_str(&serde_json::to_string(state).unwrap()).unwrap();
                let rest = run(Delayed::new(100, true), workers, window, Some(&state));
                assert_eq!(
                    strip(&rest),
                    strip(&baseline[k + 1..]),
                    "workers={workers} window={window} split={k}"
                );
            }
        }
    }
}
