//! Prefetch: N worker threads gather the batches of an index stage from a [`Source`] into bounded
//! queues, and a merge hands them to the async consumer.
//!
//! # Work split
//!
//! Number the items of the index stage globally, `g = epoch * epoch_len + position`. Worker `w`
//! of `N` runs the items `g = base + w + k·N` for `k = 0, 1, …` (its own copy of the stage, so no
//! coordination): it computes the [`IndexBatch`], gathers it with [`Source::gather`], applies the
//! optional transform, and pushes the result into its own queue of `worker_queue_size` items,
//! blocking (its own thread, never a runtime worker) while the queue is full.
//!
//! # Merge (TinyGrad4 semantics)
//!
//! - [`MergePolicy::Strict`] (default): round-robin in worker order `0..N`, exhausted workers
//!   skipped. Because of the split above, the merged order is exactly the global order: the same
//!   stream as a single sequential pass over the stage, whatever the worker count.
//! - [`MergePolicy::BestEffort`]: scans the workers (from the one after the last taken) without
//!   waiting and takes the first ready item, but never from a worker that would then be more
//!   than `max_lead` items ahead of the slowest active worker; after `max_skips_per_round`
//!   workers found empty in one scan it stops scanning and waits. Not deterministic.
//!
//! Merged items wait for the consumer in a buffer of `consumer_queue_size` items. Memory is
//! bounded end to end: at most `N · (worker_queue_size + 1) + consumer_queue_size` batches exist
//! at any time.
//!
//! # Checkpoint
//!
//! [`Prefetch::state`] is taken at consumption: per worker, the number of its items consumed
//! and its next position; and the next worker of the merge. Resuming restarts every worker at
//! its next position and discards whatever was prefetched but not consumed, so the resumed
//! stream continues exactly after the last consumed item (strict) or loses and repeats nothing
//! (best effort). A strict checkpoint can even be resumed with another worker count.
//!
//! # Shutdown
//!
//! Dropping the [`Prefetch`] closes the queues: a worker blocked on a full queue wakes and exits,
//! a worker in the middle of a gather exits when the gather returns. [`Prefetch::shutdown`]
//! waits for that.

use std::collections::VecDeque;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::channel::oneshot;
use futures::stream::{FusedStream, Stream};
use serde::{Deserialize, Serialize};

use super::batch::IndexBatch;
use super::queue::{self, Receiver, Sender};
use super::source::Source;
use super::stage::{Layout, Stage};
use super::state::{Position, PrefetchState, WorkerState};
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
        /// No worker is ever more than this many items ahead of the slowest active worker
        /// (counted in merged items). At least 1.
        max_lead: u64,
        /// Number of empty workers one scan passes over before it waits (0: wait for the first
        /// eligible worker, like strict but lead-bounded).
        max_skips_per_round: u64,
    },
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
/// use zrecord::pipeline::{MergePolicy, PrefetchConfig};
///
/// let config = PrefetchConfig::default().num_workers(4).worker_queue_size(3);
/// assert_eq!(config.consumer_queue_size, 2);
/// assert_eq!(config.merge, MergePolicy::Strict);
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
}

impl Default for PrefetchConfig {
    /// 2 workers, worker queues of 2 batches, a consumer buffer of 2 batches, strict merge.
    fn default() -> Self {
        Self {
            num_workers: 2,
            worker_queue_size: 2,
            consumer_queue_size: 2,
            merge: MergePolicy::Strict,
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

    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |reason: String| Err(Error::InvalidConfig { reason });
        if self.num_workers == 0 || self.num_workers > MAX_NUM_WORKERS {
            return bad(format!(
                "prefetch: num_workers must be 1 to {MAX_NUM_WORKERS}, not {}",
                self.num_workers
            ));
        }
        let queue_ok = |q: usize| (1..=MAX_QUEUE_SIZE).contains(&q);
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
    rx: Receiver<WorkerItem<T>>,
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

/// The prefetching, merging stream; see the [module documentation](self).
#[must_use = "a prefetch does nothing unless polled"]
pub struct Prefetch<T> {
    workers: Vec<Worker<T>>,
    split: Split,
    policy: MergePolicy,
    consumer_queue_size: usize,
    ready: VecDeque<Merged<T>>,
    merge_next: usize,
    merge_done: bool,
    state: PrefetchState,
    max_observed_lead: u64,
}

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
        let mut workers = Vec::with_capacity(config.num_workers);
        for (w, &start_k) in consumed.iter().enumerate() {
            let (tx, rx) = queue::bounded(config.worker_queue_size);
            let (exit_tx, exit_rx) = oneshot::channel();
            let job = WorkerJob {
                stage: stage.clone(),
                source: Arc::clone(&source),
                transform: Arc::clone(&transform),
                split: split.clone(),
                w: w as u64,
                k: start_k,
                tx,
                exit: exit_tx,
            };
            std::thread::Builder::new()
                .name(format!("zrecord-prefetch-{w}"))
                .spawn(move || job.run())
                .map_err(|e| Error::ThreadSpawn {
                    what: "a prefetch worker",
                    reason: e.to_string(),
                })?;
            workers.push(Worker {
                rx,
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
            ready: VecDeque::with_capacity(config.consumer_queue_size),
            merge_next: next_worker,
            merge_done: false,
            state,
            max_observed_lead: 0,
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
    split: Split,
    w: u64,
    k: u64,
    tx: Sender<WorkerItem<T>>,
    exit: oneshot::Sender<()>,
}

impl<St, Src, T> WorkerJob<St, Src, T>
where
    St: Stage<Item = IndexBatch>,
    Src: Source,
    T: Send + 'static,
{
    fn run(mut self) {
        loop {
            if self.tx.is_closed() || self.split.count(self.w).is_some_and(|c| self.k >= c) {
                break;
            }
            let Some(g) = self.split.global(self.w, self.k) else {
                break;
            };
            let pos = self.split.position(g);
            let result = catch_unwind(AssertUnwindSafe(|| self.produce(pos)))
                .unwrap_or_else(|panic| Err(panicked(self.w, pos, panic.as_ref())));
            let item = WorkerItem { k: self.k, result };
            if self.tx.push(item).is_err() {
                break;
            }
            // Past item u64::MAX there is no global position: the worker ends (its merge reports
            // it as exited) rather than producing the last item again.
            let Some(k) = self.k.checked_add(1) else {
                break;
            };
            self.k = k;
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

    fn produce(&mut self, pos: Position) -> Result<LoaderBatch<T>> {
        let batch = self.stage.get(pos.epoch, pos.position)?;
        let gathered = self.source.gather(&batch.indices())?;
        let data = (self.transform)(gathered, &batch)?;
        Ok(LoaderBatch { data, batch })
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

    /// The largest lead (items merged from one worker minus items merged from the slowest
    /// active worker) seen after any merge so far. A diagnostic: under
    /// [`MergePolicy::BestEffort`] it never exceeds `max_lead`.
    pub fn max_observed_lead(&self) -> u64 {
        self.max_observed_lead
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
        for exit in exits {
            // `Canceled` is the expected outcome: the worker dropped its end on exit.
            let _ = exit.await;
        }
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
        let Some(min) = self.min_active() else {
            return Poll::Ready(None);
        };
        let mut skips = 0u64;
        for i in 0..n {
            let w = (self.merge_next + i) % n;
            let Some(worker) = self.workers.get(w) else {
                continue;
            };
            if !worker.active() || worker.merged - min >= max_lead {
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

    fn min_active(&self) -> Option<u64> {
        self.workers
            .iter()
            .filter(|w| w.active())
            .map(|w| w.merged)
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
        let merged = match worker.rx.poll_pop(cx) {
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
        if let Some(min) = self.min_active() {
            let max = self
                .workers
                .iter()
                .filter(|w| w.active())
                .map(|w| w.merged)
                .max()
                .unwrap_or(min);
            self.max_observed_lead = self.max_observed_lead.max(max - min);
        }
        Poll::Ready(merged)
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
    }

    fn remaining(&self) -> Option<u64> {
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
        match this.ready.pop_front() {
            Some(m) => {
                this.consume(&m);
                Poll::Ready(Some(m.result))
            }
            None if this.merge_done => Poll::Ready(None),
            None => Poll::Pending,
        }
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
