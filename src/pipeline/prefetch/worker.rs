//! A prefetch worker thread: computes its share of the index stage's batches, announces them to
//! the source ahead, gathers (blocking, or several gathers in flight), transforms, retries, and
//! pushes the results into its bounded queue.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use futures::channel::oneshot;

use super::super::batch::IndexBatch;
use super::super::queue::Sender;
use super::super::source::Source;
use super::super::stage::Stage;
use super::super::state::Position;
use super::super::stats::Counters;
use super::window::{Window, WorkerName};
use super::{deliver, Done, LoaderBatch, Producer, RetryPolicy, Split, Transform};
use crate::Result;

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
    pub(super) tx: Sender<Done<T>>,
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
        if !deliver(&self.tx, &self.counters, self.k, result) {
            return false;
        }
        match self.k.checked_add(1) {
            Some(k) => {
                self.k = k;
                true
            }
            None => false,
        }
    }

    /// The worker with up to `gathers_in_flight` gathers started ahead ([`Source::gather_async`]),
    /// their results taken in order ([`Window`]): the same items as
    /// [`WorkerJob::run_blocking`], each retried in its place (a failed index computation as
    /// well as a failed gather), a panic reported as the batch's error. A dropped stream ends the
    /// worker at once, dropping the futures in flight, even those that would never finish.
    fn run_async(&mut self) {
        let mut window = Window::new(
            Arc::clone(&self.source),
            Arc::clone(&self.counters),
            self.retry,
            self.gathers_in_flight,
            self.name(),
        );
        let mut issue = self.k;
        loop {
            if self.tx.is_closed() {
                break;
            }
            self.announce();
            while !window.is_full() {
                if self.split.count(self.w).is_some_and(|c| issue >= c) {
                    break;
                }
                let Some(g) = self.split.global(self.w, issue) else {
                    break;
                };
                let pos = self.split.position(g);
                window.push(issue, pos, None, &mut |k, pos| {
                    compute(&mut self.stage, &self.ahead, &self.counters, k, pos)
                });
                let Some(next) = issue.checked_add(1) else {
                    break;
                };
                issue = next;
            }
            if window.is_empty() || !window.poll_head(&self.tx, &mut |_, _| {}) {
                break;
            }
            let finished = window.finish_head(&self.tx, &self.transform, &mut |k, pos| {
                compute(&mut self.stage, &self.ahead, &self.counters, k, pos)
            });
            let Some((_, result)) = finished else {
                break;
            };
            if !self.deliver(result) {
                break;
            }
        }
    }

    fn name(&self) -> WorkerName {
        WorkerName {
            what: "prefetch worker",
            w: self.w,
        }
    }

    /// Produces the item at `pos` ([`Producer::produce`]): its index batch the lookahead's if
    /// computed there, else computed now.
    fn produce_with_retries(&mut self, pos: Position) -> Result<LoaderBatch<T>> {
        let name = self.name();
        let k = self.k;
        let Self {
            stage,
            source,
            transform,
            retry,
            ahead,
            tx,
            counters,
            ..
        } = self;
        let producer = Producer {
            name,
            source: &**source,
            transform,
            retry: *retry,
            counters,
        };
        producer.produce(tx, pos, &mut || {
            let computed = ahead
                .front()
                .filter(|(a, _)| *a == k)
                .map(|(_, b)| b.clone());
            match computed {
                Some(b) => Ok(b),
                None => {
                    let start = std::time::Instant::now();
                    let b = stage.get(pos.epoch, pos.position)?;
                    counters.index_time(start);
                    Ok(b)
                }
            }
        })
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
}

/// The index batch of a worker's item `k` at `pos`: the lookahead's if computed there.
fn compute<St: Stage<Item = IndexBatch>>(
    stage: &mut St,
    ahead: &VecDeque<(u64, IndexBatch)>,
    counters: &Counters,
    k: u64,
    pos: Position,
) -> Result<IndexBatch> {
    let start = std::time::Instant::now();
    let computed = match ahead.iter().find(|(a, _)| *a == k) {
        Some((_, b)) => Ok(b.clone()),
        None => stage.get(pos.epoch, pos.position),
    };
    counters.index_time(start);
    computed
}

/// Waits until every worker whose exit end is in `exits` has dropped its end (on exit).
pub(crate) async fn wait_exits(exits: Vec<oneshot::Receiver<()>>) {
    for exit in exits {
        // `Canceled` is the expected outcome: the worker dropped its end on exit.
        let _ = exit.await;
    }
}
