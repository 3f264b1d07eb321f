//! A prefetch worker thread, for both index sides: takes its jobs from its [`Jobs`] (its own
//! share of a seekable stage, computed and announced ahead: [`OwnShare`]; or the batches the
//! stream prefetch's consumer deals it), gathers them (one at a time with the [`Producer`], or
//! several in flight in the [`Window`]), transforms, retries, and pushes the results into its
//! bounded queue in its jobs' order.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::channel::{mpsc, oneshot};
use futures::stream::StreamExt;

use super::super::batch::IndexBatch;
use super::super::queue::{self, Sender};
use super::super::source::Source;
use super::super::stage::Stage;
use super::super::state::Position;
use super::super::stats::Counters;
use super::consumer::Queue;
use super::window::{Window, WorkerName};
use super::{deliver, Done, PrefetchConfig, Producer, RetryPolicy, Split, Transform};
use crate::{Error, Result};

/// A worker's job: its number (the worker's item count, or the stream's sequence number), its
/// place, and its index batch (`None`: [`Jobs::compute`] computes it).
pub(crate) type Job = (u64, Position, Option<IndexBatch>);

/// Where a worker's index batches come from: the one difference between the seekable
/// prefetch's workers and the stream prefetch's.
pub(crate) trait Jobs {
    /// The next job if there is one now; `Ready(None)` once there will be none.
    fn poll_job(&mut self, cx: &mut Context<'_>) -> Poll<Option<Job>>;

    /// The index batch of job `tag` at `pos`, for a job handed out without one (and again at a
    /// retry if that failed).
    fn compute(&mut self, tag: u64, pos: Position) -> Result<IndexBatch>;

    /// Job `tag`'s result was pushed; false if the worker is done.
    fn delivered(&mut self, tag: u64) -> bool;
}

/// Everything one worker thread owns.
pub(crate) struct WorkerLoop<J, Src: Source, T> {
    pub(crate) jobs: J,
    pub(crate) name: WorkerName,
    pub(crate) source: Arc<Src>,
    pub(crate) transform: Transform<Src::Batch, T>,
    pub(crate) retry: RetryPolicy,
    pub(crate) gathers_in_flight: usize,
    pub(crate) tx: Sender<Done<T>>,
    pub(crate) exit: oneshot::Sender<()>,
    pub(crate) counters: Arc<Counters>,
}

impl<J, Src, T> WorkerLoop<J, Src, T>
where
    J: Jobs + Send + 'static,
    Src: Source,
    T: Send + 'static,
{
    /// Starts the worker thread, named `thread`.
    ///
    /// # Errors
    /// [`Error::ThreadSpawn`] if the thread cannot be spawned (`what` names the worker).
    pub(crate) fn spawn(self, thread: String, what: &'static str) -> Result<()> {
        std::thread::Builder::new()
            .name(thread)
            .spawn(move || self.run())
            .map(drop)
            .map_err(|e| Error::ThreadSpawn {
                what,
                reason: e.to_string(),
            })
    }
}

impl<J: Jobs, Src: Source, T> WorkerLoop<J, Src, T> {
    fn run(mut self) {
        if self.gathers_in_flight > 1 {
            self.run_window();
        } else {
            self.run_blocking();
        }
        let Self {
            jobs,
            source,
            transform,
            tx,
            exit,
            ..
        } = self;
        // Release the source (and the stage) before announcing the exit: after `shutdown`
        // resolves, the worker holds nothing.
        drop((jobs, source, transform, tx));
        drop(exit);
    }

    /// Waits for the next job; `None` once there is none or the consumer went away.
    fn next_job(&mut self) -> Option<Job> {
        if self.tx.is_closed() {
            return None;
        }
        // A job that is there now (a seekable worker's always is) needs no waiting.
        let mut now = Context::from_waker(futures::task::noop_waker_ref());
        if let Poll::Ready(job) = self.jobs.poll_job(&mut now) {
            return job;
        }
        let Self { jobs, tx, .. } = self;
        futures::executor::block_on(std::future::poll_fn(|cx| {
            if tx.poll_closed(cx).is_ready() {
                return Poll::Ready(None);
            }
            jobs.poll_job(cx)
        }))
    }

    /// One gather at a time, blocking this thread ([`Producer::produce`]).
    fn run_blocking(&mut self) {
        while let Some((tag, pos, batch)) = self.next_job() {
            let span = tracing::trace_span!(
                "zrecord.batch",
                worker = self.name.w,
                epoch = pos.epoch,
                position = pos.position
            );
            let _entered = span.enter();
            let Self {
                jobs,
                name,
                source,
                transform,
                retry,
                tx,
                counters,
                ..
            } = self;
            let producer = Producer {
                name: *name,
                source: &**source,
                transform,
                retry: *retry,
                counters,
            };
            let mut batch = batch;
            let result = producer.produce(tx, pos, &mut || match batch.take() {
                Some(b) => Ok(b),
                None => jobs.compute(tag, pos),
            });
            if !deliver(tx, counters, tag, result) || !jobs.delivered(tag) {
                break;
            }
        }
    }

    /// Up to `gathers_in_flight` gathers started ahead ([`Source::gather_async`]), their
    /// results taken in order ([`Window`]): the same items as [`WorkerLoop::run_blocking`],
    /// each retried in its place (a failed index computation as well as a failed gather), a
    /// panic reported as the batch's error. Jobs are taken into the window as they come (while
    /// it has room, also while it waits for its oldest gather). A consumer that went away ends
    /// the worker at once, dropping the futures in flight, even those that would never finish.
    fn run_window(&mut self) {
        let mut window = Window::new(
            Arc::clone(&self.source),
            Arc::clone(&self.counters),
            self.retry,
            self.gathers_in_flight,
            self.name,
        );
        let mut ended = false;
        loop {
            if window.is_empty() {
                let Some((tag, pos, batch)) = self.next_job() else {
                    break;
                };
                let jobs = &mut self.jobs;
                window.push(tag, pos, batch, &mut |t, p| jobs.compute(t, p));
            }
            let jobs = &mut self.jobs;
            let mut more = |cx: &mut Context<'_>, window: &mut Window<Src>| {
                while !ended && !window.is_full() {
                    match jobs.poll_job(cx) {
                        Poll::Ready(Some((tag, pos, batch))) => {
                            window.push(tag, pos, batch, &mut |t, p| jobs.compute(t, p));
                        }
                        Poll::Ready(None) => ended = true,
                        Poll::Pending => break,
                    }
                }
            };
            if !window.poll_head(&self.tx, &mut more) {
                break;
            }
            let jobs = &mut self.jobs;
            let finished =
                window.finish_head(&self.tx, &self.transform, &mut |t, p| jobs.compute(t, p));
            let Some((tag, result)) = finished else {
                break;
            };
            if !deliver(&self.tx, &self.counters, tag, result) || !self.jobs.delivered(tag) {
                break;
            }
        }
    }
}

/// The jobs of a seekable prefetch's worker `w`: its own share of the stage, the global items
/// `base + w + k·N` ([`Split`]), each computed by the worker itself; the next `lookahead` of
/// them computed ahead and announced to the source ([`Source::lookahead`]).
pub(super) struct OwnShare<St, Src> {
    pub(super) stage: St,
    pub(super) source: Arc<Src>,
    pub(super) counters: Arc<Counters>,
    /// Batches announced ahead, and the loader's lookahead session.
    pub(super) lookahead: u64,
    pub(super) session: u64,
    /// This worker's next batches, computed (and announced) ahead: `(k, batch)`.
    pub(super) ahead: VecDeque<(u64, IndexBatch)>,
    pub(super) split: Split,
    pub(super) w: u64,
    /// The next item to deliver (the lookahead counts from it).
    pub(super) k: u64,
    /// The next item to hand out; `None` past item `u64::MAX`.
    pub(super) issue: Option<u64>,
}

impl<St, Src> Jobs for OwnShare<St, Src>
where
    St: Stage<Item = IndexBatch>,
    Src: Source,
{
    fn poll_job(&mut self, _: &mut Context<'_>) -> Poll<Option<Job>> {
        let Some(issue) = self.issue else {
            return Poll::Ready(None);
        };
        if self.split.count(self.w).is_some_and(|c| issue >= c) {
            return Poll::Ready(None);
        }
        let Some(g) = self.split.global(self.w, issue) else {
            return Poll::Ready(None);
        };
        let pos = self.split.position(g);
        self.announce();
        self.issue = issue.checked_add(1);
        Poll::Ready(Some((issue, pos, None)))
    }

    /// The lookahead's batch if computed there, else computed now.
    fn compute(&mut self, k: u64, pos: Position) -> Result<IndexBatch> {
        let start = std::time::Instant::now();
        let computed = match self.ahead.iter().find(|(a, _)| *a == k) {
            Some((_, b)) => Ok(b.clone()),
            None => self.stage.get(pos.epoch, pos.position),
        };
        self.counters.index_time(start);
        computed
    }

    /// Moves on past item `k`; false past item `u64::MAX`, where there is no global position
    /// (the merge then reports the worker as exited rather than seeing the last item twice).
    fn delivered(&mut self, k: u64) -> bool {
        match k.checked_add(1) {
            Some(next) => {
                self.k = next;
                true
            }
            None => false,
        }
    }
}

impl<St, Src> OwnShare<St, Src>
where
    St: Stage<Item = IndexBatch>,
    Src: Source,
{
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

/// Waits until every worker whose exit end is in `exits` has dropped its end (on exit).
pub(crate) async fn wait_exits(exits: Vec<oneshot::Receiver<()>>) {
    for exit in exits {
        // `Canceled` is the expected outcome: the worker dropped its end on exit.
        let _ = exit.await;
    }
}

/// The jobs of a stream prefetch's worker: the batches the consumer deals it, each with its
/// sequence number; none once the stream is dropped, stopped or restored.
struct Dealt {
    jobs: mpsc::UnboundedReceiver<(u64, IndexBatch)>,
}

impl Jobs for Dealt {
    fn poll_job(&mut self, cx: &mut Context<'_>) -> Poll<Option<Job>> {
        self.jobs.poll_next_unpin(cx).map(|job| {
            job.map(|(seq, batch)| {
                let pos = Position {
                    epoch: batch.epoch,
                    position: batch.position,
                };
                (seq, pos, Some(batch))
            })
        })
    }

    /// Every job comes with its batch: there is nothing to compute.
    fn compute(&mut self, _: u64, _: Position) -> Result<IndexBatch> {
        Err(Error::internal(
            "a stream prefetch job without its batch".into(),
        ))
    }

    fn delivered(&mut self, _: u64) -> bool {
        true
    }
}

/// Starts worker `w` of a stream prefetch: it gathers the batches dealt to it.
pub(super) fn spawn_dealt<Src: Source, T: Send + 'static>(
    w: usize,
    source: Arc<Src>,
    transform: Transform<Src::Batch, T>,
    config: PrefetchConfig,
    counters: Arc<Counters>,
) -> Result<Queue<T>> {
    let (jobs_tx, jobs) = mpsc::unbounded::<(u64, IndexBatch)>();
    let (tx, rx) = queue::bounded(config.worker_queue_size);
    let (exit_tx, exit_rx) = oneshot::channel::<()>();
    let worker = WorkerLoop {
        jobs: Dealt { jobs },
        name: WorkerName {
            what: "stream prefetch worker",
            w: w as u64,
        },
        source,
        transform,
        retry: config.retry,
        gathers_in_flight: config.gathers_in_flight,
        tx,
        exit: exit_tx,
        counters,
    };
    worker.spawn(
        format!("zrecord-stream-prefetch-{w}"),
        "a stream prefetch worker",
    )?;
    Ok(Queue {
        rx,
        exit: Some(exit_rx),
        jobs: Some(jobs_tx),
    })
}
