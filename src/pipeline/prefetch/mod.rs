//! Prefetch: N worker threads gather the batches of an index stage from a [`Source`] into bounded
//! queues, and a merge hands them to the async consumer.
//!
//! The rest of this documentation is on [`Prefetch`], where rustdoc shows it: the module is private
//! and `zrecord::pipeline` re-exports its public items.

mod config;
mod merge;
mod produce;
mod split;
mod stream;
mod window;
mod worker;

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::channel::oneshot;
use futures::stream::{FusedStream, Stream};

pub use config::{
    MergePolicy, OnError, PrefetchConfig, RetryPolicy, MAX_NUM_WORKERS, MAX_QUEUE_SIZE,
};
pub(crate) use merge::scan_best_effort;
pub(crate) use produce::{deliver, Done, Producer};
pub(crate) use split::{fresh_state, restore, Split};
pub use stream::{PrefetchStream, PrefetchStreamState};
pub(crate) use window::WorkerName;
use worker::OwnShare;
pub(crate) use worker::{wait_exits, Job, Jobs, WorkerLoop};

use super::batch::IndexBatch;
use super::queue::{self, Receiver};
use super::source::Source;
use super::stage::Stage;
use super::state::{PrefetchState, WorkerState};
use super::stats::{ConsumerCounters, Counters, LoaderStats};
use crate::Result;

/// A user function applied to every gathered batch on the worker thread (decode, collate, …).
pub type Transform<B, T> = Arc<dyn Fn(B, &IndexBatch) -> Result<T> + Send + Sync>;

/// The identity transform.
pub fn identity<B>() -> Transform<B, B> {
    Arc::new(|b, _| Ok(b))
}

/// A gathered (and transformed) batch with the index batch it came from.
#[derive(Debug, Clone)]
pub struct LoaderBatch<T> {
    /// The gathered data, after the transform.
    pub data: T,
    /// Epoch, position, record indices and padding markers.
    pub batch: IndexBatch,
}

impl<T> LoaderBatch<T> {
    /// The record indices, in order.
    pub fn indices(&self) -> Vec<u64> {
        self.batch.indices()
    }

    /// Per record, true if it is shard padding (see [`super::ShardConfig::pad_to_equal`]).
    pub fn padded(&self) -> Vec<bool> {
        self.batch.padded()
    }

    /// The epoch of the batch.
    pub fn epoch(&self) -> u64 {
        self.batch.epoch
    }

    /// The position of the batch within its epoch.
    pub fn position(&self) -> u64 {
        self.batch.position
    }
}

/// A merged item waiting for the consumer, with the checkpoint it leaves once consumed.
struct Merged<T> {
    /// The worker and its consumed count after this item; `None` for an error that is not one
    /// of the worker's items (a worker that died).
    worker: Option<(usize, u64)>,
    next_worker: usize,
    result: Result<LoaderBatch<T>>,
}

struct Worker<T> {
    /// `None` once the stream stopped at an error: the worker thread sees its queue closed.
    /// The worker's queue of `(k, result)`: its `k`-th item.
    rx: Option<Receiver<Done<T>>>,
    exit: Option<oneshot::Receiver<()>>,
    /// Items of this worker merged so far (from `base`).
    merged: u64,
    /// Items this worker runs in total (from `base`), `None` if infinite.
    count: Option<u64>,
    dead: bool,
}

impl<T> Worker<T> {
    fn active(&self) -> bool {
        !self.dead && self.count.is_none_or(|c| self.merged < c)
    }
}
/// The prefetching, merging stream.
///
/// Prefetch: N worker threads gather the batches of an index stage from a [`Source`] into bounded
/// queues, and a merge hands them to the async consumer.
///
/// # Work split
///
/// Number the items of the index stage globally, `g = epoch * epoch_len + position`. Worker `w`
/// of `N` runs the items `g = base + w + k·N` for `k = 0, 1, …` (its own copy of the stage, so no
/// coordination): it computes the [`IndexBatch`], gathers it with [`Source::gather`], applies the
/// optional transform, and pushes the result into its own queue of `worker_queue_size` items,
/// blocking (its own thread, never a runtime worker) while the queue is full.
///
/// # Errors and retries
///
/// A gather or transform that fails is tried again on the worker's thread, as
/// [`PrefetchConfig::retry`] says (3 tries in all by default, 10 ms apart, then 20 ms, …; the
/// thread sleeps, never a runtime worker). A panic is not retried, nor an error another try
/// cannot help (corruption, an index out of range, a failed object-store request, whose request
/// had its own retries: see [`PrefetchConfig::retry`]). What fails on every try
/// reaches the consumer as `Err` in the place of its batch, and then [`PrefetchConfig::on_error`]
/// decides:
///
/// - [`OnError::Stop`] (default): the stream ends after the error. The failed batch is not
///   consumed: [`Prefetch::state`] still points at it, so a stream resumed from that checkpoint
///   tries it first.
/// - [`OnError::Skip`]: the failed batch counts as consumed and the stream goes on; a resume
///   does not try it again, so the batch is lost for this pass.
///
/// # Merge (TinyGrad4 semantics)
///
/// - [`MergePolicy::Strict`] (default): round-robin in worker order `0..N`, exhausted workers
///   skipped. Because of the split above, the merged order is exactly the global order: the same
///   stream as a single sequential pass over the stage, whatever the worker count.
/// - [`MergePolicy::BestEffort`]: scans the workers (from the one after the last taken) without
///   waiting and takes the first ready item, but never from a worker whose merged items would
///   then be more than `max_lead` ahead of the items *consumed* from the slowest active worker
///   (so the consumer never sees one worker more than `max_lead` items ahead of another, however
///   large the consumer buffer); after `max_skips_per_round` workers found empty in one scan it
///   stops scanning and waits. Not deterministic.
///
/// Merged items wait for the consumer in a buffer of `consumer_queue_size` items. Memory is
/// bounded end to end: at most `N · (worker_queue_size + gathers_in_flight) +
/// consumer_queue_size` batches exist at any time (`gathers_in_flight` is 1 unless set).
///
/// # Checkpoint
///
/// [`Prefetch::state`] is taken at consumption: per worker, the number of its items consumed
/// and its next position; and the next worker of the merge. A batch that failed under
/// [`OnError::Stop`] is not consumed. Resuming restarts every worker at
/// its next position and discards whatever was prefetched but not consumed, so the resumed
/// stream continues exactly after the last consumed item (strict) or loses and repeats nothing
/// (best effort). A strict checkpoint can even be resumed with another worker count.
///
/// # Shutdown
///
/// Dropping the [`Prefetch`] closes the queues: a worker blocked on a full queue wakes and exits,
/// a worker in the middle of a gather exits when the gather returns. [`Prefetch::shutdown`]
/// waits for that.
#[must_use = "a prefetch does nothing unless polled"]
pub struct Prefetch<T> {
    workers: Vec<Worker<T>>,
    split: Split,
    policy: MergePolicy,
    consumer_queue_size: usize,
    on_error: OnError,
    ready: VecDeque<Merged<T>>,
    merge_next: usize,
    merge_done: bool,
    state: PrefetchState,
    max_observed_lead: u64,
    /// What the workers count as they go, and what the consumer side counts.
    counters: Arc<Counters>,
    consumer: ConsumerCounters,
    /// Ends the source's lookahead session when the stream goes away.
    end_lookahead: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl<T> Drop for Prefetch<T> {
    fn drop(&mut self) {
        if let Some(end) = self.end_lookahead.take() {
            end();
        }
    }
}

/// Lookahead sessions, one per [`Prefetch`].
static SESSIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

// Nothing in a `Prefetch` is structurally pinned.
impl<T> Unpin for Prefetch<T> {}

impl<T> fmt::Debug for Prefetch<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prefetch")
            .field("num_workers", &self.workers.len())
            .field("policy", &self.policy)
            .field("ready", &self.ready.len())
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static> Prefetch<T> {
    /// Starts the workers over `stage` from its first item.
    ///
    /// # Errors
    /// [`crate::Error::InvalidConfig`] for an invalid `config`; [`crate::Error::ThreadSpawn`] if a
    /// thread cannot be spawned.
    pub fn new<St, Src>(
        stage: St,
        source: Arc<Src>,
        transform: Transform<Src::Batch, T>,
        config: PrefetchConfig,
    ) -> Result<Self>
    where
        St: Stage<Item = IndexBatch>,
        Src: Source,
    {
        Self::start(stage, source, transform, config, None)
    }

    /// Starts the workers at the checkpoint `state`, taken from a [`Prefetch`] over the same
    /// stage. Items prefetched but not consumed before the checkpoint are produced again.
    ///
    /// With another worker count than the checkpoint's, only a checkpoint whose consumed items
    /// form a prefix of the global order (always true under the strict merge) can be resumed.
    ///
    /// # Errors
    /// [`crate::Error::ResumeMismatch`] if `state` does not fit the stage or the worker count;
    /// otherwise as [`Prefetch::new`].
    pub fn resume<St, Src>(
        stage: St,
        source: Arc<Src>,
        transform: Transform<Src::Batch, T>,
        config: PrefetchConfig,
        state: &PrefetchState,
    ) -> Result<Self>
    where
        St: Stage<Item = IndexBatch>,
        Src: Source,
    {
        Self::start(stage, source, transform, config, Some(state))
    }

    fn start<St, Src>(
        stage: St,
        source: Arc<Src>,
        transform: Transform<Src::Batch, T>,
        config: PrefetchConfig,
        resume: Option<&PrefetchState>,
    ) -> Result<Self>
    where
        St: Stage<Item = IndexBatch>,
        Src: Source,
    {
        config.validate()?;
        let n = config.num_workers as u64;
        let mut split = Split::of(&stage, n);
        let (consumed, next_worker) = match resume {
            None => (vec![0; config.num_workers], 0),
            Some(s) => restore(s, &mut split)?,
        };
        let session = SESSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let ender = Arc::clone(&source);
        let end_lookahead: Box<dyn FnOnce() + Send + Sync> =
            Box::new(move || ender.end_lookahead(session));
        let counters = Arc::new(Counters::default());
        let mut workers = Vec::with_capacity(config.num_workers);
        for (w, &start_k) in consumed.iter().enumerate() {
            let (tx, rx) = queue::bounded(config.worker_queue_size);
            let (exit_tx, exit_rx) = oneshot::channel();
            let jobs = OwnShare {
                stage: stage.clone(),
                source: Arc::clone(&source),
                counters: Arc::clone(&counters),
                lookahead: config.lookahead as u64,
                session,
                ahead: VecDeque::new(),
                split: split.clone(),
                w: w as u64,
                k: start_k,
                issue: Some(start_k),
            };
            let worker = WorkerLoop {
                jobs,
                name: WorkerName {
                    what: "prefetch worker",
                    w: w as u64,
                },
                source: Arc::clone(&source),
                transform: Arc::clone(&transform),
                retry: config.retry,
                gathers_in_flight: config.gathers_in_flight,
                tx,
                exit: exit_tx,
                counters: Arc::clone(&counters),
            };
            worker.spawn(format!("zrecord-prefetch-{w}"), "a prefetch worker")?;
            workers.push(Worker {
                rx: Some(rx),
                exit: Some(exit_rx),
                merged: start_k,
                count: split.count(w as u64),
                dead: false,
            });
        }
        let state = PrefetchState {
            num_workers: n,
            base: split.base(),
            next_worker: next_worker as u64,
            workers: consumed
                .iter()
                .enumerate()
                .map(|(w, &c)| WorkerState {
                    consumed: c,
                    next: split.next(w as u64, c),
                })
                .collect(),
        };
        Ok(Self {
            workers,
            split,
            policy: config.merge,
            consumer_queue_size: config.consumer_queue_size,
            on_error: config.on_error,
            ready: VecDeque::with_capacity(config.consumer_queue_size),
            merge_next: next_worker,
            merge_done: false,
            state,
            max_observed_lead: 0,
            counters,
            consumer: ConsumerCounters::default(),
            end_lookahead: Some(end_lookahead),
        })
    }
}
impl<T> Prefetch<T> {
    /// The checkpoint after the last consumed item.
    pub fn state(&self) -> PrefetchState {
        self.state.clone()
    }

    /// The largest lead (items consumed from one worker minus items consumed from the slowest
    /// worker with items left) seen after any consumed item so far. A diagnostic: under
    /// [`MergePolicy::BestEffort`] it never exceeds `max_lead`.
    pub fn max_observed_lead(&self) -> u64 {
        self.max_observed_lead
    }

    /// A snapshot of what the loader is doing: queue depths, gathers in flight, the lead, time
    /// per stage, the gather latency histogram, and who waits for whom (see [`LoaderStats`]).
    /// Cheap: a few atomic loads and one lock per worker queue.
    pub fn stats(&self) -> LoaderStats {
        let depths = self
            .workers
            .iter()
            .map(|w| w.rx.as_ref().map_or(0, Receiver::len))
            .collect();
        let lead = self.min_unconsumed().map_or(0, |min| {
            self.workers
                .iter()
                .zip(&self.state.workers)
                .filter(|(w, _)| !w.dead)
                .map(|(_, ws)| ws.consumed.saturating_sub(min))
                .max()
                .unwrap_or(0)
        });
        LoaderStats::new(
            &self.counters,
            &self.consumer,
            depths,
            self.ready.len(),
            (lead, self.max_observed_lead),
        )
    }

    /// Stops the workers and waits until every worker thread has exited and released the
    /// source. Dropping the stream stops them too, without waiting.
    ///
    /// # Cancel safety
    /// Dropping the future before it completes leaves the workers stopping on their own; nothing
    /// else is lost (the stream is consumed either way).
    pub async fn shutdown(mut self) {
        let exits: Vec<_> = self
            .workers
            .iter_mut()
            .filter_map(|w| w.exit.take())
            .collect();
        drop(self);
        wait_exits(exits).await;
    }
}

impl<T> Stream for Prefetch<T> {
    type Item = Result<LoaderBatch<T>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        // Fill the consumer buffer with whatever is ready. Items only move between buffers the
        // stream owns, so a dropped poll loses nothing.
        while this.ready.len() < this.consumer_queue_size && !this.merge_done {
            match this.merge_one(cx) {
                Poll::Ready(Some(m)) => this.ready.push_back(m),
                Poll::Ready(None) => this.merge_done = true,
                Poll::Pending => break,
            }
        }
        let polled = match this.ready.pop_front() {
            Some(m) if m.result.is_err() && this.on_error == OnError::Stop => {
                this.stop();
                Poll::Ready(Some(m.result))
            }
            Some(m) => {
                this.consume(&m);
                if let Ok(b) = &m.result {
                    this.consumer.batches = this.consumer.batches.saturating_add(1);
                    this.consumer.records = this
                        .consumer
                        .records
                        .saturating_add(b.batch.samples.len() as u64);
                }
                Poll::Ready(Some(m.result))
            }
            None if this.merge_done => Poll::Ready(None),
            None => Poll::Pending,
        };
        match polled {
            Poll::Pending => this.consumer.pending(),
            Poll::Ready(_) => this.consumer.ready(),
        }
        polled
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self.remaining() {
            Some(r) => {
                let r = usize::try_from(r).unwrap_or(usize::MAX);
                (r, Some(r))
            }
            None => (usize::MAX, None),
        }
    }
}

impl<T> FusedStream for Prefetch<T> {
    fn is_terminated(&self) -> bool {
        self.merge_done && self.ready.is_empty()
    }
}
#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use std::sync::mpsc;
    use std::sync::Mutex;

    use futures::executor::block_on;
    use futures::task::noop_waker;
    use futures::StreamExt;

    use super::*;
    use crate::pipeline::{LoaderBuilder, MemorySource, SamplerConfig, SamplerMode};

    /// A source that reports the first index of every gather it starts.
    struct Reporting {
        inner: MemorySource,
        started: Mutex<mpsc::Sender<u64>>,
    }

    impl Source for Reporting {
        type Batch = Vec<Vec<u8>>;

        fn len(&self) -> u64 {
            self.inner.len()
        }

        fn item_len(&self, index: u64) -> Result<u64> {
            self.inner.item_len(index)
        }

        fn gather(&self, indices: &[u64]) -> Result<Self::Batch> {
            let _ = self.started.lock().unwrap().send(indices[0]);
            self.inner.gather(indices)
        }
    }

    /// Every worker's merged count minus the least consumed count of the workers with items left
    /// (nothing once every item is consumed).
    fn merged_leads<T>(p: &Prefetch<T>) -> Vec<u64> {
        let Some(min) = p
            .state
            .workers
            .iter()
            .filter(|w| w.next.is_some())
            .map(|w| w.consumed)
            .min()
        else {
            return Vec::new();
        };
        p.workers
            .iter()
            .map(|w| w.merged.saturating_sub(min))
            .collect()
    }

    #[test]
    fn best_effort_merges_no_further_than_max_lead_past_the_consumed_items() {
        let (n, workers, queue, max_lead) = (60u64, 2u64, 4u64, 1u64);
        let (tx, started) = mpsc::channel();
        let src = Arc::new(Reporting {
            inner: MemorySource::new((0..n).map(|i| vec![i as u8]).collect()),
            started: Mutex::new(tx),
        });
        let chain = LoaderBuilder::new(Arc::clone(&src))
            .sampler(
                SamplerConfig::default()
                    .mode(SamplerMode::Sequential)
                    .epochs(Some(1)),
            )
            .batch_size(1)
            .index_chain()
            .unwrap();
        let config = PrefetchConfig::default()
            .num_workers(workers as usize)
            .worker_queue_size(queue as usize)
            .consumer_queue_size(32)
            .merge(MergePolicy::BestEffort {
                max_lead,
                max_skips_per_round: 2,
            });
        let mut p = Prefetch::new(chain, src, identity(), config).unwrap();
        // Worker w gathers record w + 2k as its k-th item: once both have started item `queue`,
        // both queues are full, and one poll finds everything ready.
        let mut pending: Vec<u64> = (0..workers).map(|w| w + workers * queue).collect();
        while !pending.is_empty() {
            let i = started.recv().unwrap();
            pending.retain(|&p| p != i);
        }
        let waker = noop_waker();
        let first = Pin::new(&mut p).poll_next(&mut Context::from_waker(&waker));
        assert!(matches!(first, Poll::Ready(Some(Ok(_)))));
        let mut consumed = 1;
        loop {
            let leads = merged_leads(&p);
            assert!(
                leads.iter().all(|&l| l <= max_lead),
                "after {consumed} items, merged minus least consumed per worker: {leads:?}"
            );
            assert!(p.max_observed_lead() <= max_lead);
            match block_on(p.next()) {
                Some(b) => b.map(|_| consumed += 1).unwrap(),
                None => break,
            }
        }
        assert_eq!(consumed, n);
    }
}
