//! The asynchronous gather window of a prefetch worker thread: up to `gathers_in_flight` gathers
//! started ahead with [`Source::gather_async`], polled together on the worker's thread, their
//! results taken in the order they were started, each retried in its place. The one copy that
//! the seekable [`super::Prefetch`]'s workers and the stream prefetch's workers both run.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::super::batch::IndexBatch;
use super::super::queue::Sender;
use super::super::source::{Source, SourceFuture};
use super::super::state::Position;
use super::super::stats::{Counters, InFlight};
use super::{LoaderBatch, RetryPolicy, Transform};
use crate::retry::{retry_blocking, Failure};
use crate::{Error, Result};

/// Computes the index batch of the window's item `tag` at `pos`: when it is pushed without its
/// batch, and again at a retry if that failed.
pub(crate) type Compute<'a> = dyn FnMut(u64, Position) -> Result<IndexBatch> + 'a;

/// Which worker runs a window: named in panic reports and traces.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WorkerName {
    /// "prefetch worker", "stream prefetch worker".
    pub(crate) what: &'static str,
    pub(crate) w: u64,
}

/// A worker's gathers in flight, oldest first.
pub(crate) struct Window<Src: Source> {
    slots: VecDeque<Slot<Src::Batch>>,
    source: Arc<Src>,
    counters: Arc<Counters>,
    retry: RetryPolicy,
    capacity: usize,
    name: WorkerName,
}

/// One item of the window: its index batch (or why it could not be computed), its gather in
/// flight with the guard that counts it, its result once done.
struct Slot<B> {
    /// The caller's number for the item (the worker's item number, the stream's sequence).
    tag: u64,
    pos: Position,
    /// `None` until computed (`result` says why it could not be).
    batch: Option<IndexBatch>,
    future: Option<(SourceFuture<B>, InFlight, Arc<GatherSignal>)>,
    result: Option<Result<B>>,
    /// When a poll last found its gather pending.
    pending_since: Option<Instant>,
}

impl<Src: Source> Window<Src> {
    /// An empty window of at most `capacity` gathers (`gathers_in_flight`).
    pub(crate) fn new(
        source: Arc<Src>,
        counters: Arc<Counters>,
        retry: RetryPolicy,
        capacity: usize,
        name: WorkerName,
    ) -> Self {
        Self {
            slots: VecDeque::with_capacity(capacity),
            source,
            counters,
            retry,
            capacity: capacity.max(1),
            name,
        }
    }

    pub(crate) fn is_full(&self) -> bool {
        self.slots.len() >= self.capacity
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Adds item `tag` at `pos` and starts its gather: with `batch`, or the batch `compute`
    /// returns now. A failure or a panic becomes the item's result.
    pub(crate) fn push(
        &mut self,
        tag: u64,
        pos: Position,
        batch: Option<IndexBatch>,
        compute: &mut Compute<'_>,
    ) {
        let mut slot = Slot {
            tag,
            pos,
            batch,
            future: None,
            result: None,
            pending_since: None,
        };
        self.start(&mut slot, compute);
        self.slots.push_back(slot);
    }

    /// Starts (or starts again) `p`: its index batch if it has none yet, then its gather.
    fn start(&self, p: &mut Slot<Src::Batch>, compute: &mut Compute<'_>) {
        p.result = None;
        p.future = None;
        p.pending_since = None;
        if p.batch.is_none() {
            match catch_unwind(AssertUnwindSafe(|| compute(p.tag, p.pos))) {
                Ok(Ok(b)) => p.batch = Some(b),
                Ok(Err(e)) => {
                    p.result = Some(Err(e));
                    return;
                }
                Err(panic) => {
                    p.result = Some(Err(panicked(self.name, p.pos, panic.as_ref())));
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
            Err(panic) => p.result = Some(Err(panicked(self.name, p.pos, panic.as_ref()))),
        }
    }

    /// Polls every gather of the window until the first one is done (the others make progress
    /// meanwhile, whatever kind of future the source returns); false if `tx`'s consumer went
    /// away first. At every wake-up, `more` may add items to the window first (a worker fed
    /// by a channel adds the jobs that arrived meanwhile).
    pub(crate) fn poll_head<X>(
        &mut self,
        tx: &Sender<X>,
        more: &mut dyn FnMut(&mut Context<'_>, &mut Self),
    ) -> bool {
        futures::executor::block_on(std::future::poll_fn(|cx| {
            if tx.poll_closed(cx).is_ready() {
                return Poll::Ready(false);
            }
            more(cx, self);
            let name = self.name;
            for p in self.slots.iter_mut() {
                let Some((future, _, signal)) = &mut p.future else {
                    continue;
                };
                // Each gather gets a waker of its own, which notes when it last woke the worker:
                // the gather's end, even if the worker only sees it after a blocked push.
                signal.outer.register(cx.waker());
                let polled_at = Instant::now();
                let waker = futures::task::waker_ref(signal);
                let mut own = Context::from_waker(&waker);
                let polled = catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(&mut own)));
                let done = match polled {
                    Ok(Poll::Pending) => {
                        p.pending_since = Some(polled_at);
                        continue;
                    }
                    Ok(Poll::Ready(r)) => r,
                    Err(panic) => Err(panicked(name, p.pos, panic.as_ref())),
                };
                if let Some((_, in_flight, signal)) = p.future.take() {
                    // A wake-up after the last poll that found it pending is when it finished;
                    // without one, it finished within this poll.
                    let end = signal
                        .last_wake()
                        .filter(|&woke| p.pending_since.is_some_and(|since| woke >= since))
                        .unwrap_or_else(Instant::now);
                    in_flight.ended_at(end);
                }
                p.result = Some(done);
            }
            match self.slots.front() {
                Some(p) if p.future.is_some() => Poll::Pending,
                _ => Poll::Ready(true),
            }
        }))
    }

    /// Takes the window's first item, done (after [`Window::poll_head`]): its tag and its
    /// transform, or its error once the retry policy gives up (each retry waits, the other
    /// gathers of the window going on, then starts the item again, `compute` included if its
    /// batch was never computed); `None` if the window is empty or `tx`'s consumer went away
    /// meanwhile. A panic, and an error another try cannot help (`Error::is_permanent`), are
    /// not retried.
    pub(crate) fn finish_head<X, T>(
        &mut self,
        tx: &Sender<X>,
        transform: &Transform<Src::Batch, T>,
        compute: &mut Compute<'_>,
    ) -> Option<(u64, Result<LoaderBatch<T>>)> {
        let head = self.slots.pop_front()?;
        let tag = head.tag;
        let retry = self.retry;
        let mut cx = (self, Some(head), compute);
        // The first try is the gather the window already ran; every later one starts the
        // gather again and polls the window until it is done. `Err(None)`: the consumer left.
        let result = retry_blocking(
            retry,
            &mut cx,
            |(this, head, compute), tries| {
                let mut p = match head.take() {
                    Some(p) if tries > 1 => this
                        .start_again(p, tx, &mut **compute)
                        .ok_or(Failure::Final(None))?,
                    Some(p) => p,
                    None => return Err(Failure::Final(None)),
                };
                let error = match (p.batch.take(), p.result.take()) {
                    (Some(batch), Some(Ok(gathered))) => {
                        let start = Instant::now();
                        let data = catch_unwind(AssertUnwindSafe(|| transform(gathered, &batch)));
                        this.counters.transform_time(start);
                        match data {
                            Ok(Ok(data)) => return Ok(LoaderBatch { data, batch }),
                            Ok(Err(e)) => {
                                p.batch = Some(batch);
                                e
                            }
                            Err(panic) => {
                                let e = panicked(this.name, p.pos, panic.as_ref());
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
                // Nor is an error another try cannot help (or that was retried below).
                if error.is_permanent() {
                    return Err(Failure::Final(Some(error)));
                }
                *head = Some(p);
                Err(Failure::Retry(Some(error)))
            },
            |(this, head, _), error, tries, backoff| match (error, head) {
                (Some(error), Some(p)) => {
                    wait_to_retry(tx, &this.counters, this.name, p.pos, tries, error, backoff)
                }
                _ => false,
            },
        );
        match result {
            Ok(batch) => Some((tag, Ok(batch))),
            Err(Some(error)) => Some((tag, Err(error))),
            Err(None) => None,
        }
    }

    /// Starts `p`'s gather again at the front of the window and polls the window until `p` is
    /// done: `p` again, or `None` if the consumer went away meanwhile.
    fn start_again<X>(
        &mut self,
        mut p: Slot<Src::Batch>,
        tx: &Sender<X>,
        compute: &mut Compute<'_>,
    ) -> Option<Slot<Src::Batch>> {
        self.start(&mut p, compute);
        self.slots.push_front(p);
        if !self.poll_head(tx, &mut |_, _| {}) {
            return None;
        }
        self.slots.pop_front()
    }
}

/// Waits `backoff` before another try of the batch at `pos` after `tries` failed with `error`;
/// false if `tx`'s consumer went away meanwhile (the wait ends then).
pub(crate) fn wait_to_retry<X>(
    tx: &Sender<X>,
    counters: &Counters,
    name: WorkerName,
    pos: Position,
    tries: u32,
    error: &Error,
    backoff: Duration,
) -> bool {
    tracing::debug!(
        worker = name.w,
        epoch = pos.epoch,
        position = pos.position,
        tries,
        error = %error,
        "prefetch: retrying a failed batch"
    );
    let slept = Instant::now();
    let closed = tx.wait_closed(backoff);
    counters.retry_wait(slept);
    !closed
}

/// The waker of one gather of a window: wakes the worker, and notes when it did last.
#[derive(Default)]
struct GatherSignal {
    outer: futures::task::AtomicWaker,
    last_wake: std::sync::Mutex<Option<Instant>>,
}

impl GatherSignal {
    fn last_wake(&self) -> Option<Instant> {
        match self.last_wake.lock() {
            Ok(g) => *g,
            Err(poisoned) => *poisoned.into_inner(),
        }
    }
}

impl futures::task::ArcWake for GatherSignal {
    fn wake_by_ref(arc_self: &Arc<Self>) {
        let now = Instant::now();
        match arc_self.last_wake.lock() {
            Ok(mut g) => *g = Some(now),
            Err(poisoned) => *poisoned.into_inner() = Some(now),
        }
        arc_self.outer.wake();
    }
}

/// The error of a worker's panic at `pos`.
pub(crate) fn panicked(
    name: WorkerName,
    pos: Position,
    panic: &(dyn std::any::Any + Send),
) -> Error {
    Error::from_panic(
        format!(
            "{} {} (at epoch {} position {})",
            name.what, name.w, pos.epoch, pos.position
        ),
        panic,
    )
}
