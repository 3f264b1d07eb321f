//! [`PrefetchConfig`] and the policies it holds: merge, retry, what to do after an error.
use serde::{Deserialize, Serialize};

pub use crate::retry::RetryPolicy;
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

/// Configuration of a [`Prefetch`](super::Prefetch).
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
    /// backoff doubling up to 1 s). An error another try cannot help is not retried: corruption
    /// (a checksum mismatch, a damaged offset entry), an index out of range, a failed
    /// object-store request (each request has its own retry budget,
    /// `zrecord::remote::StoreOptions::retries`), a chunk or part gone, a panic.
    #[serde(default)]
    pub retry: RetryPolicy,
    /// What the stream does after a failed batch. Default: [`OnError::Stop`].
    #[serde(default)]
    pub on_error: OnError,
    /// Batches each worker announces ahead of the one it gathers ([`Source::lookahead`](crate::pipeline::Source::lookahead)), so a
    /// source with latency to hide has their reads in flight while earlier batches are
    /// gathered and consumed; 0 to [`MAX_QUEUE_SIZE`], 0 announces nothing. Each backend
    /// decides what to do with them: a local dataset's read window starts the reads of cold
    /// batches (warm ones are left alone; docs/ARCHITECTURE.md, *The read window*); a dataset
    /// on an object store starts range requests only if
    /// `RemoteConfig::lookahead_bytes` (`zrecord::remote`) is set
    /// (off by default: on the measured store they cost throughput, docs/BENCHMARKS.md).
    /// Default: 8 (cold 4 KiB and 64 KiB records on a local disk: docs/BENCHMARKS.md).
    #[serde(default = "default_lookahead")]
    pub lookahead: usize,
    /// Gathers each worker keeps in flight, 1 to [`MAX_QUEUE_SIZE`]. Default: 1, the blocking
    /// path: the worker calls [`Source::gather`](crate::pipeline::Source::gather) and waits. Above 1 the worker starts the
    /// gathers of its next batches with [`Source::gather_async`](crate::pipeline::Source::gather_async) and takes their results in
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
