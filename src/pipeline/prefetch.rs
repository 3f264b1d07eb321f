//! Prefetch: N worker threads gather the batches of an index stage from a [`Source`] into bounded
//! queues, and a merge hands them to the async consumer.
//!
//! The rest of this documentation is on [`Prefetch`], where rustdoc shows it: the module is private
//! and `zrecord::pipeline` re-exports its public items.

use std::collections::VecDeque;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::channel::oneshot;
use futures::stream::{FusedStream, Stream};
use serde::{Deserialize, Serialize};

use super::batch::IndexBatch;
use super::queue::{self, Receiver, Sender};
use super::source::Source;
use super::stage::{Layout, Stage};
use super::state::{Position, PrefetchState, WorkerState};
use super::stats::{ConsumerCounters, Counters, LoaderStats};
use crate::{Error, Result};

/// How the items of the workers are merged into one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum MergePolicy {
    /// Round-robin in worker order, exhausted workers skipped: deterministic, and equal to a
    /// sequential pass. The default.
    #[default]
    Strict,
    /// The first ready item, within a bounded lead. Not deterministic across runs; resume still
    /// loses and repeats nothing.
    BestEffort {
        /// No worker is ever more than this many items ahead of the slowest active worker,
        /// counted in consumed items: a worker is merged from only while its merged items are
        /// fewer than `max_lead` past the consumed items of the slowest active worker. At
        /// least 1.
        max_lead: u64,
        /// Number of empty workers one scan passes over before it waits (0: wait for the first
        /// eligible worker, like strict but lead-bounded).
        max_skips_per_round: u64,
    },
}

/// How often a worker tries a failing batch (gather and transform) before it hands the error to
/// the consumer, and how long it waits between tries.
///
/// Built from [`RetryPolicy::default`] with chainable setters:
///
/// ```
/// use std::time::Duration;
/// use zrecord::pipeline::RetryPolicy;
///
/// let policy = RetryPolicy::default().attempts(5).backoff(Duration::from_millis(50));
/// assert_eq!(policy.max_backoff, Duration::from_secs(1));
/// assert_eq!(RetryPolicy::none().attempts, 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Tries in all, the first included: 1 never retries. At least 1. Default: 3.
    pub attempts: u32,
    /// The wait before the second try; each later wait doubles, up to `max_backoff`.
    /// Default: 10 ms.
    pub backoff: Duration,
    /// The longest wait between two tries. Default: 1 s.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    /// 3 tries, 10 ms then 20 ms apart (doubling, at most 1 s).
    fn default() -> Self {
        Self {
            attempts: 3,
            backoff: Duration::from_millis(10),
            max_backoff: Duration::from_secs(1),
        }
    }
}

impl RetryPolicy {
    /// One try, no retry.
    #[must_use]
    pub fn none() -> Self {
        Self::default().attempts(1)
    }

    /// Sets the number of tries in all, at least 1. Default 3.
    #[must_use]
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts;
        self
    }

    /// Sets the wait before the second try (later waits double). Default 10 ms.
    #[must_use]
    pub fn backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }

    /// Sets the longest wait between two tries. Default 1 s.
    #[must_use]
    pub fn max_backoff(mut self, max_backoff: Duration) -> Self {
        self.max_backoff = max_backoff;
        self
    }
}

/// What the stream does after a batch that failed (on every try of the [`RetryPolicy`]) was
/// returned as `Err` in its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum OnError {
    /// The stream ends (`None`) after the error, and the checkpoint still points at the failed
    /// batch: a stream resumed from it tries that batch first. The default.
    #[default]
    Stop,
    /// The stream goes on with the next batch, and the failed batch counts as consumed: a stream
    /// resumed from a later checkpoint does not try it again, so it is lost for this pass.
    /// An explicit opt-in for training that tolerates missing batches.
    Skip,
}

/// The most prefetch workers (threads) a [`PrefetchConfig`] may ask for.
pub const MAX_NUM_WORKERS: usize = 1024;

/// The largest worker or consumer queue a [`PrefetchConfig`] may ask for, in batches.
pub const MAX_QUEUE_SIZE: usize = 1 << 16;

/// Configuration of a [`Prefetch`].
///
/// Built from [`PrefetchConfig::default`] with chainable setters, so options added later do not
/// break callers:
///
/// ```
/// use zrecord::pipeline::{MergePolicy, OnError, PrefetchConfig};
///
/// let config = PrefetchConfig::default().num_workers(4).worker_queue_size(3);
/// assert_eq!(config.consumer_queue_size, 2);
/// assert_eq!(config.merge, MergePolicy::Strict);
/// assert_eq!(config.retry.attempts, 3);
/// assert_eq!(config.on_error, OnError::Stop);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PrefetchConfig {
    /// Number of worker threads, 1 to [`MAX_NUM_WORKERS`]. Default: 2.
    pub num_workers: usize,
    /// Capacity of each worker's queue, in batches, 1 to [`MAX_QUEUE_SIZE`]. Default: 2.
    pub worker_queue_size: usize,
    /// Capacity of the buffer of merged batches waiting for the consumer, 1 to
    /// [`MAX_QUEUE_SIZE`]. Default: 2.
    pub consumer_queue_size: usize,
    /// The merge. Default: [`MergePolicy::Strict`].
    pub merge: MergePolicy,
    /// How a worker retries a failing batch. Default: [`RetryPolicy::default`] (3 tries, 10 ms
    /// backoff doubling up to 1 s).
    #[serde(default)]
    pub retry: RetryPolicy,
    /// What the stream does after a failed batch. Default: [`OnError::Stop`].
    #[serde(default)]
    pub on_error: OnError,
    /// Batches each worker announces ahead of the one it gathers ([`Source::lookahead`]), so a
    /// source with latency to hide has their reads in flight while earlier batches are
    /// gathered and consumed; 0 to [`MAX_QUEUE_SIZE`], 0 announces nothing. Each backend
    /// decides what to do with them: a local dataset's read window starts the reads of cold
    /// batches (warm ones are left alone; docs/ARCHITECTURE.md, *The read window*); a dataset
    /// on an object store starts range requests only if
    /// [`RemoteConfig::lookahead_bytes`](crate::remote::RemoteConfig::lookahead_bytes) is set
    /// (off by default: on the measured store they cost throughput, docs/BENCHMARKS.md).
    /// Default: 8 (cold 4 KiB and 64 KiB records on a local disk: docs/BENCHMARKS.md).
    #[serde(default = "default_lookahead")]
    pub lookahead: usize,
    /// Gathers each worker keeps in flight, 1 to [`MAX_QUEUE_SIZE`]. Default: 1, the blocking
    /// path: the worker calls [`Source::gather`] and waits. Above 1 the worker starts the
    /// gathers of its next batches with [`Source::gather_async`] and takes their results in
    /// order, so a source with latency (a dataset on an object store) has that many batches per
    /// worker reading at once, on no more threads. Batches are delivered, merged and
    /// checkpointed exactly as with 1: a resume redoes the gathers that were in flight.
    #[serde(default = "default_gathers_in_flight")]
    pub gathers_in_flight: usize,
}

fn default_lookahead() -> usize {
    8
}

fn default_gathers_in_flight() -> usize {
    1
}

impl Default for PrefetchConfig {
    /// 2 workers, worker queues of 2 batches, a consumer buffer of 2 batches, strict merge,
    /// 3 tries per batch, stop at a failed batch.
    fn default() -> Self {
        Self {
            num_workers: 2,
            worker_queue_size: 2,
            consumer_queue_size: 2,
            merge: MergePolicy::Strict,
            retry: RetryPolicy::default(),
            on_error: OnError::Stop,
            lookahead: default_lookahead(),
            gathers_in_flight: default_gathers_in_flight(),
        }
    }
}

impl PrefetchConfig {
    /// Sets the number of worker threads, at least 1. Default 2.
    #[must_use]
    pub fn num_workers(mut self, num_workers: usize) -> Self {
        self.num_workers = num_workers;
        self
    }

    /// Sets the capacity of each worker's queue, in batches, at least 1. Default 2.
    #[must_use]
    pub fn worker_queue_size(mut self, size: usize) -> Self {
        self.worker_queue_size = size;
        self
    }

    /// Sets the capacity of the buffer of merged batches waiting for the consumer, at least 1.
    /// Default 2.
    #[must_use]
    pub fn consumer_queue_size(mut self, size: usize) -> Self {
        self.consumer_queue_size = size;
        self
    }

    /// Sets the merge. Default [`MergePolicy::Strict`].
    #[must_use]
    pub fn merge(mut self, merge: MergePolicy) -> Self {
        self.merge = merge;
        self
    }

    /// Sets how a worker retries a failing batch. Default [`RetryPolicy::default`] (3 tries).
    #[must_use]
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sets what the stream does after a failed batch. Default [`OnError::Stop`].
    #[must_use]
    pub fn on_error(mut self, on_error: OnError) -> Self {
        self.on_error = on_error;
        self
    }

    /// Sets the batches each worker announces ahead of the one it gathers. Default 8.
    #[must_use]
    pub fn lookahead(mut self, batches: usize) -> Self {
        self.lookahead = batches;
        self
    }

    /// Sets the gathers each worker keeps in flight (1 to [`MAX_QUEUE_SIZE`]). Default 1.
    #[must_use]
    pub fn gathers_in_flight(mut self, gathers: usize) -> Self {
        self.gathers_in_flight = gathers;
        self
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |reason: String| Err(Error::InvalidConfig { reason });
        if self.num_workers == 0 || self.num_workers > MAX_NUM_WORKERS {
            return bad(format!(
                "prefetch: num_workers must be 1 to {MAX_NUM_WORKERS}, not {}",
                self.num_workers
            ));
        }
        let queue_ok = |q: usize| (1..=MAX_QUEUE_SIZE).contains(&q);
        if self.lookahead > MAX_QUEUE_SIZE {
            return bad(format!(
                "prefetch: lookahead must be 0 to {MAX_QUEUE_SIZE} batches, not {}",
                self.lookahead
            ));
        }
        if !queue_ok(self.gathers_in_flight) {
            return bad(format!(
                "prefetch: gathers_in_flight must be 1 to {MAX_QUEUE_SIZE}, not {}",
                self.gathers_in_flight
            ));
        }
        if !queue_ok(self.worker_queue_size) || !queue_ok(self.consumer_queue_size) {
            return bad(format!(
                "prefetch: queue sizes must be 1 to {MAX_QUEUE_SIZE} (worker_queue_size {}, \
                 consumer_queue_size {})",
                self.worker_queue_size, self.consumer_queue_size
            ));
        }
        if let MergePolicy::BestEffort { max_lead: 0, .. } = self.merge {
            return bad("prefetch: best-effort max_lead must be at least 1".into());
        }
        if self.retry.attempts == 0 {
            return bad("prefetch: retry attempts must be at least 1 (1: no retry)".into());
        }
        Ok(())
    }
}

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

/// What a worker pushes: its `k`-th item.
struct WorkerItem<T> {
    k: u64,
    result: Result<LoaderBatch<T>>,
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
    rx: Option<Receiver<WorkerItem<T>>>,
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

/// The geometry of the work split.
#[derive(Debug, Clone)]
pub(crate) struct Split {
    num_workers: u64,
    base: u64,
    layout: Layout,
    total: Option<u64>,
}

impl Split {
    /// The split of `stage` over `num_workers` workers from its first item.
    pub(crate) fn of<St: Stage>(stage: &St, num_workers: u64) -> Self {
        let layout = Layout::of(stage);
        Self {
            num_workers,
            base: 0,
            total: layout.total(),
            layout,
        }
    }

    /// Global position of worker 0's first item.
    pub(crate) fn base(&self) -> u64 {
        self.base
    }

    /// Number of workers.
    pub(crate) fn num_workers(&self) -> u64 {
        self.num_workers
    }

    /// Global position of worker `w`'s `k`-th item, `None` past `u64`.
    pub(crate) fn global(&self, w: u64, k: u64) -> Option<u64> {
        k.checked_mul(self.num_workers)?
            .checked_add(w)?
            .checked_add(self.base)
    }

    /// Number of items of worker `w`, `None` if infinite.
    pub(crate) fn count(&self, w: u64) -> Option<u64> {
        let total = self.total?;
        let first = self.base.saturating_add(w);
        Some(if total > first {
            (total - first).div_ceil(self.num_workers)
        } else {
            0
        })
    }

    fn position(&self, g: u64) -> Position {
        self.layout.position(g)
    }

    /// Worker `w`'s position after `consumed` items, `None` if it has none left.
    fn next(&self, w: u64, consumed: u64) -> Option<Position> {
        if self.count(w).is_some_and(|c| consumed >= c) {
            return None;
        }
        self.global(w, consumed).map(|g| self.position(g))
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
/// thread sleeps, never a runtime worker). A panic is not retried. What fails on every try
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
    /// [`Error::InvalidConfig`] for an invalid `config`; [`Error::Io`] if a thread cannot be
    /// spawned.
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
    /// [`Error::ResumeMismatch`] if `state` does not fit the stage or the worker count;
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
            let job = WorkerJob {
                stage: stage.clone(),
                source: Arc::clone(&source),
                transform: Arc::clone(&transform),
                retry: config.retry,
                lookahead: config.lookahead as u64,
                session,
                ahead: VecDeque::new(),
                split: split.clone(),
                w: w as u64,
                k: start_k,
                tx,
                exit: exit_tx,
                counters: Arc::clone(&counters),
                gathers_in_flight: config.gathers_in_flight,
            };
            std::thread::Builder::new()
                .name(format!("zrecord-prefetch-{w}"))
                .spawn(move || job.run())
                .map_err(|e| Error::ThreadSpawn {
                    what: "a prefetch worker",
                    reason: e.to_string(),
                })?;
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
            base: split.base,
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

/// The checkpoint of a prefetch over `stage` with `num_workers` workers that consumed nothing.
pub(crate) fn fresh_state<St: Stage>(stage: &St, num_workers: usize) -> PrefetchState {
    let n = num_workers as u64;
    let split = Split::of(stage, n);
    PrefetchState {
        num_workers: n,
        base: 0,
        next_worker: 0,
        workers: (0..n)
            .map(|w| WorkerState {
                consumed: 0,
                next: split.next(w, 0),
            })
            .collect(),
    }
}

/// Checks `s` against the split and returns the per-worker consumed counts and the next worker,
/// rebasing the split when the worker count changed.
///
/// Every number in `s` comes from a checkpoint (JSON a user may have edited or damaged), so each
/// is bounded here, before any arithmetic: the worker list matches `num_workers` (at least 1) and
/// `next_worker` is one of them; no worker consumed more than it has; every worker that has items
/// left has a next global position that fits in a `u64` with its consumed count below
/// `u64::MAX`; and a rebased position is within the stage. Anything else is
/// [`Error::ResumeMismatch`].
pub(crate) fn restore(s: &PrefetchState, split: &mut Split) -> Result<(Vec<u64>, usize)> {
    let mismatch = |reason: String| Error::ResumeMismatch { reason };
    let n = split.num_workers;
    let total = split.total;
    if s.num_workers == 0
        || s.workers.len() as u64 != s.num_workers
        || s.next_worker >= s.num_workers
    {
        return Err(mismatch(format!(
            "malformed prefetch state: {} workers listed, next worker {}, for {} workers",
            s.workers.len(),
            s.next_worker,
            s.num_workers
        )));
    }
    if total.is_some_and(|t| s.base > t) {
        return Err(mismatch(format!(
            "the checkpoint's base is global position {}, past the stage's {} items",
            s.base,
            total.unwrap_or(0)
        )));
    }
    let consumed = if s.num_workers != n {
        let end = s.prefix_end().ok_or_else(|| {
            mismatch(format!(
                "the checkpoint was taken with {} workers and its consumed items are not a \
                 prefix of the global order (a best-effort merge, or a damaged checkpoint); \
                 resume it with {} workers, not {n}",
                s.num_workers, s.num_workers
            ))
        })?;
        if total.is_some_and(|t| end > t) {
            return Err(mismatch(format!(
                "the checkpoint is at global position {end}, past the stage's {} items",
                total.unwrap_or(0)
            )));
        }
        split.base = end;
        vec![0; usize::try_from(n).unwrap_or(0)]
    } else {
        split.base = s.base;
        for (w, ws) in s.workers.iter().enumerate() {
            let w = w as u64;
            if split.count(w).is_some_and(|c| ws.consumed > c) {
                return Err(mismatch(format!(
                    "worker {w} consumed {} items but has only {} in this configuration",
                    ws.consumed,
                    split.count(w).unwrap_or(0)
                )));
            }
            let expected = split.next(w, ws.consumed);
            if ws.next != expected {
                return Err(mismatch(format!(
                    "worker {w}: checkpoint says its next item is {:?}, this configuration puts \
                     it at {expected:?}",
                    ws.next
                )));
            }
        }
        s.workers.iter().map(|w| w.consumed).collect()
    };
    for (w, &k) in consumed.iter().enumerate() {
        let w = w as u64;
        let has_more = split.count(w).is_none_or(|c| k < c);
        if has_more && (k == u64::MAX || split.global(w, k).is_none()) {
            return Err(mismatch(format!(
                "worker {w}'s next item (item {k} from global position {}, every {n}) is past \
                 the last global position a u64 holds",
                split.base
            )));
        }
    }
    let next_worker = if s.num_workers == n {
        usize::try_from(s.next_worker).unwrap_or(0)
    } else {
        0
    };
    Ok((consumed, next_worker))
}

/// Everything one worker thread owns.
struct WorkerJob<St, Src: Source, T> {
    stage: St,
    source: Arc<Src>,
    transform: Transform<Src::Batch, T>,
    retry: RetryPolicy,
    /// Batches announced ahead, and the loader's lookahead session.
    lookahead: u64,
    session: u64,
    /// This worker's next batches, computed (and announced) ahead: `(k, batch)`.
    ahead: VecDeque<(u64, IndexBatch)>,
    split: Split,
    w: u64,
    k: u64,
    tx: Sender<WorkerItem<T>>,
    exit: oneshot::Sender<()>,
    counters: Arc<Counters>,
    gathers_in_flight: usize,
}

impl<St, Src, T> WorkerJob<St, Src, T>
where
    St: Stage<Item = IndexBatch>,
    Src: Source,
    T: Send + 'static,
{
    fn run(mut self) {
        if self.gathers_in_flight > 1 {
            self.run_async();
        } else {
            self.run_blocking();
        }
        let Self {
            stage,
            source,
            transform,
            tx,
            exit,
            ..
        } = self;
        // Release the source before announcing the exit: after `shutdown` resolves, the worker
        // holds nothing.
        drop((stage, source, transform, tx));
        drop(exit);
    }

    fn run_blocking(&mut self) {
        loop {
            if self.tx.is_closed() || self.split.count(self.w).is_some_and(|c| self.k >= c) {
                break;
            }
            let Some(g) = self.split.global(self.w, self.k) else {
                break;
            };
            let pos = self.split.position(g);
            let span = tracing::trace_span!(
                "zrecord.batch",
                worker = self.w,
                epoch = pos.epoch,
                position = pos.position
            );
            let _entered = span.enter();
            self.announce();
            let result = self.produce_with_retries(pos);
            if !self.deliver(result) {
                break;
            }
        }
    }

    /// Pushes the item of batch `k` and moves on to the next; false if the worker is done (the
    /// stream was dropped, or past item `u64::MAX`, where there is no global position: the
    /// merge then reports the worker as exited rather than seeing the last item twice).
    fn deliver(&mut self, result: Result<LoaderBatch<T>>) -> bool {
        if let Ok(b) = &result {
            self.counters.produced(b.batch.samples.len());
        }
        let item = WorkerItem { k: self.k, result };
        let pushed = std::time::Instant::now();
        if self.tx.push(item).is_err() {
            return false;
        }
        self.counters.blocked(pushed);
        match self.k.checked_add(1) {
            Some(k) => {
                self.k = k;
                true
            }
            None => false,
        }
    }

    /// The worker with up to `gathers_in_flight` gathers started ahead ([`Source::gather_async`]),
    /// their results taken in order: the same items as [`WorkerJob::run_blocking`], each
    /// retried in its place (a failed index computation as well as a failed gather), a panic
    /// reported as the batch's error. A dropped stream ends the worker at once, dropping the
    /// futures in flight, even those that would never finish.
    fn run_async(&mut self) {
        let mut window: VecDeque<Pending<Src::Batch>> = VecDeque::new();
        let mut issue = self.k;
        loop {
            if self.tx.is_closed() {
                break;
            }
            self.announce();
            while window.len() < self.gathers_in_flight {
                if self.split.count(self.w).is_some_and(|c| issue >= c) {
                    break;
                }
                let Some(g) = self.split.global(self.w, issue) else {
                    break;
                };
                let mut pending = Pending {
                    k: issue,
                    pos: self.split.position(g),
                    batch: None,
                    future: None,
                    result: None,
                    tries: 0,
                    pending_since: None,
                };
                self.start(&mut pending);
                window.push_back(pending);
                let Some(next) = issue.checked_add(1) else {
                    break;
                };
                issue = next;
            }
            if window.is_empty() || !self.poll_window(&mut window) {
                break;
            }
            let Some(head) = window.pop_front() else {
                break;
            };
            let Some(result) = self.finish(head, &mut window) else {
                break;
            };
            if !self.deliver(result) {
                break;
            }
        }
    }

    /// Starts (or starts again) `p`: its index batch if it has none yet (from the lookahead's
    /// if computed there), then its gather. A failure or a panic becomes `p`'s result.
    fn start(&mut self, p: &mut Pending<Src::Batch>) {
        p.tries = p.tries.saturating_add(1);
        p.result = None;
        p.future = None;
        p.pending_since = None;
        if p.batch.is_none() {
            let ahead = self
                .ahead
                .iter()
                .find(|(k, _)| *k == p.k)
                .map(|(_, b)| b.clone());
            let start = std::time::Instant::now();
            let computed = match ahead {
                Some(b) => Ok(Ok(b)),
                None => catch_unwind(AssertUnwindSafe(|| {
                    self.stage.get(p.pos.epoch, p.pos.position)
                })),
            };
            self.counters.index_time(start);
            match computed {
                Ok(Ok(b)) => p.batch = Some(b),
                Ok(Err(e)) => {
                    p.result = Some(Err(e));
                    return;
                }
                Err(panic) => {
                    p.result = Some(Err(panicked(self.w, p.pos, panic.as_ref())));
                    return;
                }
            }
        }
        let Some(batch) = &p.batch else {
            return;
        };
        let indices = batch.indices();
        let in_flight = self.counters.gather_started(indices.len());
        let source = Arc::clone(&self.source);
        match catch_unwind(AssertUnwindSafe(|| source.gather_async(indices))) {
            Ok(future) => p.future = Some((future, in_flight, Arc::default())),
            Err(panic) => p.result = Some(Err(panicked(self.w, p.pos, panic.as_ref()))),
        }
    }

    /// Polls every gather of the window until the first one is done (the others make progress
    /// meanwhile, whatever kind of future the source returns); false if the stream was dropped
    /// first.
    fn poll_window(&self, window: &mut VecDeque<Pending<Src::Batch>>) -> bool {
        let w = self.w;
        let tx = &self.tx;
        futures::executor::block_on(std::future::poll_fn(|cx| {
            if tx.poll_closed(cx).is_ready() {
                return Poll::Ready(false);
            }
            for p in window.iter_mut() {
                let Some((future, _, signal)) = &mut p.future else {
                    continue;
                };
                // Each gather gets a waker of its own, which notes when it last woke the worker:
                // the gather's end, even if the worker only sees it after a blocked push.
                signal.outer.register(cx.waker());
                let polled_at = std::time::Instant::now();
                let waker = futures::task::waker_ref(signal);
                let mut own = Context::from_waker(&waker);
                let polled = catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(&mut own)));
                let done = match polled {
                    Ok(Poll::Pending) => {
                        p.pending_since = Some(polled_at);
                        continue;
                    }
                    Ok(Poll::Ready(r)) => r,
                    Err(panic) => Err(panicked(w, p.pos, panic.as_ref())),
                };
                if let Some((_, in_flight, signal)) = p.future.take() {
                    // A wake-up after the last poll that found it pending is when it finished;
                    // without one, it finished within this poll.
                    let end = signal
                        .last_wake()
                        .filter(|&woke| p.pending_since.is_some_and(|since| woke >= since))
                        .unwrap_or_else(std::time::Instant::now);
                    in_flight.ended_at(end);
                }
                p.result = Some(done);
            }
            match window.front() {
                Some(p) if p.future.is_some() => Poll::Pending,
                _ => Poll::Ready(true),
            }
        }))
    }

    /// The item of the window's first batch: its transform, or its error once the retry
    /// policy gives up (each retry waits, the other gathers of the window going on); `None` if
    /// the stream was dropped meanwhile.
    fn finish(
        &mut self,
        mut head: Pending<Src::Batch>,
        window: &mut VecDeque<Pending<Src::Batch>>,
    ) -> Option<Result<LoaderBatch<T>>> {
        let mut backoff = self.retry.backoff.min(self.retry.max_backoff);
        loop {
            let error = match (head.batch.take(), head.result.take()) {
                (Some(batch), Some(Ok(gathered))) => {
                    let start = std::time::Instant::now();
                    let data =
                        catch_unwind(AssertUnwindSafe(|| (self.transform)(gathered, &batch)));
                    self.counters.transform_time(start);
                    match data {
                        Ok(Ok(data)) => return Some(Ok(LoaderBatch { data, batch })),
                        Ok(Err(e)) => {
                            head.batch = Some(batch);
                            e
                        }
                        Err(panic) => return Some(Err(panicked(self.w, head.pos, panic.as_ref()))),
                    }
                }
                (batch, Some(Err(e))) => {
                    head.batch = batch;
                    e
                }
                (_, None) | (None, Some(Ok(_))) => {
                    Error::internal("an asynchronous gather finished with no result".into())
                }
            };
            // A panic is not retried.
            if matches!(error, Error::WorkerPanicked { .. }) {
                return Some(Err(error));
            }
            self.counters.failed_attempt();
            if head.tries >= self.retry.attempts {
                return Some(Err(error));
            }
            tracing::debug!(
                worker = self.w,
                epoch = head.pos.epoch,
                position = head.pos.position,
                tries = head.tries,
                error = %error,
                "prefetch: retrying a failed batch"
            );
            let slept = std::time::Instant::now();
            let closed = self.tx.wait_closed(backoff);
            self.counters.retry_wait(slept);
            if closed {
                return Some(Err(error));
            }
            backoff = backoff.saturating_mul(2).min(self.retry.max_backoff);
            self.start(&mut head);
            window.push_front(head);
            if !self.poll_window(window) {
                return None;
            }
            head = window.pop_front()?;
        }
    }

    /// Produces the item at `pos`, trying a failed gather or transform again as the retry
    /// policy allows, sleeping on this thread between tries (a dropped stream cuts the sleep
    /// short and returns the error at once). A panic is not retried.
    fn produce_with_retries(&mut self, pos: Position) -> Result<LoaderBatch<T>> {
        let mut backoff = self.retry.backoff.min(self.retry.max_backoff);
        let mut tries = 1u32;
        loop {
            let error = match catch_unwind(AssertUnwindSafe(|| self.produce(pos))) {
                Ok(Ok(batch)) => return Ok(batch),
                Ok(Err(e)) => e,
                Err(panic) => return Err(panicked(self.w, pos, panic.as_ref())),
            };
            self.counters.failed_attempt();
            if tries >= self.retry.attempts {
                return Err(error);
            }
            tracing::debug!(
                worker = self.w,
                epoch = pos.epoch,
                position = pos.position,
                tries,
                error = %error,
                "prefetch: retrying a failed batch"
            );
            let slept = std::time::Instant::now();
            let closed = self.tx.wait_closed(backoff);
            self.counters.retry_wait(slept);
            if closed {
                return Err(error);
            }
            tries = tries.saturating_add(1);
            backoff = backoff.saturating_mul(2).min(self.retry.max_backoff);
        }
    }

    /// Computes this worker's batches after the current one, up to `lookahead` of them, and
    /// announces those not announced yet to the source.
    fn announce(&mut self) {
        while self.ahead.front().is_some_and(|(k, _)| *k < self.k) {
            self.ahead.pop_front();
        }
        if self.lookahead == 0 {
            return;
        }
        let mut next = self
            .ahead
            .back()
            .map_or(self.k, |(k, _)| k.saturating_add(1));
        let last = self.k.saturating_add(self.lookahead);
        while next <= last && self.split.count(self.w).is_none_or(|c| next < c) {
            let Some(g) = self.split.global(self.w, next) else {
                break;
            };
            let pos = self.split.position(g);
            // A batch that cannot be computed is not announced; producing it reports why.
            let start = std::time::Instant::now();
            // A panic here is caught: producing the batch reports it.
            let computed =
                catch_unwind(AssertUnwindSafe(|| self.stage.get(pos.epoch, pos.position)));
            self.counters.index_time(start);
            let Ok(Ok(batch)) = computed else {
                break;
            };
            if next > self.k {
                self.source.lookahead(self.session, &batch.indices());
            }
            self.ahead.push_back((next, batch));
            // Past item u64::MAX there is none (a saturating step would spin here).
            let Some(after) = next.checked_add(1) else {
                break;
            };
            next = after;
        }
    }

    fn produce(&mut self, pos: Position) -> Result<LoaderBatch<T>> {
        let computed = self
            .ahead
            .front()
            .filter(|(k, _)| *k == self.k)
            .map(|(_, b)| b.clone());
        let batch = match computed {
            Some(b) => b,
            None => {
                let start = std::time::Instant::now();
                let b = self.stage.get(pos.epoch, pos.position)?;
                self.counters.index_time(start);
                b
            }
        };
        let indices = batch.indices();
        let gathered = {
            let _span = tracing::trace_span!("zrecord.gather", records = indices.len()).entered();
            let _in_flight = self.counters.gather_started(indices.len());
            self.source.gather(&indices)?
        };
        let start = std::time::Instant::now();
        let data = (self.transform)(gathered, &batch)?;
        self.counters.transform_time(start);
        Ok(LoaderBatch { data, batch })
    }
}

/// One batch of an asynchronous worker's window: its index batch (or why it could not be
/// computed), its gather in flight with the guard that counts it, its result once done.
struct Pending<B> {
    /// The worker's item number.
    k: u64,
    pos: Position,
    /// `None` until computed (`result` says why it could not be).
    batch: Option<IndexBatch>,
    future: Option<(
        super::source::SourceFuture<B>,
        super::stats::InFlight,
        Arc<GatherSignal>,
    )>,
    result: Option<Result<B>>,
    tries: u32,
    /// When a poll last found its gather pending.
    pending_since: Option<std::time::Instant>,
}

/// Waits until every worker whose exit end is in `exits` has dropped its end (on exit).
pub(crate) async fn wait_exits(exits: Vec<oneshot::Receiver<()>>) {
    for exit in exits {
        // `Canceled` is the expected outcome: the worker dropped its end on exit.
        let _ = exit.await;
    }
}

/// The waker of one gather of an asynchronous worker's window: wakes the worker, and notes
/// when it did last.
#[derive(Default)]
struct GatherSignal {
    outer: futures::task::AtomicWaker,
    last_wake: std::sync::Mutex<Option<std::time::Instant>>,
}

impl GatherSignal {
    fn last_wake(&self) -> Option<std::time::Instant> {
        match self.last_wake.lock() {
            Ok(g) => *g,
            Err(poisoned) => *poisoned.into_inner(),
        }
    }
}

impl futures::task::ArcWake for GatherSignal {
    fn wake_by_ref(arc_self: &Arc<Self>) {
        let now = std::time::Instant::now();
        match arc_self.last_wake.lock() {
            Ok(mut g) => *g = Some(now),
            Err(poisoned) => *poisoned.into_inner() = Some(now),
        }
        arc_self.outer.wake();
    }
}

fn panicked(w: u64, pos: Position, panic: &(dyn std::any::Any + Send)) -> Error {
    let msg = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into());
    Error::WorkerPanicked {
        what: format!(
            "prefetch worker {w} (at epoch {} position {})",
            pos.epoch, pos.position
        ),
        message: msg,
    }
}

fn died(w: usize) -> Error {
    let _ = w;
    Error::WorkerGone {
        what: "a prefetch worker",
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

    fn merge_one(&mut self, cx: &mut Context<'_>) -> Poll<Option<Merged<T>>> {
        match self.policy {
            MergePolicy::Strict => self.merge_strict(cx),
            MergePolicy::BestEffort {
                max_lead,
                max_skips_per_round,
            } => self.merge_best_effort(cx, max_lead, max_skips_per_round),
        }
    }

    fn merge_strict(&mut self, cx: &mut Context<'_>) -> Poll<Option<Merged<T>>> {
        let n = self.workers.len();
        for _ in 0..n {
            let w = self.merge_next;
            let active = self.workers.get(w).is_some_and(Worker::active);
            if !active {
                self.merge_next = (w + 1) % n;
                continue;
            }
            return self.take(cx, w).map(Some);
        }
        Poll::Ready(None)
    }

    fn merge_best_effort(
        &mut self,
        cx: &mut Context<'_>,
        max_lead: u64,
        max_skips: u64,
    ) -> Poll<Option<Merged<T>>> {
        let n = self.workers.len();
        if !self.workers.iter().any(Worker::active) {
            return Poll::Ready(None);
        }
        // Eligible: merged − (least consumed count of the workers with items left) < max_lead.
        //
        // It bounds the consumed lead: consumed ≤ merged for every worker, so when worker w is
        // merged from, w's consumed count can reach at most min + max_lead, and that minimum only
        // grows (consumed counts only grow, and a worker leaves the set only once it has nothing
        // left to consume).
        //
        // It cannot deadlock: if the consumer buffer holds anything, the consumer takes it
        // without a merge. If it is empty, every merged item was consumed (merged = consumed for
        // every worker), so the worker s with the least consumed count has merged − min = 0 <
        // max_lead and items left to merge: it is eligible. Every eligible worker the scan polls
        // has items left, so its thread will push one and wake this task.
        // With no worker left to consume, no worker is active either (returned above).
        let min = self.min_unconsumed().unwrap_or(0);
        let mut skips = 0u64;
        for i in 0..n {
            let w = (self.merge_next + i) % n;
            let Some(worker) = self.workers.get(w) else {
                continue;
            };
            if !worker.active() || worker.merged.saturating_sub(min) >= max_lead {
                continue;
            }
            match self.take(cx, w) {
                Poll::Ready(m) => return Poll::Ready(Some(m)),
                Poll::Pending => {
                    skips += 1;
                    if skips > max_skips {
                        break;
                    }
                }
            }
        }
        Poll::Pending
    }

    /// The least consumed count of the live workers with items left to consume (merged or not);
    /// `None` if there is none.
    fn min_unconsumed(&self) -> Option<u64> {
        self.workers
            .iter()
            .zip(&self.state.workers)
            .filter(|(w, ws)| !w.dead && ws.next.is_some())
            .map(|(_, ws)| ws.consumed)
            .min()
    }

    /// Polls worker `w`'s queue; on an item, advances the merge past it.
    fn take(&mut self, cx: &mut Context<'_>, w: usize) -> Poll<Merged<T>> {
        let n = self.workers.len();
        let Some(worker) = self.workers.get_mut(w) else {
            return Poll::Ready(Merged {
                worker: None,
                next_worker: self.merge_next,
                result: Err(died(w)),
            });
        };
        let polled = match &worker.rx {
            Some(rx) => rx.poll_pop(cx),
            // Closed by a stop: the merge does not run after it, but the queue ends here.
            None => Poll::Ready(None),
        };
        let merged = match polled {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Some(item)) => {
                debug_assert_eq!(item.k, worker.merged, "worker items arrive in order");
                // Below u64::MAX: a worker's items have global positions that fit in a u64, and
                // `restore` refuses a consumed count of u64::MAX for a worker with items left.
                worker.merged = worker.merged.saturating_add(1);
                Merged {
                    worker: Some((w, worker.merged)),
                    next_worker: (w + 1) % n,
                    result: item.result,
                }
            }
            Poll::Ready(None) => {
                worker.dead = true;
                Merged {
                    worker: None,
                    next_worker: (w + 1) % n,
                    result: Err(died(w)),
                }
            }
        };
        self.merge_next = merged.next_worker;
        Poll::Ready(merged)
    }

    /// Ends the stream after a failed item under [`OnError::Stop`]: nothing more is merged or
    /// returned, and closing the queues stops the workers. The checkpoint does not move.
    fn stop(&mut self) {
        self.merge_done = true;
        // Dropped outside any lock: a batch's destructor may be arbitrary user code.
        let ready = std::mem::take(&mut self.ready);
        drop(ready);
        for w in &mut self.workers {
            w.rx = None;
        }
    }

    fn consume(&mut self, m: &Merged<T>) {
        if let Some((w, consumed)) = m.worker {
            let next = self.split.next(w as u64, consumed);
            if let Some(ws) = self.state.workers.get_mut(w) {
                ws.consumed = consumed;
                ws.next = next;
            }
        }
        self.state.next_worker = m.next_worker as u64;
        if let Some(min) = self.min_unconsumed() {
            let max = self
                .workers
                .iter()
                .zip(&self.state.workers)
                .filter(|(w, _)| !w.dead)
                .map(|(_, ws)| ws.consumed)
                .max()
                .unwrap_or(min);
            self.max_observed_lead = self.max_observed_lead.max(max.saturating_sub(min));
        }
    }

    fn remaining(&self) -> Option<u64> {
        if self.merge_done && self.workers.iter().all(|w| w.rx.is_none()) {
            return Some(self.ready.len() as u64);
        }
        let mut sum = self.ready.len() as u64;
        for w in &self.workers {
            let count = w.count?;
            sum = sum.saturating_add(count.saturating_sub(w.merged));
        }
        Some(sum)
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
