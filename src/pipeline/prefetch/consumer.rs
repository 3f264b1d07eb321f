//! The consumer side of a [`Prefetch`], one copy for both index sides: the merge of the workers'
//! queues (strict, or best effort with a bounded lead), the buffer of merged batches waiting for
//! the consumer, consumption, the stop, and the counts the checkpoint and the stats are made of.
//!
//! What differs between a prefetch whose workers run their own shares of a seekable stage and
//! one whose consumer deals it the batches of a stream is behind [`IndexSide`]: which worker's
//! batch comes next, which job a worker's next result must be, and what consuming it leaves in
//! the checkpoint.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::channel::{mpsc, oneshot};
use futures::stream::{FusedStream, Stream};

use super::super::batch::IndexBatch;
use super::super::queue::Receiver;
use super::super::stats::{ConsumerCounters, Counters, LoaderStats};
use super::{Done, LoaderBatch, MergePolicy, OnError, Prefetch, PrefetchInput};
use crate::{Error, Result};

/// One worker's ends on the consumer's side: its queue of results, and its exit.
pub struct Queue<T> {
    pub(super) rx: Receiver<Done<T>>,
    pub(super) exit: Option<oneshot::Receiver<()>>,
    /// Where the stream side deals the worker its jobs; `None` for a worker that runs its own
    /// share.
    pub(super) jobs: Option<mpsc::UnboundedSender<(u64, IndexBatch)>>,
}

/// Starts worker `w` of a stream prefetch (the stream side starts its workers at the first poll,
/// and again after a restore).
pub type Spawn<T> = Arc<dyn Fn(usize) -> Result<Queue<T>> + Send + Sync>;

/// Per worker: its jobs merged and consumed so far (a seekable worker counts from its first item,
/// so a resumed worker starts at its consumed count; a stream prefetch's worker from 0).
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    pub(super) merged: u64,
    pub(super) consumed: u64,
}

/// A merged result waiting for the consumer.
pub struct Merged<T> {
    /// The worker whose job it is; `None` for an error in place of a job no worker runs (a
    /// worker that died, an error of the stream's input).
    pub(super) worker: Option<usize>,
    /// What the index side needs to consume it (its sequence number, or the merge's next
    /// worker after it).
    pub(super) mark: u64,
    pub(super) result: Result<LoaderBatch<T>>,
}

/// What the merge does next.
pub enum Next<T> {
    /// Take worker `w`'s next result (the strict merge).
    Take(usize),
    /// Take the first ready result of an eligible worker (the best-effort merge).
    Scan,
    /// This result, in place of a job no worker runs.
    Fail(Merged<T>),
    /// Nothing to merge now; the input wakes the task when there is.
    Wait,
    /// Nothing more to merge.
    End,
}

/// The index side of a prefetch: the one thing that differs between a prefetch over a seekable
/// stage (each worker runs its own share) and one over a stream (the consumer deals the input's
/// batches out).
pub trait IndexSide<S> {
    /// Before each merge: starts the workers if none run, and deals the input's batches while
    /// there is room (the stream side); nothing on the seekable side.
    ///
    /// # Errors
    /// What starting a worker returns; the stream then stops.
    fn dispatch<T>(
        &mut self,
        input: &mut S,
        core: &mut Core<T>,
        cx: &mut Context<'_>,
    ) -> Result<()>;

    /// What the merge does next, under the strict merge (`strict`) or the best-effort merge.
    fn next<T>(&mut self, counts: &[Counts], strict: bool) -> Next<T>;

    /// The worker the best-effort scan visits first.
    fn scan_start(&self) -> usize;

    /// Whether worker `w` has a job to merge.
    fn active(&self, counts: &[Counts], w: usize) -> bool;

    /// The least consumed count of the workers with jobs left to consume.
    fn min_unconsumed(&self, counts: &[Counts]) -> Option<u64>;

    /// The tag of worker `w`'s next result (its job's number).
    fn expected(&self, counts: &[Counts], w: usize) -> Option<u64>;

    /// Worker `w`'s result for job `tag` was merged; returns its mark.
    fn merged(&mut self, w: usize, tag: u64) -> u64;

    /// Worker `w`'s queue ended before its jobs did: the result in place of its next job.
    fn closed<T>(&mut self, w: usize) -> Merged<T>;

    /// A merged result was consumed (`counts` already counts it).
    fn consumed(&mut self, counts: &[Counts], worker: Option<usize>, mark: u64);

    /// The stream stopped (a failure under [`OnError::Stop`], or the end): ends the source's
    /// lookahead session.
    fn stop(&mut self);

    /// Bounds of the jobs left to merge, as [`Stream::size_hint`] gives them.
    fn size_hint(&self, counts: &[Counts]) -> (u64, Option<u64>);
}

/// The state of the consumer side both index sides share.
pub struct Core<T> {
    pub(super) queues: Vec<Queue<T>>,
    /// How the stream side starts a worker; `None` on the seekable side (its workers start
    /// with the prefetch).
    pub(super) spawn: Option<Spawn<T>>,
    pub(super) counts: Vec<Counts>,
    /// The exits of workers let go of (by a stop, the end or a restore) that may still be
    /// running: [`Prefetch::shutdown`] waits for them too.
    pub(super) released: Vec<oneshot::Receiver<()>>,
    pub(super) policy: MergePolicy,
    pub(super) on_error: OnError,
    pub(super) room: usize,
    pub(super) ready: VecDeque<Merged<T>>,
    pub(super) merge_done: bool,
    pub(super) stopped: bool,
    pub(super) max_observed_lead: u64,
    /// What the workers count as they go (shared with them), and what the consumer side counts.
    pub(super) counters: Arc<Counters>,
    pub(super) consumer: ConsumerCounters,
}

impl<T> Core<T> {
    pub(super) fn new(
        policy: MergePolicy,
        on_error: OnError,
        room: usize,
        counts: Vec<Counts>,
        counters: Arc<Counters>,
    ) -> Self {
        Self {
            queues: Vec::new(),
            spawn: None,
            counts,
            released: Vec::new(),
            policy,
            on_error,
            room,
            ready: VecDeque::with_capacity(room),
            merge_done: false,
            stopped: false,
            max_observed_lead: 0,
            counters,
            consumer: ConsumerCounters::default(),
        }
    }

    /// Closes the workers' queues (each exits at once, or when its gather returns) and keeps
    /// their exits for [`Prefetch::shutdown`], dropping those of workers gone already.
    pub(super) fn let_go_of_workers(&mut self) {
        self.released
            .retain_mut(|exit| matches!(exit.try_recv(), Ok(None)));
        for q in &mut self.queues {
            if let Some(exit) = q.exit.take() {
                self.released.push(exit);
            }
        }
        self.queues.clear();
    }

    /// Ends the stream: nothing more is merged or returned; the workers stop; the checkpoint
    /// does not move.
    fn stop<S, I: IndexSide<S>>(&mut self, side: &mut I) {
        self.stopped = true;
        self.merge_done = true;
        // Dropped outside any lock: a batch's destructor may be arbitrary user code.
        let ready = std::mem::take(&mut self.ready);
        drop(ready);
        self.let_go_of_workers();
        side.stop();
    }

    /// Consumed items of the worker furthest ahead minus those of the slowest worker with items
    /// left to consume.
    fn lead<S, I: IndexSide<S>>(&self, side: &I) -> u64 {
        side.min_unconsumed(&self.counts).map_or(0, |min| {
            let max = self.counts.iter().map(|c| c.consumed).max().unwrap_or(min);
            max.saturating_sub(min)
        })
    }

    fn merge_one<S, I: IndexSide<S>>(
        &mut self,
        side: &mut I,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Merged<T>>> {
        match side.next(&self.counts, self.policy == MergePolicy::Strict) {
            Next::End => Poll::Ready(None),
            Next::Wait => Poll::Pending,
            Next::Fail(m) => Poll::Ready(Some(m)),
            Next::Take(w) => self.take(side, cx, w).map(Some),
            Next::Scan => match self.policy {
                MergePolicy::BestEffort {
                    max_lead,
                    max_skips_per_round,
                } => self.scan(side, cx, max_lead, max_skips_per_round).map(Some),
                MergePolicy::Strict => Poll::Pending,
            },
        }
    }

    /// One scan of the best-effort merge: visits the workers from the one after the last taken
    /// and takes a result from the first one that has one ready, but never from a worker with
    /// no job to merge or whose merged count is `max_lead` or more ahead of `min`, the least
    /// consumed count of the workers with jobs left; after `max_skips + 1` eligible workers
    /// found empty it stops and waits (every worker polled wakes the task when its result
    /// arrives).
    ///
    /// It bounds the consumed lead: consumed ≤ merged for every worker, so when worker w is
    /// merged from, w's consumed count can reach at most min + max_lead, and that minimum only
    /// grows (consumed counts only grow, and a worker leaves the set only once it has nothing
    /// left to consume).
    ///
    /// It cannot deadlock as long as the index side keeps this promise: whenever nothing merged
    /// waits for the consumer, some worker with the least consumed count `min` has a job to
    /// merge. Then that worker has merged − min = 0 < max_lead: it is eligible; and every
    /// eligible worker the scan polls will push a result and wake the task. (The seekable side
    /// keeps it because every worker with items left has a job to merge; the stream side
    /// because it deals its jobs round-robin, so the worker of its oldest job in flight has the
    /// least consumed count.)
    fn scan<S, I: IndexSide<S>>(
        &mut self,
        side: &mut I,
        cx: &mut Context<'_>,
        max_lead: u64,
        max_skips: u64,
    ) -> Poll<Merged<T>> {
        let n = self.counts.len();
        let min = side.min_unconsumed(&self.counts).unwrap_or(0);
        let start = side.scan_start();
        let mut skips = 0u64;
        for i in 0..n {
            let w = (start + i) % n;
            let Some(c) = self.counts.get(w) else {
                continue;
            };
            if !side.active(&self.counts, w) || c.merged.saturating_sub(min) >= max_lead {
                continue;
            }
            match self.take(side, cx, w) {
                Poll::Ready(m) => return Poll::Ready(m),
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

    /// Polls worker `w`'s queue for the result of its next job.
    fn take<S, I: IndexSide<S>>(
        &mut self,
        side: &mut I,
        cx: &mut Context<'_>,
        w: usize,
    ) -> Poll<Merged<T>> {
        let polled = match self.queues.get(w) {
            Some(queue) => queue.rx.poll_pop(cx),
            None => Poll::Ready(None),
        };
        let merged = match polled {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(None) => side.closed(w),
            Poll::Ready(Some((tag, result))) => {
                let expected = side.expected(&self.counts, w);
                if expected == Some(tag) {
                    let mark = side.merged(w, tag);
                    Merged {
                        worker: Some(w),
                        mark,
                        result,
                    }
                } else {
                    // A worker's results come in the order of its jobs, in a queue of its own:
                    // another job's result is a bug. The job expected fails in its place, and
                    // the worker counts as gone.
                    let mut failed = side.closed(w);
                    failed.result = Err(Error::internal(format!(
                        "prefetch worker {w} returned job {tag}, expected {expected:?}"
                    )));
                    failed
                }
            }
        };
        if let Some(c) = merged.worker.and_then(|w| self.counts.get_mut(w)) {
            // Below u64::MAX: a worker's jobs are numbered by u64 positions.
            c.merged = c.merged.saturating_add(1);
        }
        Poll::Ready(merged)
    }

    fn consume<S, I: IndexSide<S>>(&mut self, side: &mut I, m: &Merged<T>) {
        if let Some(c) = m.worker.and_then(|w| self.counts.get_mut(w)) {
            c.consumed = c.consumed.saturating_add(1);
        }
        if let Ok(b) = &m.result {
            self.consumer.batches = self.consumer.batches.saturating_add(1);
            self.consumer.records = self
                .consumer
                .records
                .saturating_add(b.batch.samples.len() as u64);
        }
        side.consumed(&self.counts, m.worker, m.mark);
        self.max_observed_lead = self.max_observed_lead.max(self.lead(side));
    }

    /// See [`Prefetch::stats`].
    pub(super) fn stats<S, I: IndexSide<S>>(&self, side: &I) -> LoaderStats {
        let depths = if self.queues.is_empty() {
            vec![0; self.counts.len()]
        } else {
            self.queues.iter().map(|q| q.rx.len()).collect()
        };
        LoaderStats::new(
            &self.counters,
            &self.consumer,
            depths,
            self.ready.len(),
            (self.lead(side), self.max_observed_lead),
        )
    }
}

impl<T, S: PrefetchInput> Stream for Prefetch<T, S> {
    type Item = Result<LoaderBatch<T>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Self { input, side, core } = self.get_mut();
        if core.stopped {
            return Poll::Ready(None);
        }
        if let Err(e) = side.dispatch(input, core, cx) {
            core.consumer.ready();
            core.stop(side);
            return Poll::Ready(Some(Err(e)));
        }
        // Fill the consumer buffer with whatever is ready. Results only move between buffers
        // the stream owns, so a dropped poll loses nothing.
        while core.ready.len() < core.room && !core.merge_done {
            match core.merge_one(side, cx) {
                Poll::Ready(Some(m)) => core.ready.push_back(m),
                Poll::Ready(None) => core.merge_done = true,
                Poll::Pending => break,
            }
        }
        let polled = match core.ready.pop_front() {
            Some(m) if m.result.is_err() && core.on_error == OnError::Stop => {
                core.stop(side);
                Poll::Ready(Some(m.result))
            }
            Some(m) => {
                core.consume(side, &m);
                if core.merge_done && core.ready.is_empty() {
                    // The last item: the workers and the lookahead session are let go of now,
                    // not only at the next poll (a fused consumer may never make it).
                    core.stop(side);
                }
                Poll::Ready(Some(m.result))
            }
            None if core.merge_done => {
                core.stop(side);
                Poll::Ready(None)
            }
            None => Poll::Pending,
        };
        match polled {
            Poll::Pending => core.consumer.pending(),
            Poll::Ready(_) => core.consumer.ready(),
        }
        polled
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let core = &self.core;
        let ready = core.ready.len() as u64;
        let (low, high) = if core.merge_done {
            (0, Some(0))
        } else {
            self.side.size_hint(&core.counts)
        };
        let cast = |n: u64| usize::try_from(n.saturating_add(ready)).unwrap_or(usize::MAX);
        (cast(low), high.map(cast))
    }
}

impl<T, S: PrefetchInput> FusedStream for Prefetch<T, S> {
    fn is_terminated(&self) -> bool {
        self.core.stopped
    }
}
