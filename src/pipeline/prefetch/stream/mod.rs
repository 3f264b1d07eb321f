//! [`PrefetchStream`]: gathers the batches of a checkpointable stream of [`IndexBatch`]es on
//! worker threads, merged in order or best effort.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::channel::oneshot;
use futures::stream::{FusedStream, Stream};
use serde::{Deserialize, Serialize};

use super::super::batch::IndexBatch;
use super::super::checkpoint::Checkpoint;
use super::super::source::Source;
use super::super::stats::{ConsumerCounters, Counters, LoaderStats};
use super::{
    scan_best_effort, wait_exits, LoaderBatch, MergePolicy, OnError, PrefetchConfig, Transform,
};
use crate::{Error, Result};

mod worker;

use worker::{gone, spawn_worker, Worker};

/// The checkpoint of a [`PrefetchStream`].
///
/// Checkpoints written before `consumed_ahead` existed (strict merge only) have the same JSON
/// as a checkpoint with nothing consumed ahead, and load as one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefetchStreamState<St> {
    /// The input's state just after the last batch of the consumed prefix was pulled: every
    /// batch up to it was consumed, the next one was not.
    pub input: St,
    /// The batches after `input` that were consumed already (only a best-effort merge consumes
    /// out of order): their numbers among the batches the input yields from `input` on, 0 the
    /// first, in strictly increasing order. A resumed stream pulls them from its input and
    /// skips them. Usually the first batch is the oldest not consumed and is not listed; a
    /// resumed stream that has not pulled its skipped batches yet may list it. Empty (and not
    /// written) under the strict merge.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consumed_ahead: Vec<u64>,
}

/// Starts worker `w`.
type Spawn<T> = Arc<dyn Fn(usize) -> Result<Worker<T>> + Send + Sync>;

/// [`Source::lookahead`] (`Some(indices)`) and [`Source::end_lookahead`] (`None`) of the source.
type Announce = Arc<dyn Fn(u64, Option<&[u64]>) + Send + Sync>;

/// Lookahead sessions of the stream prefetches (a range of their own, apart from the seekable
/// prefetch's).
static SESSIONS: AtomicU64 = AtomicU64::new(1 << 63);

/// A batch pulled from the input and not yet part of the consumed prefix.
struct InFlight<St> {
    seq: u64,
    /// The worker gathering it; `None` for an error of the input (in `error`), or a batch
    /// skipped because a restored checkpoint had consumed it already.
    worker: Option<usize>,
    error: Option<Error>,
    /// Consumed (out of order, or skipped): it leaves with the prefix.
    consumed: bool,
    /// The input's state just after the batch was pulled.
    state: St,
}

/// The stream of [`super::super::CheckpointExt::prefetch`].
///
/// # Work split
///
/// The input is pulled on the consumer's side, in [`Stream::poll_next`] (computing index
/// batches is cheap). Each batch pulled goes to the next worker thread in turn (round-robin),
/// which gathers it from the [`Source`] (retrying as [`PrefetchConfig::retry`] says),
/// applies the transform, and pushes the result into its own bounded queue. At most
/// `num_workers · (worker_queue_size + gathers_in_flight − 1)` batches are in flight. Unlike the
/// seekable [`super::super::Prefetch`], the workers share one input, so the consumer side hands
/// out the work; it accepts any stage, a user's own included.
///
/// # Merge
///
/// - [`MergePolicy::Strict`] (default): the results are handed out strictly in input order.
/// - [`MergePolicy::BestEffort`]: the first ready result of the workers, scanned from the one
///   after the last taken, never from a worker whose consumed batches would then be more than
///   `max_lead` ahead of the slowest worker's that still has batches to come: the seekable
///   prefetch's merge ([`super::super::Prefetch`]), over the same per-worker counts. A slow
///   batch then holds back only its own worker's later batches. Not deterministic.
///
/// # Checkpoint
///
/// The state ([`PrefetchStreamState`]) is the input's state taken just after the last batch of
/// the consumed prefix was pulled, plus, under the best-effort merge, which later batches were
/// consumed already. Batches in flight at a checkpoint are gathered again after a restore, the
/// ones consumed ahead are pulled and skipped, so nothing is lost or repeated, with any worker
/// count and either merge. A failed batch (an `Err` from the input, or a gather or transform
/// that failed on every try) under [`OnError::Stop`] ends the stream without being consumed:
/// the checkpoint still points before it. Under [`OnError::Skip`] it counts as consumed.
///
/// # Configuration
///
/// Every option of [`PrefetchConfig`] applies but `consumer_queue_size` (results go from the
/// workers' queues to the consumer). With [`PrefetchConfig::gathers_in_flight`] above 1, each
/// worker keeps up to that many gathers going at once with [`Source::gather_async`] (the
/// seekable prefetch's window, the same code), taking the results in its jobs' order. With a
/// non-zero [`PrefetchConfig::lookahead`], every batch is announced ([`Source::lookahead`])
/// when it is pulled and handed to a worker, so the window of announced batches is the batches
/// in flight, not `lookahead` batches per worker.
///
/// # Shutdown
///
/// Dropping the stream closes the queues: a worker waiting for work or blocked on a full queue
/// exits at once, a worker in the middle of a gather when the gather returns (an asynchronous
/// gather in flight is dropped). [`PrefetchStream::shutdown`] waits for that.
#[must_use = "streams do nothing unless polled"]
pub struct PrefetchStream<S: Checkpoint, T> {
    input: S,
    input_done: bool,
    spawn: Spawn<T>,
    /// Announces a batch to the source (`Some(indices)`) or ends the session (`None`); `None`
    /// without lookahead.
    announce: Option<Announce>,
    session: u64,
    /// False once `session` is ended (by a stop, a restore or the drop): it is ended once.
    session_open: bool,
    num_workers: usize,
    capacity: usize,
    merge: MergePolicy,
    on_error: OnError,
    /// Started at the first poll (and again after a restore).
    workers: Vec<Worker<T>>,
    /// The exits of workers let go of before the end (by a stop or a restore) that may still
    /// be running: [`PrefetchStream::shutdown`] waits for them too.
    released: Vec<oneshot::Receiver<()>>,
    next_worker: usize,
    /// Per worker since its start: batches consumed, and batches handed to it and not consumed.
    worker_consumed: Vec<u64>,
    worker_owed: Vec<u64>,
    /// The worker the best-effort merge visits first.
    merge_next: usize,
    max_observed_lead: u64,
    in_flight: VecDeque<InFlight<S::State>>,
    next_seq: u64,
    /// Sequence numbers not pulled yet that a restored checkpoint had consumed, increasing.
    skip: VecDeque<u64>,
    consumed: S::State,
    stopped: bool,
    /// What the workers count as they go (shared with them), and what the consumer side counts:
    /// the counters of the seekable prefetch.
    counters: Arc<Counters>,
    consumer: ConsumerCounters,
}

impl<S: Checkpoint, T> fmt::Debug for PrefetchStream<S, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrefetchStream")
            .field("num_workers", &self.num_workers)
            .field("merge", &self.merge)
            .field("in_flight", &self.in_flight.len())
            .field("stopped", &self.stopped)
            .finish_non_exhaustive()
    }
}

impl<S, T> PrefetchStream<S, T>
where
    S: Checkpoint<Item = Result<IndexBatch>> + Unpin,
    T: Send + 'static,
{
    /// Gathers the batches of `input` from `source` on `config.num_workers` threads, applying
    /// `transform` on the worker threads. The threads start at the first poll.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for an invalid `config`.
    pub fn new<Src: Source>(
        input: S,
        source: Arc<Src>,
        transform: Transform<Src::Batch, T>,
        config: PrefetchConfig,
    ) -> Result<Self> {
        config.validate()?;
        let announce: Option<Announce> = (config.lookahead > 0).then(|| {
            let source = Arc::clone(&source);
            let announce: Announce =
                Arc::new(move |session: u64, indices: Option<&[u64]>| match indices {
                    Some(indices) => source.lookahead(session, indices),
                    None => source.end_lookahead(session),
                });
            announce
        });
        let counters = Arc::new(Counters::default());
        let shared = Arc::clone(&counters);
        let spawn: Spawn<T> = Arc::new(move |w| {
            spawn_worker(
                w,
                Arc::clone(&source),
                Arc::clone(&transform),
                config,
                Arc::clone(&shared),
            )
        });
        // Each worker: its queue, plus the gathers of its window beyond the one a blocking
        // worker has.
        let per_worker = config
            .worker_queue_size
            .saturating_add(config.gathers_in_flight.saturating_sub(1));
        Ok(Self {
            consumed: input.checkpoint(),
            input,
            input_done: false,
            spawn,
            announce,
            session: SESSIONS.fetch_add(1, Ordering::Relaxed),
            session_open: true,
            num_workers: config.num_workers,
            capacity: config.num_workers.saturating_mul(per_worker),
            merge: config.merge,
            on_error: config.on_error,
            workers: Vec::new(),
            released: Vec::new(),
            next_worker: 0,
            worker_consumed: vec![0; config.num_workers],
            worker_owed: vec![0; config.num_workers],
            merge_next: 0,
            max_observed_lead: 0,
            in_flight: VecDeque::new(),
            next_seq: 0,
            skip: VecDeque::new(),
            stopped: false,
            counters,
            consumer: ConsumerCounters::default(),
        })
    }
}

impl<S: Checkpoint, T> PrefetchStream<S, T> {
    /// The input stream.
    pub fn get_ref(&self) -> &S {
        &self.input
    }

    /// Stops the workers and waits until every worker thread has exited and released the
    /// source. Dropping the stream stops them too, without waiting.
    ///
    /// # Cancel safety
    /// Dropping the future before it completes leaves the workers stopping on their own; nothing
    /// else is lost (the stream is consumed either way).
    pub async fn shutdown(mut self) {
        self.let_go_of_workers();
        let exits = std::mem::take(&mut self.released);
        drop(self);
        wait_exits(exits).await;
    }

    /// A snapshot of what the stream is doing, as [`super::super::Loader::stats`] reports it:
    /// batches and records consumed and produced, failed tries, gathers and records in flight,
    /// time per stage, the gather latency histogram, and who waits for whom (see
    /// [`LoaderStats`]). The index side runs on the consumer's task here, so `index_time` is 0;
    /// `lead` and `max_lead` are those of the best-effort merge (0 under the strict merge);
    /// `consumer_queue_depth` counts the batches pulled from the input and not consumed yet.
    /// Cheap: a few atomic loads and one lock per worker queue.
    pub fn stats(&self) -> LoaderStats {
        let depths = self.workers.iter().map(|w| w.results.len()).collect();
        let depths = if self.workers.is_empty() {
            vec![0; self.num_workers]
        } else {
            depths
        };
        let waiting = self.in_flight.iter().filter(|b| !b.consumed).count();
        LoaderStats::new(
            &self.counters,
            &self.consumer,
            depths,
            waiting,
            (self.lead(), self.max_observed_lead),
        )
    }

    /// The least consumed count of the workers with batches to come: handed to them and not
    /// consumed, or (while the input goes on) still to be handed out.
    fn min_unconsumed(&self) -> Option<u64> {
        self.worker_consumed
            .iter()
            .zip(&self.worker_owed)
            .filter(|(_, owed)| **owed > 0 || !self.input_done)
            .map(|(&c, _)| c)
            .min()
    }

    /// Consumed batches of the worker furthest ahead minus those of the slowest worker with
    /// batches to come (0 under the strict merge).
    fn lead(&self) -> u64 {
        if self.merge == MergePolicy::Strict {
            return 0;
        }
        let max = self.worker_consumed.iter().copied().max().unwrap_or(0);
        self.min_unconsumed()
            .map_or(0, |min| max.saturating_sub(min))
    }

    /// Drops whatever the source started for the batches announced and not gathered.
    fn end_session(&mut self) {
        if !std::mem::replace(&mut self.session_open, false) {
            return;
        }
        if let Some(announce) = &self.announce {
            announce(self.session, None);
        }
    }

    /// Closes the workers' queues (each exits at once, or when its gather returns) and keeps
    /// their exits for [`PrefetchStream::shutdown`], dropping those of workers gone already.
    fn let_go_of_workers(&mut self) {
        self.released
            .retain_mut(|exit| matches!(exit.try_recv(), Ok(None)));
        for w in &mut self.workers {
            if let Some(exit) = w.exit.take() {
                self.released.push(exit);
            }
        }
        self.workers.clear();
    }

    /// Ends the stream after a failed batch under [`OnError::Stop`]; the checkpoint stays (the
    /// batches in flight stay listed: the checkpoint names those consumed ahead). The workers
    /// stop, and the lookahead session ends: nothing more of it will be read.
    fn stop(&mut self) {
        self.stopped = true;
        self.let_go_of_workers();
        self.end_session();
    }

    /// Moves the consumed prefix past the consumed batches at the front.
    fn advance(&mut self) {
        while self.in_flight.front().is_some_and(|b| b.consumed) {
            if let Some(done) = self.in_flight.pop_front() {
                self.consumed = done.state;
            }
        }
    }

    /// Marks the batch at `i` of `in_flight` consumed by the consumer, with `ok` its outcome.
    fn consume(&mut self, i: usize, ok: Option<usize>) {
        let Some(b) = self.in_flight.get_mut(i) else {
            return;
        };
        b.consumed = true;
        if let Some(w) = b.worker {
            if let Some(c) = self.worker_consumed.get_mut(w) {
                *c = c.saturating_add(1);
            }
            if let Some(o) = self.worker_owed.get_mut(w) {
                *o = o.saturating_sub(1);
            }
        }
        if let Some(records) = ok {
            self.consumer.batches = self.consumer.batches.saturating_add(1);
            self.consumer.records = self.consumer.records.saturating_add(records as u64);
        }
        self.max_observed_lead = self.max_observed_lead.max(self.lead());
        self.advance();
    }
}

impl<S, T> PrefetchStream<S, T>
where
    S: Checkpoint<Item = Result<IndexBatch>> + Unpin,
{
    /// Pulls input batches and hands them to the workers while there is room.
    fn dispatch(&mut self, cx: &mut Context<'_>) -> Result<()> {
        if self.workers.is_empty() {
            for w in 0..self.num_workers {
                let worker = (self.spawn)(w)?;
                self.workers.push(worker);
            }
        }
        while !self.input_done && self.in_flight.len() < self.capacity {
            let polled = match Pin::new(&mut self.input).poll_next(cx) {
                Poll::Pending => break,
                Poll::Ready(None) => {
                    self.input_done = true;
                    break;
                }
                Poll::Ready(Some(polled)) => polled,
            };
            let seq = self.next_seq;
            let skipped = self.skip.front() == Some(&seq);
            if skipped {
                self.skip.pop_front();
            }
            let (worker, error) = match polled {
                // Consumed before the checkpoint this stream was restored from.
                _ if skipped => (None, None),
                Err(e) => (None, Some(e)),
                Ok(batch) => {
                    if let Some(announce) = &self.announce {
                        announce(self.session, Some(&batch.indices()));
                    }
                    let w = self.next_worker;
                    self.next_worker = (w + 1) % self.num_workers.max(1);
                    let sent = self
                        .workers
                        .get(w)
                        .is_some_and(|worker| worker.jobs.unbounded_send((seq, batch)).is_ok());
                    if sent {
                        if let Some(o) = self.worker_owed.get_mut(w) {
                            *o = o.saturating_add(1);
                        }
                        (Some(w), None)
                    } else {
                        (None, Some(gone()))
                    }
                }
            };
            self.in_flight.push_back(InFlight {
                seq,
                worker,
                error,
                consumed: skipped,
                state: self.input.checkpoint(),
            });
            self.next_seq = self.next_seq.wrapping_add(1);
            // A batch consumed before the checkpoint this stream was restored from leaves at
            // once when it is the oldest: skipped batches never fill the room (a resume with
            // less room than the run that wrote the checkpoint would pull only them, then wait
            // for nothing).
            self.advance();
        }
        self.advance();
        Ok(())
    }

    /// The result of the oldest batch in flight, if it is ready: its place in `in_flight` and
    /// the result.
    fn poll_front(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<(usize, Result<LoaderBatch<T>>)>> {
        let Some(front) = self.in_flight.front_mut() else {
            return Poll::Ready(None);
        };
        let Some(w) = front.worker else {
            return Poll::Ready(Some((0, Err(front.error.take().unwrap_or_else(gone)))));
        };
        let Some(worker) = self.workers.get(w) else {
            return Poll::Ready(Some((0, Err(gone()))));
        };
        loop {
            match worker.results.poll_pop(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => return Poll::Ready(Some((0, Err(gone())))),
                // A worker's results come in the order of its jobs: anything before this batch
                // was left by a stopped pass and is dropped.
                Poll::Ready(Some((seq, _))) if seq != front.seq => {}
                Poll::Ready(Some((_, result))) => return Poll::Ready(Some((0, result))),
            }
        }
    }

    /// The best-effort merge: an input error at the front first, else the first ready result of
    /// an eligible worker ([`scan_best_effort`]).
    fn poll_best_effort(
        &mut self,
        cx: &mut Context<'_>,
        max_lead: u64,
        max_skips: u64,
    ) -> Poll<Option<(usize, Result<LoaderBatch<T>>)>> {
        let Some(front) = self.in_flight.front_mut() else {
            return Poll::Ready(None);
        };
        if front.worker.is_none() {
            return Poll::Ready(Some((0, Err(front.error.take().unwrap_or_else(gone)))));
        }
        // The promise `scan_best_effort` needs: jobs are dealt round-robin, so the worker of the
        // oldest job not consumed has consumed no more than any other, and it is active.
        let min = self.min_unconsumed().unwrap_or(0);
        let n = self.workers.len();
        let start = self.merge_next % n.max(1);
        let taken = scan_best_effort(
            self,
            n,
            start,
            (min, max_lead, max_skips),
            |this, w| {
                let owed = this.worker_owed.get(w).copied().unwrap_or(0);
                (owed > 0).then(|| this.worker_consumed.get(w).copied().unwrap_or(0))
            },
            |this, w| this.take(cx, w),
        );
        taken.map(Some)
    }

    /// Worker `w`'s next result: the place of its batch in `in_flight` and the result.
    fn take(&mut self, cx: &mut Context<'_>, w: usize) -> Poll<(usize, Result<LoaderBatch<T>>)> {
        let oldest = self
            .in_flight
            .iter()
            .position(|b| b.worker == Some(w) && !b.consumed);
        let (Some(worker), Some(oldest)) = (self.workers.get(w), oldest) else {
            return Poll::Pending;
        };
        loop {
            match worker.results.poll_pop(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    self.merge_next = w.wrapping_add(1);
                    return Poll::Ready((oldest, Err(gone())));
                }
                Poll::Ready(Some((seq, result))) => {
                    // In the order of the worker's jobs; anything else was left by a stopped
                    // pass.
                    let at = self.in_flight.iter().position(|b| b.seq == seq);
                    if let Some(at) = at.filter(|&at| at == oldest) {
                        self.merge_next = w.wrapping_add(1);
                        return Poll::Ready((at, result));
                    }
                }
            }
        }
    }
}

impl<S, T> Stream for PrefetchStream<S, T>
where
    S: Checkpoint<Item = Result<IndexBatch>> + Unpin,
{
    type Item = Result<LoaderBatch<T>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.stopped {
            return Poll::Ready(None);
        }
        if let Err(e) = this.dispatch(cx) {
            this.consumer.ready();
            this.stop();
            return Poll::Ready(Some(Err(e)));
        }
        let polled = match this.merge {
            MergePolicy::Strict => this.poll_front(cx),
            MergePolicy::BestEffort {
                max_lead,
                max_skips_per_round,
            } => this.poll_best_effort(cx, max_lead, max_skips_per_round),
        };
        let (at, result) = match polled {
            Poll::Pending => {
                this.consumer.pending();
                return Poll::Pending;
            }
            Poll::Ready(None) if this.input_done => {
                // The consumer no longer waits: a stream that has ended stops counting.
                this.consumer.ready();
                this.stopped = true;
                this.workers.clear();
                return Poll::Ready(None);
            }
            // Nothing in flight and the input not ready: it woke us when it is.
            Poll::Ready(None) => {
                this.consumer.pending();
                return Poll::Pending;
            }
            Poll::Ready(Some(taken)) => taken,
        };
        this.consumer.ready();
        if result.is_err() && this.on_error == OnError::Stop {
            this.stop();
        } else {
            let records = result.as_ref().ok().map(|b| b.batch.samples.len());
            this.consume(at, records);
        }
        Poll::Ready(Some(result))
    }
}

impl<S, T> FusedStream for PrefetchStream<S, T>
where
    S: Checkpoint<Item = Result<IndexBatch>> + Unpin,
{
    fn is_terminated(&self) -> bool {
        self.stopped
    }
}

impl<S, T> Checkpoint for PrefetchStream<S, T>
where
    S: Checkpoint<Item = Result<IndexBatch>> + Unpin,
{
    type State = PrefetchStreamState<S::State>;

    fn checkpoint(&self) -> Self::State {
        // The prefix ends before the first batch not consumed: the front, after `advance`.
        let base = self.in_flight.front().map_or(self.next_seq, |b| b.seq);
        let consumed_ahead = self
            .in_flight
            .iter()
            .filter(|b| b.consumed)
            .map(|b| b.seq)
            .chain(self.skip.iter().copied())
            .map(|seq| seq.wrapping_sub(base))
            .collect();
        PrefetchStreamState {
            input: self.consumed.clone(),
            consumed_ahead,
        }
    }

    /// Restores the input and drops every batch in flight; the workers are started again at
    /// the next poll.
    ///
    /// # Errors
    /// [`Error::ResumeMismatch`] if `consumed_ahead` is not strictly increasing, or as the
    /// input's restore. A refused state changes nothing: the stream goes on as before.
    fn restore(&mut self, state: Self::State) -> Result<()> {
        let increasing = state
            .consumed_ahead
            .windows(2)
            .all(|w| w.first() < w.get(1));
        if !increasing {
            return Err(Error::ResumeMismatch {
                reason: format!(
                    "malformed stream prefetch state: consumed_ahead must strictly increase, not \
                     {:?}",
                    state.consumed_ahead
                ),
            });
        }
        // The input first: if it refuses the state, nothing of this stream has changed.
        self.input.restore(state.input.clone())?;
        self.end_session();
        self.session = SESSIONS.fetch_add(1, Ordering::Relaxed);
        self.session_open = true;
        self.in_flight.clear();
        self.let_go_of_workers();
        self.next_worker = 0;
        self.merge_next = 0;
        self.worker_consumed = vec![0; self.num_workers];
        self.worker_owed = vec![0; self.num_workers];
        self.next_seq = 0;
        self.skip = state.consumed_ahead.into();
        self.input_done = false;
        self.stopped = false;
        self.consumed = state.input;
        Ok(())
    }
}

impl<S: Checkpoint, T> Drop for PrefetchStream<S, T> {
    fn drop(&mut self) {
        self.end_session();
    }
}

// Nothing in a `PrefetchStream` is structurally pinned.
impl<S: Checkpoint + Unpin, T> Unpin for PrefetchStream<S, T> {}

#[cfg(test)]
mod tests;
