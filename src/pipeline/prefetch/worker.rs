//! A prefetch worker thread: computes its share of the index stage's batches, announces them to
//! the source ahead, gathers (blocking, or several gathers in flight), transforms, retries, and
//! pushes the results into its bounded queue.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::channel::oneshot;

use super::super::batch::IndexBatch;
use super::super::queue::Sender;
use super::super::source::Source;
use super::super::stage::Stage;
use super::super::state::Position;
use super::super::stats::Counters;
use super::{LoaderBatch, RetryPolicy, Split, Transform, WorkerItem};
use crate::retry::{retry_blocking, Failure};
use crate::{Error, Result};

/// Everything one worker thread owns.
pub(super) struct WorkerJob<St, Src: Source, T> {
    pub(super) stage: St,
    pub(super) source: Arc<Src>,
    pub(super) transform: Transform<Src::Batch, T>,
    pub(super) retry: RetryPolicy,
    /// Batches announced ahead, and the loader's lookahead session.
    pub(super) lookahead: u64,
    pub(super) session: u64,
    /// This worker's next batches, computed (and announced) ahead: `(k, batch)`.
    pub(super) ahead: VecDeque<(u64, IndexBatch)>,
    pub(super) split: Split,
    pub(super) w: u64,
    pub(super) k: u64,
    pub(super) tx: Sender<WorkerItem<T>>,
    pub(super) exit: oneshot::Sender<()>,
    pub(super) counters: Arc<Counters>,
    pub(super) gathers_in_flight: usize,
}

impl<St, Src, T> WorkerJob<St, Src, T>
where
    St: Stage<Item = IndexBatch>,
    Src: Source,
    T: Send + 'static,
{
    pub(super) fn run(mut self) {
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
        head: Pending<Src::Batch>,
        window: &mut VecDeque<Pending<Src::Batch>>,
    ) -> Option<Result<LoaderBatch<T>>> {
        let mut cx = (self, Some(head), window);
        // The first try is the gather the window already ran; every later one starts the
        // gather again and polls the window until it is done. `Err(None)`: the stream was dropped.
        let result = retry_blocking(
            cx.0.retry,
            &mut cx,
            |(this, head, window), tries| {
                let mut p = match head.take() {
                    Some(p) if tries > 1 => {
                        this.start_again(p, window).ok_or(Failure::Final(None))?
                    }
                    Some(p) => p,
                    None => return Err(Failure::Final(None)),
                };
                let error = match (p.batch.take(), p.result.take()) {
                    (Some(batch), Some(Ok(gathered))) => {
                        let start = std::time::Instant::now();
                        let data =
                            catch_unwind(AssertUnwindSafe(|| (this.transform)(gathered, &batch)));
                        this.counters.transform_time(start);
                        match data {
                            Ok(Ok(data)) => return Ok(LoaderBatch { data, batch }),
                            Ok(Err(e)) => {
                                p.batch = Some(batch);
                                e
                            }
                            Err(panic) => {
                                let e = panicked(this.w, p.pos, panic.as_ref());
                                return Err(Failure::Final(Some(e)));
                            }
                        }
                    }
                    (batch, Some(Err(e))) => {
                        p.batch = batch;
                        e
                    }
                    (_, None) | (None, Some(Ok(_))) => {
                        Error::internal("an asynchronous gather finished with no result".into())
                    }
                };
                // A panic is not retried.
                if matches!(error, Error::WorkerPanicked { .. }) {
                    return Err(Failure::Final(Some(error)));
                }
                this.counters.failed_attempt();
                *head = Some(p);
                Err(Failure::Retry(Some(error)))
            },
            |(this, head, _), error, tries, backoff| match (error, head) {
                (Some(error), Some(p)) => this.wait_to_retry(p.pos, tries, error, backoff),
                _ => false,
            },
        );
        match result {
            Ok(batch) => Some(Ok(batch)),
            Err(Some(error)) => Some(Err(error)),
            Err(None) => None,
        }
    }

    /// Starts `p`'s gather again at the front of the window and polls the window until `p` is
    /// done: `p` again, or `None` if the stream was dropped meanwhile.
    fn start_again(
        &mut self,
        mut p: Pending<Src::Batch>,
        window: &mut VecDeque<Pending<Src::Batch>>,
    ) -> Option<Pending<Src::Batch>> {
        self.start(&mut p);
        window.push_front(p);
        if !self.poll_window(window) {
            return None;
        }
        window.pop_front()
    }

    /// Produces the item at `pos`, trying a failed gather or transform again as the retry
    /// policy allows, sleeping on this thread between tries (a dropped stream cuts the sleep
    /// short and returns the error at once). A panic is not retried.
    fn produce_with_retries(&mut self, pos: Position) -> Result<LoaderBatch<T>> {
        retry_blocking(
            self.retry,
            self,
            |this, _| match catch_unwind(AssertUnwindSafe(|| this.produce(pos))) {
                Ok(Ok(batch)) => Ok(batch),
                Ok(Err(e)) => {
                    this.counters.failed_attempt();
                    Err(Failure::Retry(e))
                }
                Err(panic) => Err(Failure::Final(panicked(this.w, pos, panic.as_ref()))),
            },
            |this, error, tries, backoff| this.wait_to_retry(pos, tries, error, backoff),
        )
    }

    /// Waits `backoff` before another try of the batch at `pos` after `tries` failed with
    /// `error`; false if the stream was dropped meanwhile (the wait ends then).
    fn wait_to_retry(&self, pos: Position, tries: u32, error: &Error, backoff: Duration) -> bool {
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
        !closed
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
        super::super::source::SourceFuture<B>,
        super::super::stats::InFlight,
        Arc<GatherSignal>,
    )>,
    result: Option<Result<B>>,
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
