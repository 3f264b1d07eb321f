//! [`PrefetchStream`]: gathers the batches of a checkpointable stream of [`IndexBatch`]es on
//! worker threads, in order.

use std::collections::VecDeque;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll};

use futures::channel::oneshot;
use futures::stream::{FusedStream, Stream};
use serde::{Deserialize, Serialize};

use super::super::batch::IndexBatch;
use super::super::prefetch::{
    wait_exits, LoaderBatch, MergePolicy, OnError, PrefetchConfig, RetryPolicy, Transform,
};
use super::super::queue::{self, Receiver, Sender};
use super::super::source::Source;
use super::super::stats::{ConsumerCounters, Counters, LoaderStats};
use super::Checkpoint;
use crate::retry::{retry_blocking, Failure};
use crate::{Error, Result};

/// The checkpoint of a [`PrefetchStream`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefetchStreamState<St> {
    /// The input's state just after the last consumed batch was pulled.
    pub input: St,
}

/// A job: the batch with its sequence number.
type Job = (u64, IndexBatch);

/// A result: the sequence number of its job and the gathered batch.
type Done<T> = (u64, Result<LoaderBatch<T>>);

/// One worker thread's ends.
struct Worker<T> {
    jobs: mpsc::Sender<Job>,
    results: Receiver<Done<T>>,
    exit: Option<oneshot::Receiver<()>>,
}

/// Starts worker `w`.
type Spawn<T> = Arc<dyn Fn(usize) -> Result<Worker<T>> + Send + Sync>;

/// [`Source::lookahead`] (`Some(indices)`) and [`Source::end_lookahead`] (`None`) of the source.
type Announce = Arc<dyn Fn(u64, Option<&[u64]>) + Send + Sync>;

/// Lookahead sessions of the stream prefetches (a range of their own, apart from the seekable
/// prefetch's).
static SESSIONS: AtomicU64 = AtomicU64::new(1 << 63);

/// A batch pulled from the input and not consumed yet.
struct InFlight<St> {
    seq: u64,
    /// The worker gathering it; `None` for an error of the input (in `error`).
    worker: Option<usize>,
    error: Option<Error>,
    /// The input's state just after the batch was pulled.
    state: St,
}

/// The stream of [`super::CheckpointExt::prefetch`].
///
/// # Work split
///
/// The input is pulled on the consumer's side, in [`Stream::poll_next`] (computing index
/// batches is cheap). Each batch pulled goes to the next worker thread in turn, which gathers it
/// from the [`Source`] (with the [`RetryPolicy`] of the configuration), applies the transform,
/// and pushes the result into its own bounded queue. At most
/// `num_workers · worker_queue_size` batches are in flight; the results are handed to the
/// consumer strictly in input order. Unlike the seekable [`super::super::Prefetch`], the
/// workers share one input, so the consumer side hands out the work; it accepts any stage.
///
/// # Checkpoint
///
/// The state is the input's state taken just after the last *consumed* batch was pulled, so
/// batches in flight at a checkpoint are gathered again after a restore, and nothing is lost
/// or repeated. A failed batch (an `Err` from the input, or a gather or transform that failed
/// on every try) under [`OnError::Stop`] ends the stream without being consumed: the checkpoint
/// still points before it. Under [`OnError::Skip`] it counts as consumed.
///
/// # Configuration
///
/// [`PrefetchConfig::num_workers`], [`PrefetchConfig::worker_queue_size`],
/// [`PrefetchConfig::retry`] and [`PrefetchConfig::on_error`] apply. The merge is always
/// strict (a [`MergePolicy::BestEffort`] configuration is refused), and a
/// [`PrefetchConfig::gathers_in_flight`] above 1 is refused (each worker gathers one batch at a
/// time with [`Source::gather`]). With a non-zero [`PrefetchConfig::lookahead`], every batch is
/// announced ([`Source::lookahead`]) when it is pulled and handed to a worker, so the window of
/// announced batches is the batches in flight, not `lookahead` batches per worker;
/// `consumer_queue_size` is not used, results go from the workers' queues to the consumer.
///
/// # Shutdown
///
/// Dropping the stream closes the queues: a worker waiting for work or blocked on a full queue
/// exits at once, a worker in the middle of a gather when the gather returns.
/// [`PrefetchStream::shutdown`] waits for that.
#[must_use = "streams do nothing unless polled"]
pub struct PrefetchStream<S: Checkpoint, T> {
    input: S,
    input_done: bool,
    spawn: Spawn<T>,
    /// Announces a batch to the source (`Some(indices)`) or ends the session (`None`); `None`
    /// without lookahead.
    announce: Option<Announce>,
    session: u64,
    num_workers: usize,
    capacity: usize,
    on_error: OnError,
    /// Started at the first poll (and again after a restore).
    workers: Vec<Worker<T>>,
    next_worker: usize,
    in_flight: VecDeque<InFlight<S::State>>,
    next_seq: u64,
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
    /// [`Error::InvalidConfig`] for an invalid `config`, a best-effort merge or more than one
    /// gather in flight.
    pub fn new<Src: Source>(
        input: S,
        source: Arc<Src>,
        transform: Transform<Src::Batch, T>,
        config: PrefetchConfig,
    ) -> Result<Self> {
        config.validate()?;
        if config.merge != MergePolicy::Strict {
            return Err(Error::InvalidConfig {
                reason: "prefetch over a stream: only the strict merge is possible (the workers \
                         share one input); use the seekable Prefetch for a best-effort merge"
                    .into(),
            });
        }
        if config.gathers_in_flight != 1 {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "prefetch over a stream: gathers_in_flight must be 1, not {} (each worker \
                     gathers one batch at a time, with worker_queue_size batches queued for it); \
                     use the seekable Prefetch for asynchronous gathers",
                    config.gathers_in_flight
                ),
            });
        }
        let queue_size = config.worker_queue_size;
        let retry = config.retry;
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
                retry,
                queue_size,
                Arc::clone(&shared),
            )
        });
        Ok(Self {
            consumed: input.checkpoint(),
            input,
            input_done: false,
            spawn,
            announce,
            session: SESSIONS.fetch_add(1, Ordering::Relaxed),
            num_workers: config.num_workers,
            capacity: config.num_workers.saturating_mul(config.worker_queue_size),
            on_error: config.on_error,
            workers: Vec::new(),
            next_worker: 0,
            in_flight: VecDeque::new(),
            next_seq: 0,
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
        let exits: Vec<_> = self
            .workers
            .iter_mut()
            .filter_map(|w| w.exit.take())
            .collect();
        drop(self);
        wait_exits(exits).await;
    }

    /// A snapshot of what the stream is doing, as [`super::super::Loader::stats`] reports it:
    /// batches and records consumed and produced, failed tries, gathers and records in flight,
    /// time per stage, the gather latency histogram, and who waits for whom (see
    /// [`LoaderStats`]). The index side runs on the consumer's task here, so `index_time` is 0;
    /// the merge is strict, so `lead` and `max_lead` are 0; `consumer_queue_depth` counts the
    /// batches pulled from the input and not consumed yet. Cheap: a few atomic loads and one
    /// lock per worker queue.
    pub fn stats(&self) -> LoaderStats {
        let depths = self.workers.iter().map(|w| w.results.len()).collect();
        let depths = if self.workers.is_empty() {
            vec![0; self.num_workers]
        } else {
            depths
        };
        LoaderStats::new(
            &self.counters,
            &self.consumer,
            depths,
            self.in_flight.len(),
            (0, 0),
        )
    }

    /// Drops whatever the source started for the batches announced and not gathered.
    fn end_session(&self) {
        if let Some(announce) = &self.announce {
            announce(self.session, None);
        }
    }

    /// Ends the stream after a failed batch under [`OnError::Stop`]; the checkpoint stays.
    fn stop(&mut self) {
        self.stopped = true;
        self.in_flight.clear();
        self.workers.clear();
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
            let (worker, error) = match Pin::new(&mut self.input).poll_next(cx) {
                Poll::Pending => break,
                Poll::Ready(None) => {
                    self.input_done = true;
                    break;
                }
                Poll::Ready(Some(Err(e))) => (None, Some(e)),
                Poll::Ready(Some(Ok(batch))) => {
                    if let Some(announce) = &self.announce {
                        announce(self.session, Some(&batch.indices()));
                    }
                    let w = self.next_worker;
                    self.next_worker = (w + 1) % self.num_workers.max(1);
                    let sent = self
                        .workers
                        .get(w)
                        .is_some_and(|worker| worker.jobs.send((self.next_seq, batch)).is_ok());
                    if sent {
                        (Some(w), None)
                    } else {
                        (None, Some(gone()))
                    }
                }
            };
            self.in_flight.push_back(InFlight {
                seq: self.next_seq,
                worker,
                error,
                state: self.input.checkpoint(),
            });
            self.next_seq = self.next_seq.wrapping_add(1);
        }
        Ok(())
    }

    /// The result of the oldest batch in flight, if it is ready.
    fn poll_front(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<LoaderBatch<T>>>> {
        let Some(front) = self.in_flight.front_mut() else {
            return Poll::Ready(None);
        };
        let Some(w) = front.worker else {
            return Poll::Ready(Some(Err(front.error.take().unwrap_or_else(gone))));
        };
        let Some(worker) = self.workers.get(w) else {
            return Poll::Ready(Some(Err(gone())));
        };
        loop {
            match worker.results.poll_pop(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => return Poll::Ready(Some(Err(gone()))),
                // A worker's results come in the order of its jobs: anything before this batch
                // was left by a stopped pass and is dropped.
                Poll::Ready(Some((seq, _))) if seq != front.seq => {}
                Poll::Ready(Some((_, result))) => return Poll::Ready(Some(result)),
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
        let result = match this.poll_front(cx) {
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
            Poll::Ready(Some(result)) => result,
        };
        this.consumer.ready();
        let Some(done) = this.in_flight.pop_front() else {
            return Poll::Ready(Some(result));
        };
        if result.is_err() && this.on_error == OnError::Stop {
            this.stop();
        } else {
            this.consumed = done.state;
            if let Ok(b) = &result {
                this.consumer.batches = this.consumer.batches.saturating_add(1);
                this.consumer.records = this
                    .consumer
                    .records
                    .saturating_add(b.batch.samples.len() as u64);
            }
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
        PrefetchStreamState {
            input: self.consumed.clone(),
        }
    }

    /// Restores the input and drops every batch in flight; the workers are started again at
    /// the next poll.
    fn restore(&mut self, state: Self::State) -> Result<()> {
        self.end_session();
        self.session = SESSIONS.fetch_add(1, Ordering::Relaxed);
        self.in_flight.clear();
        self.workers.clear();
        self.next_worker = 0;
        self.input_done = false;
        self.stopped = false;
        self.input.restore(state.input.clone())?;
        self.consumed = state.input;
        Ok(())
    }
}

fn gone() -> Error {
    Error::WorkerGone {
        what: "a stream prefetch worker",
    }
}

fn spawn_worker<Src: Source, T: Send + 'static>(
    w: usize,
    source: Arc<Src>,
    transform: Transform<Src::Batch, T>,
    retry: RetryPolicy,
    queue_size: usize,
    counters: Arc<Counters>,
) -> Result<Worker<T>> {
    let (jobs_tx, jobs_rx) = mpsc::channel::<Job>();
    let (tx, rx) = queue::bounded(queue_size);
    let (exit_tx, exit_rx) = oneshot::channel::<()>();
    std::thread::Builder::new()
        .name(format!("zrecord-stream-prefetch-{w}"))
        .spawn(move || {
            while let Ok((seq, batch)) = jobs_rx.recv() {
                if tx.is_closed() {
                    break;
                }
                let result = produce(w, &*source, &transform, retry, &tx, &counters, batch);
                if let Ok(b) = &result {
                    counters.produced(b.batch.samples.len());
                }
                let pushed = std::time::Instant::now();
                if tx.push((seq, result)).is_err() {
                    break;
                }
                counters.blocked(pushed);
            }
            // Release the source before announcing the exit.
            drop((source, transform, tx));
            drop(exit_tx);
        })
        .map_err(|e| Error::ThreadSpawn {
            what: "a stream prefetch worker",
            reason: e.to_string(),
        })?;
    Ok(Worker {
        jobs: jobs_tx,
        results: rx,
        exit: Some(exit_rx),
    })
}

/// Gathers and transforms `batch`, trying again as `retry` allows (sleeping on this thread; a
/// dropped stream cuts the sleep short). A panic is not retried.
fn produce<Src: Source, T>(
    w: usize,
    source: &Src,
    transform: &Transform<Src::Batch, T>,
    retry: RetryPolicy,
    tx: &Sender<Done<T>>,
    counters: &Arc<Counters>,
    batch: IndexBatch,
) -> Result<LoaderBatch<T>> {
    retry_blocking(
        retry,
        &mut (),
        |_, _| {
            let attempt = catch_unwind(AssertUnwindSafe(|| {
                let indices = batch.indices();
                let gathered = {
                    let _in_flight = counters.gather_started(indices.len());
                    source.gather(&indices)?
                };
                let start = std::time::Instant::now();
                let data = transform(gathered, &batch)?;
                counters.transform_time(start);
                Ok(data)
            }));
            match attempt {
                Ok(Ok(data)) => Ok(data),
                Ok(Err(e)) => {
                    counters.failed_attempt();
                    Err(Failure::Retry(e))
                }
                Err(panic) => {
                    let message = panic
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "non-string panic payload".into());
                    Err(Failure::Final(Error::WorkerPanicked {
                        what: format!(
                            "stream prefetch worker {w} (batch at epoch {} position {})",
                            batch.epoch, batch.position
                        ),
                        message,
                    }))
                }
            }
        },
        |_, _, _, backoff| {
            let slept = std::time::Instant::now();
            let closed = tx.wait_closed(backoff);
            counters.retry_wait(slept);
            !closed
        },
    )
    .map(|data| LoaderBatch { data, batch })
}

impl<S: Checkpoint, T> Drop for PrefetchStream<S, T> {
    fn drop(&mut self) {
        self.end_session();
    }
}

// Nothing in a `PrefetchStream` is structurally pinned.
impl<S: Checkpoint + Unpin, T> Unpin for PrefetchStream<S, T> {}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use futures::executor::block_on;
    use futures::StreamExt;

    use super::super::testing::{all, every_split, sampler};
    use super::super::CheckpointExt;
    use super::*;
    use crate::pipeline::{BatchConfig, MemorySource, Stage, StageExt};

    fn source(n: u64) -> Arc<MemorySource> {
        Arc::new(MemorySource::new(
            (0..n).map(|i| vec![i as u8; 2]).collect(),
        ))
    }

    type Item = (u64, u64, Vec<u64>, Vec<Vec<u8>>);

    fn item(b: LoaderBatch<Vec<Vec<u8>>>) -> Item {
        (b.epoch(), b.position(), b.indices(), b.data)
    }

    #[test]
    fn equals_the_seekable_prefetch_and_resumes_everywhere() {
        let src = source(17);
        for workers in [1, 2, 3] {
            let config = PrefetchConfig::default()
                .num_workers(workers)
                .worker_queue_size(1);
            let batches = BatchConfig::new(4);
            let got = every_split(
                || {
                    sampler(17, 2)
                        .cursor()
                        .batch(batches)
                        .unwrap()
                        .prefetch(Arc::clone(&src), config)
                        .unwrap()
                },
                item,
            );
            let seekable = sampler(17, 2)
                .batch(batches)
                .unwrap()
                .prefetch(Arc::clone(&src), config)
                .unwrap();
            let expected: Vec<Item> = block_on(seekable.map(|b| item(b.unwrap())).collect());
            assert_eq!(got, expected, "{workers} workers");
        }
    }

    /// Fails every gather that includes record 5.
    struct Failing(MemorySource);

    impl Source for Failing {
        type Batch = Vec<Vec<u8>>;

        fn len(&self) -> u64 {
            self.0.len()
        }

        fn item_len(&self, index: u64) -> Result<u64> {
            self.0.item_len(index)
        }

        fn gather(&self, indices: &[u64]) -> Result<Self::Batch> {
            if indices.contains(&5) {
                return Err(Error::IndexOutOfRange { index: 5, len: 0 });
            }
            self.0.gather(indices)
        }
    }

    #[test]
    fn a_failed_batch_stops_the_stream_and_is_not_consumed() {
        let src = Arc::new(Failing(MemorySource::new(vec![vec![1]; 12])));
        let config = PrefetchConfig::default()
            .num_workers(2)
            .retry(RetryPolicy::none());
        let make = || {
            sampler(12, 1)
                .cursor()
                .batch(BatchConfig::new(2))
                .unwrap()
                .prefetch(Arc::clone(&src), config)
                .unwrap()
        };
        let mut s = make();
        let mut ok = 0;
        let failed = loop {
            match block_on(s.next()).unwrap() {
                Ok(_) => ok += 1,
                Err(e) => break e,
            }
        };
        assert!(matches!(failed, Error::IndexOutOfRange { index: 5, .. }));
        assert!(block_on(s.next()).is_none());
        let state = s.checkpoint();
        let mut again = make();
        again.restore(state.clone()).unwrap();
        // The failed batch comes first again, in a fresh stream and in the stopped one.
        assert!(block_on(again.next()).unwrap().is_err());
        s.restore(state).unwrap();
        assert!(block_on(s.next()).unwrap().is_err());
        let skipping = sampler(12, 1)
            .cursor()
            .batch(BatchConfig::new(2))
            .unwrap()
            .prefetch(Arc::clone(&src), config.on_error(OnError::Skip))
            .unwrap();
        let results: Vec<bool> = block_on(skipping.map(|r| r.is_ok()).collect());
        assert_eq!(results.len(), 6);
        assert_eq!(results.iter().filter(|ok| !**ok).count(), 1);
        assert_eq!(results.iter().take_while(|ok| **ok).count(), ok);
    }

    /// Records the announcements and the sessions ended.
    #[derive(Default)]
    struct Announcing {
        inner: MemorySource,
        announced: std::sync::Mutex<Vec<(u64, Vec<u64>)>>,
        ended: std::sync::Mutex<Vec<u64>>,
    }

    impl Source for Announcing {
        type Batch = Vec<Vec<u8>>;

        fn len(&self) -> u64 {
            self.inner.len()
        }

        fn item_len(&self, index: u64) -> Result<u64> {
            self.inner.item_len(index)
        }

        fn gather(&self, indices: &[u64]) -> Result<Self::Batch> {
            self.inner.gather(indices)
        }

        fn lookahead(&self, session: u64, indices: &[u64]) {
            self.announced
                .lock()
                .unwrap()
                .push((session, indices.to_vec()));
        }

        fn end_lookahead(&self, session: u64) {
            self.ended.lock().unwrap().push(session);
        }
    }

    #[test]
    fn with_lookahead_every_batch_is_announced_once_and_the_session_ends_on_drop() {
        let src = Arc::new(Announcing {
            inner: MemorySource::new(vec![vec![0]; 10]),
            ..Announcing::default()
        });
        let s = sampler(10, 1)
            .cursor()
            .batch(BatchConfig::new(3))
            .unwrap()
            .prefetch(Arc::clone(&src), PrefetchConfig::default().lookahead(2))
            .unwrap();
        let batches = all(s, |b| b.indices());
        let announced = src.announced.lock().unwrap().clone();
        let sessions: Vec<u64> = announced.iter().map(|(s, _)| *s).collect();
        let indices: Vec<Vec<u64>> = announced.into_iter().map(|(_, i)| i).collect();
        assert_eq!(indices, batches);
        assert!(sessions.windows(2).all(|w| w[0] == w[1]));
        assert_eq!(*src.ended.lock().unwrap(), sessions[..1]);
    }

    #[test]
    fn best_effort_and_async_gathers_are_refused() {
        let src = source(4);
        let batches = || sampler(4, 1).cursor().batch(BatchConfig::new(2)).unwrap();
        let best_effort = PrefetchConfig::default().merge(MergePolicy::BestEffort {
            max_lead: 2,
            max_skips_per_round: 1,
        });
        assert!(matches!(
            batches().prefetch(Arc::clone(&src), best_effort),
            Err(Error::InvalidConfig { .. })
        ));
        let window = PrefetchConfig::default().gathers_in_flight(2);
        assert!(matches!(
            batches().prefetch(Arc::clone(&src), window),
            Err(Error::InvalidConfig { .. })
        ));
        assert_eq!(
            all(
                batches().prefetch(src, PrefetchConfig::default()).unwrap(),
                item
            )
            .len(),
            2
        );
    }
}
