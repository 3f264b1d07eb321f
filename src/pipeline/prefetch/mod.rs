//! Prefetch: N worker threads gather the batches of an index stage from a [`Source`] into bounded
//! queues, and a merge hands them to the async consumer.
//!
//! The rest of this documentation is on [`Prefetch`], where rustdoc shows it: the module is private
//! and `zrecord::pipeline` re-exports its public items.

mod config;
mod consumer;
mod dealer;
mod produce;
mod shares;
mod split;
mod window;
mod worker;

use std::fmt;
use std::sync::Arc;

pub use config::{
    MergePolicy, OnError, PrefetchConfig, RetryPolicy, MAX_NUM_WORKERS, MAX_QUEUE_SIZE,
};
use consumer::{Core, Counts, IndexSide};
use dealer::Dealer;
pub use dealer::PrefetchStreamState;
pub(crate) use produce::{deliver, Done, Producer};
use shares::Shares;
pub(crate) use split::{fresh_state, restore, Split};
pub(crate) use window::WorkerName;
pub(crate) use worker::{wait_exits, WorkerLoop};

use super::batch::IndexBatch;
use super::checkpoint::Checkpoint;
use super::source::Source;
use super::stage::Stage;
use super::state::PrefetchState;
use super::stats::{Counters, LoaderStats};
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

/// What a [`Prefetch`] runs over: `()` for a seekable stage (the stage goes to the workers, each
/// of which runs its own share of it), or any [`Checkpoint`] stream of index batches (the
/// consumer pulls it and deals the batches out). Implemented for exactly these; it only names
/// the two forms in [`Prefetch`]'s type.
pub trait PrefetchInput: Unpin + Sized + sealed::Sealed {}

mod sealed {
    use super::{Checkpoint, Dealer, IndexBatch, IndexSide, Shares};

    /// The bookkeeping of the merge for each form (private: the one consumer asks it).
    pub trait Sealed: Sized {
        type Side: IndexSide<Self> + Send;
    }

    impl Sealed for () {
        type Side = Shares;
    }

    impl<S> Sealed for S
    where
        S: Checkpoint<Item = crate::Result<IndexBatch>> + Unpin,
    {
        type Side = Dealer<S::State>;
    }
}

impl PrefetchInput for () {}

impl<S> PrefetchInput for S where S: Checkpoint<Item = Result<IndexBatch>> + Unpin {}

/// The prefetching, merging stream: worker threads gather the batches of an index stage or
/// stream from a [`Source`] into bounded queues, and a merge hands them to the async consumer.
///
/// One type, two forms, named by its input `S` ([`PrefetchInput`]):
///
/// - **Over a seekable [`Stage`]** (`Prefetch<T>`, made by [`Prefetch::new`],
///   [`Prefetch::resume`] or [`super::StageExt::prefetch`]): each worker runs its own share of
///   the stage without coordination, and the checkpoint is a [`PrefetchState`] (which even
///   resumes with another worker count, and takes part in an elastic resume).
/// - **Over a [`Checkpoint`] stream** (`Prefetch<T, S>`, made by [`Prefetch::from_stream`] or
///   [`super::CheckpointExt::prefetch`]): any stream of index batches, a user's own stage
///   included. The consumer pulls the stream on its own task (computing index batches is
///   cheap) and deals each batch to the next worker in turn; the prefetch is itself a
///   [`Checkpoint`] stream, whose state is a [`PrefetchStreamState`].
///
/// Everything else is one code path: the workers ([`PrefetchConfig::retry`],
/// [`PrefetchConfig::gathers_in_flight`], [`PrefetchConfig::lookahead`], the transform), the
/// merge, the consumer's buffer, errors, the stats and the shutdown.
///
/// # Work split
///
/// Over a stage, number its items globally, `g = epoch * epoch_len + position`. Worker `w` of
/// `N` runs the items `g = base + w + k·N` for `k = 0, 1, …` (its own copy of the stage): it
/// computes the [`IndexBatch`], gathers it with [`Source::gather`], applies the optional
/// transform, and pushes the result into its own queue of `worker_queue_size` items, blocking
/// (its own thread, never a runtime worker) while the queue is full. Over a stream, worker `w`
/// gathers the batches the consumer dealt it, in the order dealt.
///
/// # Errors and retries
///
/// A gather or transform that fails is tried again on the worker's thread, as
/// [`PrefetchConfig::retry`] says (3 tries in all by default, 10 ms apart, then 20 ms, …; the
/// thread sleeps, never a runtime worker). A panic is not retried, nor an error another try
/// cannot help (corruption, an index out of range, a failed object-store request, whose request
/// had its own retries: see [`PrefetchConfig::retry`]). What fails on every try (or an `Err`
/// of the input stream) reaches the consumer as `Err` in the place of its batch, and then
/// [`PrefetchConfig::on_error`] decides:
///
/// - [`OnError::Stop`] (default): the stream ends after the error. The failed batch is not
///   consumed: the checkpoint still points at it, so a stream resumed from that checkpoint
///   tries it first.
/// - [`OnError::Skip`]: the failed batch counts as consumed and the stream goes on; a resume
///   does not try it again, so the batch is lost for this pass.
///
/// # Merge (TinyGrad4 semantics)
///
/// - [`MergePolicy::Strict`] (default): over a stage, round-robin in worker order `0..N`,
///   exhausted workers skipped; because of the split above, the merged order is exactly the
///   global order, the same as a single sequential pass over the stage, whatever the worker
///   count. Over a stream, the input's order.
/// - [`MergePolicy::BestEffort`]: scans the workers (from the one after the last taken) without
///   waiting and takes the first ready batch, but never from a worker whose merged batches
///   would then be more than `max_lead` ahead of the batches *consumed* from the slowest worker
///   with batches left (so the consumer never sees one worker more than `max_lead` batches
///   ahead of another, however large the consumer buffer); after `max_skips_per_round` workers
///   found empty in one scan it stops scanning and waits. A slow batch then holds back only its
///   own worker's later batches. Not deterministic.
///
/// Merged batches wait for the consumer in a buffer of `consumer_queue_size`. Memory is bounded
/// end to end: at most `N · (worker_queue_size + gathers_in_flight) + consumer_queue_size`
/// batches exist at any time (`gathers_in_flight` is 1 unless set).
///
/// # Checkpoint
///
/// The checkpoint is taken at consumption; a batch that failed under [`OnError::Stop`] is not
/// consumed. Prefetched batches that were not consumed are produced again after a resume, so
/// the resumed stream continues exactly after the last consumed batch (strict), or loses and
/// repeats nothing (best effort).
///
/// - Over a stage ([`Prefetch::state`]): per worker, the number of its items consumed and its
///   next position; and the next worker of the merge. A strict checkpoint can even be resumed
///   with another worker count.
/// - Over a stream ([`Checkpoint::checkpoint`]): the input's state just after the last batch of
///   the consumed prefix was pulled, plus, under the best-effort merge, which later batches were
///   consumed already (a restored stream pulls and skips them). It restores with any worker
///   count and either merge.
///
/// # Shutdown
///
/// Dropping the [`Prefetch`] closes the queues: a worker waiting for work or blocked on a full
/// queue exits at once, a worker in the middle of a gather when the gather returns (an
/// asynchronous gather in flight is dropped). [`Prefetch::shutdown`] waits for that.
#[must_use = "a prefetch does nothing unless polled"]
pub struct Prefetch<T, S: PrefetchInput = ()> {
    /// First, so it is dropped first: the queues close (the workers stop) before the side ends
    /// the lookahead session.
    core: Core<T>,
    /// The stream the consumer deals from; `()` over a stage (its workers hold it).
    input: S,
    side: <S as sealed::Sealed>::Side,
}

// Nothing in a `Prefetch` is structurally pinned.
impl<T, S: PrefetchInput> Unpin for Prefetch<T, S> {}

impl<T, S: PrefetchInput> fmt::Debug for Prefetch<T, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prefetch")
            .field("num_workers", &self.core.counts.len())
            .field("policy", &self.core.policy)
            .field("ready", &self.core.ready.len())
            .field("stopped", &self.core.stopped)
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
        let (side, core) = Shares::start(stage, source, transform, config, None)?;
        Ok(Self {
            input: (),
            side,
            core,
        })
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
        let (side, core) = Shares::start(stage, source, transform, config, Some(state))?;
        Ok(Self {
            input: (),
            side,
            core,
        })
    }
}

impl<T> Prefetch<T> {
    /// The checkpoint after the last consumed item.
    pub fn state(&self) -> PrefetchState {
        self.side.state.clone()
    }
}

impl<T, S> Prefetch<T, S>
where
    T: Send + 'static,
    S: Checkpoint<Item = Result<IndexBatch>> + Unpin,
{
    /// Gathers the batches of `input` from `source` on `config.num_workers` threads, applying
    /// `transform` on the worker threads. The threads start at the first poll.
    /// [`super::CheckpointExt::prefetch`] and [`super::CheckpointExt::prefetch_with`] call it.
    ///
    /// # Errors
    /// [`crate::Error::InvalidConfig`] for an invalid `config`.
    pub fn from_stream<Src: Source>(
        input: S,
        source: Arc<Src>,
        transform: Transform<Src::Batch, T>,
        config: PrefetchConfig,
    ) -> Result<Self> {
        config.validate()?;
        let counters = Arc::new(Counters::default());
        let mut core = Core::new(
            config.merge,
            config.on_error,
            config.consumer_queue_size,
            vec![Counts::default(); config.num_workers],
            Arc::clone(&counters),
        );
        let side = Dealer::new(input.checkpoint(), &source, &config);
        core.spawn = Some(Arc::new(move |w| {
            worker::spawn_dealt(
                w,
                Arc::clone(&source),
                Arc::clone(&transform),
                config,
                Arc::clone(&counters),
            )
        }));
        Ok(Self { input, side, core })
    }

    /// The input stream.
    #[deprecated(
        note = "the input of a stream prefetch is not reachable any more; see CHANGELOG.md"
    )]
    pub fn get_ref(&self) -> &S {
        &self.input
    }
}

impl<T, S: PrefetchInput> Prefetch<T, S> {
    /// The largest lead (batches consumed from one worker minus batches consumed from the
    /// slowest worker with batches left) seen after any consumed batch so far. A diagnostic:
    /// under [`MergePolicy::BestEffort`] it never exceeds `max_lead`.
    pub fn max_observed_lead(&self) -> u64 {
        self.core.max_observed_lead
    }

    /// A snapshot of what the prefetch is doing: batches and records consumed and produced,
    /// failed tries, queue depths, gathers and records in flight, the lead, time per stage, the
    /// gather latency histogram, and who waits for whom (see [`LoaderStats`]). Over a stream the
    /// index side runs on the consumer's task, so `index_time` is 0. Cheap: a few atomic loads
    /// and one lock per worker queue.
    pub fn stats(&self) -> LoaderStats {
        self.core.stats(&self.side)
    }

    /// Stops the workers and waits until every worker thread has exited and released the
    /// source. Dropping the stream stops them too, without waiting.
    ///
    /// # Cancel safety
    /// Dropping the future before it completes leaves the workers stopping on their own; nothing
    /// else is lost (the stream is consumed either way).
    pub async fn shutdown(mut self) {
        self.core.let_go_of_workers();
        let exits = std::mem::take(&mut self.core.released);
        drop(self);
        wait_exits(exits).await;
    }
}

impl<T, S> Checkpoint for Prefetch<T, S>
where
    S: Checkpoint<Item = Result<IndexBatch>> + Unpin,
{
    type State = PrefetchStreamState<S::State>;

    fn checkpoint(&self) -> Self::State {
        self.side.checkpoint()
    }

    /// Restores the input and drops every batch in flight; the workers are started again at
    /// the next poll.
    ///
    /// # Errors
    /// [`crate::Error::ResumeMismatch`] if `consumed_ahead` is not strictly increasing, or as
    /// the input's restore. A refused state changes nothing: the stream goes on as before.
    fn restore(&mut self, state: Self::State) -> Result<()> {
        Dealer::check(&state)?;
        // The input first: if it refuses the state, nothing of this stream has changed.
        self.input.restore(state.input.clone())?;
        let core = &mut self.core;
        let ready = std::mem::take(&mut core.ready);
        drop(ready);
        core.let_go_of_workers();
        core.counts = vec![Counts::default(); core.counts.len()];
        core.merge_done = false;
        core.stopped = false;
        self.side.restart(state);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use std::pin::Pin;
    use std::sync::mpsc;
    use std::sync::Mutex;
    use std::task::{Context, Poll};

    use futures::stream::Stream;

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
            .side
            .state
            .workers
            .iter()
            .filter(|w| w.next.is_some())
            .map(|w| w.consumed)
            .min()
        else {
            return Vec::new();
        };
        p.core
            .counts
            .iter()
            .map(|c| c.merged.saturating_sub(min))
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
