//! With gathers in flight (`gathers_in_flight` above 1), a worker behaves as the blocking one
//! under faults and at the edges: sources behind an `Arc` keep their asynchronous gathers and
//! batched keys, lookahead is still announced, a failed index computation is retried and a
//! panicking one reported as `WorkerPanicked`, the gather latency excludes time blocked on a full
//! queue, and a dropped or shut-down loader drops its pending gathers and releases its source.
//! (From a review; each test names what it pins.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::executor::block_on;
use zrecord::pipeline::{
    BucketConfig, BucketKey, LoaderBuilder, MemorySource, PrefetchConfig, RetryPolicy,
    SamplerConfig, SamplerMode, Source, SourceFuture,
};

type Records = Vec<Vec<u8>>;

/// A source whose blocking `gather` fails and whose `gather_async` works; it counts the calls of
/// `item_lens` and `lookahead`.
struct AsyncOnly {
    inner: MemorySource,
    item_lens_calls: AtomicUsize,
    lookahead_calls: AtomicUsize,
    /// Each gather_async completes on a thread after this long.
    delay: Duration,
}

impl AsyncOnly {
    fn new(n: u32, delay: Duration) -> Self {
        Self {
            inner: MemorySource::new((0..n).map(|i| i.to_le_bytes().to_vec()).collect()),
            item_lens_calls: AtomicUsize::new(0),
            lookahead_calls: AtomicUsize::new(0),
            delay,
        }
    }
}

impl Source for AsyncOnly {
    type Batch = Records;

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn item_len(&self, index: u64) -> zrecord::Result<u64> {
        self.inner.item_len(index)
    }

    fn item_lens(&self, indices: &[u64], out: &mut Vec<u64>) -> zrecord::Result<()> {
        self.item_lens_calls.fetch_add(1, Ordering::SeqCst);
        for &i in indices {
            out.push(self.inner.item_len(i)?);
        }
        Ok(())
    }

    fn gather(&self, _indices: &[u64]) -> zrecord::Result<Records> {
        Err(zrecord::Error::InvalidConfig {
            reason: "the blocking gather was called with gathers_in_flight > 1".into(),
        })
    }

    fn gather_async(self: Arc<Self>, indices: Vec<u64>) -> SourceFuture<Records> {
        let (tx, rx) = futures::channel::oneshot::channel();
        let delay = self.delay;
        let this = Arc::clone(&self);
        std::thread::spawn(move || {
            std::thread::sleep(delay);
            let _ = tx.send(this.inner.gather(&indices));
        });
        Box::pin(async move { rx.await.unwrap() })
    }

    fn lookahead(&self, _session: u64, _indices: &[u64]) {
        self.lookahead_calls.fetch_add(1, Ordering::SeqCst);
    }
}

fn sampler() -> SamplerConfig {
    SamplerConfig::default()
        .mode(SamplerMode::Shuffled)
        .seed(5)
        .epochs(Some(1))
}

fn drain<S: Source, T: Send + 'static>(
    loader: &mut zrecord::pipeline::Loader<S, T>,
) -> Vec<zrecord::Result<Vec<u64>>> {
    block_on(async {
        let mut out = Vec::new();
        while let Some(b) = loader.next().await {
            out.push(b.map(|b| b.indices()));
        }
        out
    })
}

/// Finding: `impl Source for Arc<S>` forwards neither `gather_async` nor `item_lens`, so a
/// loader over `Arc<dyn Source>` (documented as supported) runs the blocking `gather` even with
/// `gathers_in_flight` above 1 (no gather in flight at once), and a bucket over it never uses the
/// batched keys.
#[test]
fn arc_dyn_source_keeps_gather_async() {
    let inner: Arc<dyn Source<Batch = Records>> =
        Arc::new(AsyncOnly::new(100, Duration::from_millis(1)));
    let mut loader = LoaderBuilder::new(Arc::new(inner))
        .sampler(sampler())
        .batch_size(10)
        .prefetch(
            PrefetchConfig::default()
                .num_workers(1)
                .gathers_in_flight(4)
                .retry(RetryPolicy::none()),
        )
        .build()
        .unwrap();
    let got = drain(&mut loader);
    assert_eq!(got.len(), 10);
    for b in got {
        b.expect("Arc<dyn Source> must gather through the inner source's gather_async");
    }
}

#[test]
fn arc_source_keeps_item_lens() {
    let inner = Arc::new(AsyncOnly::new(100, Duration::ZERO));
    let wrapped: Arc<dyn Source<Batch = Records>> = inner.clone();
    let mut loader = LoaderBuilder::new(Arc::new(wrapped))
        .sampler(sampler())
        .bucket(BucketConfig::default().buffer_size(50).pack_size(10))
        .batch_size(10)
        .prefetch(
            PrefetchConfig::default()
                .num_workers(1)
                .gathers_in_flight(2),
        )
        .build()
        .unwrap();
    let _ = drain(&mut loader);
    assert!(
        inner.item_lens_calls.load(Ordering::SeqCst) > 0,
        "a bucket over Arc<S> never reaches S::item_lens"
    );
}

/// Finding: with `gathers_in_flight` above 1 the worker never announces batches
/// (`WorkerJob::announce` is only called by `run_blocking`): `lookahead` is silently off.
#[test]
fn async_worker_still_announces_lookahead() {
    let src = Arc::new(AsyncOnly::new(400, Duration::from_micros(200)));
    let mut loader = LoaderBuilder::new(Arc::clone(&src))
        .sampler(sampler())
        .batch_size(10)
        .prefetch(
            PrefetchConfig::default()
                .num_workers(1)
                .lookahead(4)
                .gathers_in_flight(2),
        )
        .build()
        .unwrap();
    let got = drain(&mut loader);
    assert_eq!(got.len(), 40);
    assert!(
        src.lookahead_calls.load(Ordering::SeqCst) > 0,
        "lookahead(4) announced nothing with gathers_in_flight(2)"
    );
}

/// A bucket key that fails on its first call only (a transient error reading a length).
fn flaky_key(failed: Arc<AtomicBool>) -> BucketKey {
    BucketKey::new("flaky_len", move |i| {
        if !failed.swap(true, Ordering::SeqCst) {
            return Err(zrecord::Error::InvalidConfig {
                reason: "transient key failure".into(),
            });
        }
        Ok(i % 7)
    })
}

fn flaky_run(gathers_in_flight: usize) -> (Vec<zrecord::Result<Vec<u64>>>, u64) {
    let src = Arc::new(AsyncOnly::new(100, Duration::from_micros(100)));
    let builder = LoaderBuilder::new(src)
        .sampler(sampler())
        .bucket(BucketConfig::default().buffer_size(100).pack_size(10))
        .bucket_key(flaky_key(Arc::default()))
        .batch_size(10)
        .prefetch(
            PrefetchConfig::default()
                .num_workers(1)
                .lookahead(0)
                .gathers_in_flight(gathers_in_flight)
                .retry(RetryPolicy::default().backoff(Duration::from_millis(1))),
        );
    let mut loader = builder.build().unwrap();
    let got = drain(&mut loader);
    (got, loader.stats().failed_attempts)
}

/// Finding: the blocking worker retries a batch whose index computation fails (the
/// `stage.get` is inside `produce`, under the retry policy); the asynchronous worker hands that
/// error to the consumer at once (no retry, no failed attempt counted), so the two paths give
/// different streams, which the docs say they do not.
#[test]
fn async_worker_retries_a_failed_index_computation_like_the_blocking_one() {
    // The blocking path is the reference. AsyncOnly's blocking gather fails, so use a window of
    // 1 only to show what the retry policy does with the key error: MemorySource-backed.
    let blocking = {
        let src = Arc::new(MemorySource::new(
            (0..100u32).map(|i| i.to_le_bytes().to_vec()).collect(),
        ));
        let mut loader = LoaderBuilder::new(src)
            .sampler(sampler())
            .bucket(BucketConfig::default().buffer_size(100).pack_size(10))
            .bucket_key(flaky_key(Arc::default()))
            .batch_size(10)
            .prefetch(
                PrefetchConfig::default()
                    .num_workers(1)
                    .lookahead(0)
                    .retry(RetryPolicy::default().backoff(Duration::from_millis(1))),
            )
            .build()
            .unwrap();
        let got = drain(&mut loader);
        (got, loader.stats().failed_attempts)
    };
    assert_eq!(blocking.0.len(), 10, "blocking: {:?}", blocking.0);
    assert!(blocking.0.iter().all(Result::is_ok));
    assert_eq!(blocking.1, 1);
    let (got, failed) = flaky_run(2);
    let errors: Vec<_> = got.iter().filter(|b| b.is_err()).collect();
    assert!(errors.is_empty(), "async: {errors:?}");
    assert_eq!(got.len(), 10);
    assert_eq!(failed, 1);
}

/// Finding: a panic while computing a batch's indices (a bucket key that panics) is caught by
/// the blocking worker and reported as that batch's `WorkerPanicked`; the asynchronous worker
/// calls `stage.get` outside `catch_unwind`, so its thread unwinds and the consumer only sees
/// `WorkerGone`.
#[test]
fn async_worker_reports_a_panicking_key_as_worker_panicked() {
    let src = Arc::new(AsyncOnly::new(100, Duration::from_micros(100)));
    let mut loader = LoaderBuilder::new(src)
        .sampler(sampler())
        .bucket(BucketConfig::default().buffer_size(100).pack_size(10))
        .bucket_key(BucketKey::new("panics", |_| panic!("key panicked")))
        .batch_size(10)
        .prefetch(
            PrefetchConfig::default()
                .num_workers(1)
                .gathers_in_flight(2),
        )
        .build()
        .unwrap();
    let got = drain(&mut loader);
    let first = got.into_iter().next().expect("an item");
    let err = first.expect_err("a panicking key cannot give a batch");
    assert!(
        matches!(err, zrecord::Error::WorkerPanicked { .. }),
        "got {err:?}"
    );
}

/// Finding: in the asynchronous worker a gather's in-flight guard is dropped (and its latency
/// recorded) only when `poll_window` next runs, i.e. after the worker's blocked push: with a
/// slow consumer, `gather_latency` reports the time the worker was blocked on a full queue as
/// gather latency (and `gathers_in_flight` counts gathers long finished), which inverts the
/// "who waits for whom" reading the stats are for.
#[test]
fn async_gather_latency_does_not_include_worker_blocked_time() {
    let src = Arc::new(AsyncOnly::new(400, Duration::from_millis(1)));
    let mut loader = LoaderBuilder::new(src)
        .sampler(sampler())
        .batch_size(10)
        .prefetch(
            PrefetchConfig::default()
                .num_workers(1)
                .worker_queue_size(1)
                .consumer_queue_size(1)
                .lookahead(0)
                .gathers_in_flight(4),
        )
        .build()
        .unwrap();
    let mut n = 0;
    block_on(async {
        while let Some(b) = loader.next().await {
            b.unwrap();
            n += 1;
            // A slow trainer step.
            std::thread::sleep(Duration::from_millis(30));
        }
    });
    assert_eq!(n, 40);
    let s = loader.stats();
    let p50 = s.gather_quantile(0.5).unwrap();
    // Each gather takes ~1 ms; the histogram's bound is within a factor of 2 (plus thread
    // scheduling slack on a loaded host).
    assert!(
        p50 <= Duration::from_millis(8),
        "gather p50 at most {p50:?} for 1 ms gathers (worker blocked {:?})",
        s.worker_blocked
    );
}

/// A source whose gathers never finish (a hung request): its futures stay pending.
struct Hung {
    inner: MemorySource,
    dropped: Arc<AtomicUsize>,
}

struct CountDrop(Arc<AtomicUsize>);

impl Drop for CountDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Source for Hung {
    type Batch = Records;

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn item_len(&self, index: u64) -> zrecord::Result<u64> {
        self.inner.item_len(index)
    }

    fn gather(&self, indices: &[u64]) -> zrecord::Result<Records> {
        self.inner.gather(indices)
    }

    fn gather_async(self: Arc<Self>, _indices: Vec<u64>) -> SourceFuture<Records> {
        let guard = CountDrop(Arc::clone(&self.dropped));
        Box::pin(async move {
            let _guard = guard;
            futures::future::pending::<()>().await;
            unreachable!()
        })
    }
}

/// Finding (risk): `Source::gather_async`'s contract says the loader drops the future of a
/// batch it no longer needs (a dropped loader), but a worker waits in `poll_window` for its
/// first gather without watching its queue close: a dropped loader keeps its threads (and the
/// futures, and the source) forever, and `shutdown()` never resolves, though the futures are
/// cancel-safe and could simply be dropped.
#[test]
fn shutdown_drops_pending_gathers() {
    let dropped = Arc::new(AtomicUsize::new(0));
    let src = Arc::new(Hung {
        inner: MemorySource::new((0..100u32).map(|i| i.to_le_bytes().to_vec()).collect()),
        dropped: Arc::clone(&dropped),
    });
    let loader = LoaderBuilder::new(src)
        .sampler(sampler())
        .batch_size(10)
        .prefetch(
            PrefetchConfig::default()
                .num_workers(1)
                .gathers_in_flight(2),
        )
        .build()
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        block_on(loader.shutdown());
        let _ = tx.send(());
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(3)).is_ok(),
        "shutdown() did not resolve: the worker still waits on a future it could drop \
         ({} of 2 futures dropped)",
        dropped.load(Ordering::SeqCst)
    );
}

/// Finding: `DatasetSource::gather_async` moves `Arc<Self>` into a task on the read threads
/// (`GatherFuture::run_on`); a task running (or queued, cancelled but not yet dequeued) when the
/// loader shuts down still holds the source, so `shutdown()` resolves before the source is
/// released, which its documentation promises ("waits until every worker thread has exited and
/// released the source").
#[test]
fn shutdown_releases_a_dataset_source_with_gathers_in_flight() {
    use zrecord::pipeline::DatasetSource;
    use zrecord::{DType, Dataset, Field, Schema, Writer, WriterConfig};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let schema = Schema::new().field(Field::new("x", DType::U8));
    let mut w = Writer::create(&dir, &schema, WriterConfig::default()).unwrap();
    for i in 0..2000u32 {
        w.append(&[vec![i as u8; 8192]]).unwrap();
    }
    w.commit().unwrap();
    drop(w);
    let ds = Dataset::open(&dir).unwrap();
    let mut kept = 0;
    for _ in 0..10 {
        let src = Arc::new(DatasetSource::new(&ds));
        let mut loader = LoaderBuilder::new(Arc::clone(&src))
            .sampler(sampler().epochs(None))
            .batch_size(256)
            .prefetch(
                PrefetchConfig::default()
                    .num_workers(1)
                    .gathers_in_flight(32)
                    .lookahead(0),
            )
            .build()
            .unwrap();
        // Streaming: the worker keeps refilling its window as batches are taken.
        for _ in 0..40 {
            block_on(loader.next()).unwrap().unwrap();
        }
        block_on(loader.shutdown());
        if Arc::strong_count(&src) > 1 {
            kept += 1;
        }
    }
    assert_eq!(
        kept, 0,
        "in {kept} of 10 shutdowns the source was still held"
    );
}
