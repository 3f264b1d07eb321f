//! What a running loader is doing: counters the prefetch workers and the merge keep as they go
//! (relaxed atomics, a few per batch, never per record), and the snapshot
//! [`super::Loader::stats`] returns.
//!
//! The rest of this documentation is on [`LoaderStats`], where rustdoc shows it: the module is private
//! and `zrecord::pipeline` re-exports its public items.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Buckets of the gather latency histogram: bucket `k` counts gathers that took less than
/// `2^k` µs (and at least `2^(k-1)`); the last bucket counts everything slower.
pub const LATENCY_BUCKETS: usize = 28;

/// The counters one loader's workers and merge update.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    batches_produced: AtomicU64,
    records_produced: AtomicU64,
    failed_attempts: AtomicU64,
    gathers_in_flight: AtomicU64,
    records_in_flight: AtomicU64,
    index_ns: AtomicU64,
    gather_ns: AtomicU64,
    transform_ns: AtomicU64,
    blocked_ns: AtomicU64,
    retry_wait_ns: AtomicU64,
    latency: [AtomicU64; LATENCY_BUCKETS],
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Counters {
    pub(crate) fn index_time(&self, since: Instant) {
        self.index_ns
            .fetch_add(nanos(since.elapsed()), Ordering::Relaxed);
    }

    /// A gather of `records` records starts; the returned guard ends it.
    pub(crate) fn gather_started(self: &Arc<Self>, records: usize) -> InFlight {
        let records = records as u64;
        self.gathers_in_flight.fetch_add(1, Ordering::Relaxed);
        self.records_in_flight.fetch_add(records, Ordering::Relaxed);
        InFlight {
            counters: Arc::clone(self),
            records,
            start: Instant::now(),
            end: None,
        }
    }

    pub(crate) fn transform_time(&self, since: Instant) {
        self.transform_ns
            .fetch_add(nanos(since.elapsed()), Ordering::Relaxed);
    }

    pub(crate) fn blocked(&self, since: Instant) {
        self.blocked_ns
            .fetch_add(nanos(since.elapsed()), Ordering::Relaxed);
    }

    pub(crate) fn retry_wait(&self, since: Instant) {
        self.retry_wait_ns
            .fetch_add(nanos(since.elapsed()), Ordering::Relaxed);
    }

    pub(crate) fn failed_attempt(&self) {
        self.failed_attempts.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn produced(&self, records: usize) {
        self.batches_produced.fetch_add(1, Ordering::Relaxed);
        self.records_produced
            .fetch_add(records as u64, Ordering::Relaxed);
    }
}

/// A gather in progress; dropping it records its latency, up to now or to the end set by
/// [`InFlight::ended_at`].
pub(crate) struct InFlight {
    counters: Arc<Counters>,
    records: u64,
    start: Instant,
    end: Option<Instant>,
}

impl InFlight {
    /// Records the gather as done at `at` (when it signalled completion, which the worker may
    /// see later).
    pub(crate) fn ended_at(mut self, at: Instant) {
        self.end = Some(at);
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let c = &self.counters;
        let end = self.end.unwrap_or_else(Instant::now);
        let took = nanos(end.saturating_duration_since(self.start));
        c.gathers_in_flight.fetch_sub(1, Ordering::Relaxed);
        c.records_in_flight
            .fetch_sub(self.records, Ordering::Relaxed);
        c.gather_ns.fetch_add(took, Ordering::Relaxed);
        let micros = took / 1000;
        let bucket = (64 - micros.leading_zeros() as usize).min(LATENCY_BUCKETS - 1);
        if let Some(b) = c.latency.get(bucket) {
            b.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What the consumer side keeps (the merge runs on the consumer's task, so plain fields).
#[derive(Debug, Default, Clone)]
pub(crate) struct ConsumerCounters {
    pub(crate) batches: u64,
    pub(crate) records: u64,
    pub(crate) wait: Duration,
    /// When the consumer last found nothing ready, if it is still waiting.
    pub(crate) waiting_since: Option<Instant>,
}

impl ConsumerCounters {
    /// The consumer found nothing ready.
    pub(crate) fn pending(&mut self) {
        if self.waiting_since.is_none() {
            self.waiting_since = Some(Instant::now());
        }
    }

    /// The consumer got an item (or the end).
    pub(crate) fn ready(&mut self) {
        if let Some(since) = self.waiting_since.take() {
            self.wait = self.wait.saturating_add(since.elapsed());
        }
    }
}

/// A snapshot of a running loader. Times are totals since the loader started, summed over its
/// workers.
///
/// What a running loader is doing: counters the prefetch workers and the merge keep as they go
/// (relaxed atomics, a few per batch, never per record), and the snapshot
/// [`super::Loader::stats`] returns.
///
/// The question the snapshot answers first is *who waits for whom*:
///
/// - [`LoaderStats::consumer_wait`] grows when the consumer asks for a batch that is not ready:
///   the loader is the bottleneck (the trainer is starved). Look at `gather_latency` and
///   `gather_time` (the storage), `index_time` (sampling, bucketing) and `transform_time`.
/// - [`LoaderStats::worker_blocked`] grows when workers have a batch ready and their queues are
///   full: the consumer is the bottleneck, and the loader is keeping up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LoaderStats {
    /// Batches the consumer took.
    pub batches: u64,
    /// Records in them (padding included).
    pub records: u64,
    /// Batches the workers finished (some still queued).
    pub batches_produced: u64,
    /// Gather or transform attempts that failed (each retry counts).
    pub failed_attempts: u64,
    /// Batches waiting in each worker's queue.
    pub worker_queue_depths: Vec<usize>,
    /// Batches merged and waiting for the consumer.
    pub consumer_queue_depth: usize,
    /// Gathers running now, and the records they read.
    pub gathers_in_flight: u64,
    /// Records being gathered now.
    pub records_in_flight: u64,
    /// The spread, in consumed items, between the most and the least advanced worker (0
    /// under the strict merge but for the item in hand), and the largest seen.
    pub lead: u64,
    /// The largest [`LoaderStats::lead`] seen.
    pub max_lead: u64,
    /// Time the workers spent computing index batches (sampler, shard, bucket, batch).
    pub index_time: Duration,
    /// Time the workers spent in [`super::Source::gather`].
    pub gather_time: Duration,
    /// Time the workers spent in the transform (collate).
    pub transform_time: Duration,
    /// Time the workers spent with a finished batch, waiting for room in their queue: the
    /// consumer is slower than the loader.
    pub worker_blocked: Duration,
    /// Time the workers slept between attempts of a failing batch.
    pub retry_wait: Duration,
    /// Time the consumer waited for a batch that was not ready: the loader is slower than the
    /// consumer. Counted from a poll that found nothing ready to the next poll that returns
    /// something; a `next()` future dropped while waiting (a `select!` that took another
    /// branch) keeps the clock running until the stream is polled again.
    pub consumer_wait: Duration,
    /// Gather latency: `gather_latency[k]` gathers took less than `2^k` µs (and at least
    /// `2^(k-1)`); the last bucket holds everything slower. See [`LoaderStats::gather_quantile`].
    pub gather_latency: Vec<u64>,
}

impl LoaderStats {
    pub(crate) fn new(
        counters: &Counters,
        consumer: &ConsumerCounters,
        worker_queue_depths: Vec<usize>,
        consumer_queue_depth: usize,
        (lead, max_lead): (u64, u64),
    ) -> Self {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let time = |a: &AtomicU64| Duration::from_nanos(get(a));
        let mut consumer_wait = consumer.wait;
        if let Some(since) = consumer.waiting_since {
            consumer_wait = consumer_wait.saturating_add(since.elapsed());
        }
        Self {
            batches: consumer.batches,
            records: consumer.records,
            batches_produced: get(&counters.batches_produced),
            failed_attempts: get(&counters.failed_attempts),
            worker_queue_depths,
            consumer_queue_depth,
            gathers_in_flight: get(&counters.gathers_in_flight),
            records_in_flight: get(&counters.records_in_flight),
            lead,
            max_lead,
            index_time: time(&counters.index_ns),
            gather_time: time(&counters.gather_ns),
            transform_time: time(&counters.transform_ns),
            worker_blocked: time(&counters.blocked_ns),
            retry_wait: time(&counters.retry_wait_ns),
            consumer_wait,
            gather_latency: counters.latency.iter().map(get).collect(),
        }
    }

    /// An upper bound of the `q` quantile (0 to 1) of the gather latency, from the histogram
    /// (so within a factor of 2 above the true value); `None` before the first gather.
    pub fn gather_quantile(&self, q: f64) -> Option<Duration> {
        let total: u64 = self.gather_latency.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((total as f64) * q.clamp(0.0, 1.0)).ceil().max(1.0) as u64;
        let mut seen = 0u64;
        for (k, &count) in self.gather_latency.iter().enumerate() {
            seen = seen.saturating_add(count);
            if seen >= rank {
                return Some(Duration::from_micros(1u64 << k.min(62)));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_lands_in_its_power_of_two_bucket() {
        let c = Arc::new(Counters::default());
        drop(c.gather_started(3));
        let s = LoaderStats::new(&c, &ConsumerCounters::default(), vec![], 0, (0, 0));
        assert_eq!(s.gather_latency.iter().sum::<u64>(), 1);
        assert_eq!(s.gathers_in_flight, 0);
        assert_eq!(s.records_in_flight, 0);
        assert!(s.gather_quantile(0.5).is_some());
        assert_eq!(s.gather_quantile(0.5), s.gather_quantile(1.0));
    }

    #[test]
    fn in_flight_counts_until_the_guard_drops() {
        let c = Arc::new(Counters::default());
        let g = c.gather_started(256);
        let s = LoaderStats::new(&c, &ConsumerCounters::default(), vec![1, 2], 3, (1, 2));
        assert_eq!((s.gathers_in_flight, s.records_in_flight), (1, 256));
        assert_eq!(s.worker_queue_depths, vec![1, 2]);
        drop(g);
        let s = LoaderStats::new(&c, &ConsumerCounters::default(), vec![], 0, (0, 0));
        assert_eq!((s.gathers_in_flight, s.records_in_flight), (0, 0));
    }
}
