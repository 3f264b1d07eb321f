//! `Loader::stats` accounts for every batch: what the consumer took, what the workers
//! produced, every gather attempt (failed ones included) in the latency histogram, and nothing
//! left in flight once the stream has ended.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::executor::block_on;
use zrecord::pipeline::{
    LoaderBuilder, MemorySource, PrefetchConfig, RetryPolicy, SamplerConfig, Source,
};

/// Every gather of a batch holding record 0 fails on its first try.
struct FailsOnce {
    inner: MemorySource,
    failed: AtomicU32,
}

impl Source for FailsOnce {
    type Batch = Vec<Vec<u8>>;

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn item_len(&self, index: u64) -> zrecord::Result<u64> {
        self.inner.item_len(index)
    }

    fn gather(&self, indices: &[u64]) -> zrecord::Result<Self::Batch> {
        if indices.contains(&0) && self.failed.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(zrecord::Error::InvalidConfig {
                reason: "first try fails".into(),
            });
        }
        self.inner.gather(indices)
    }
}

#[test]
fn stats_account_for_every_batch_and_attempt() {
    for workers in [1usize, 2, 3] {
        let source = Arc::new(FailsOnce {
            inner: MemorySource::new((0..1000u32).map(|i| i.to_le_bytes().to_vec()).collect()),
            failed: AtomicU32::new(0),
        });
        let mut loader = LoaderBuilder::new(source)
            .sampler(SamplerConfig::default().seed(3))
            .batch_size(64)
            .prefetch(
                PrefetchConfig::default()
                    .num_workers(workers)
                    .retry(RetryPolicy::default().backoff(Duration::from_millis(1))),
            )
            .build()
            .unwrap();
        let before = loader.stats();
        assert_eq!((before.batches, before.records), (0, 0));
        assert_eq!(before.worker_queue_depths.len(), workers);
        let mut batches = 0u64;
        let mut records = 0u64;
        block_on(async {
            while let Some(b) = loader.next().await {
                let b = b.unwrap();
                batches += 1;
                records += b.data.len() as u64;
                let s = loader.stats();
                assert_eq!((s.batches, s.records), (batches, records));
                assert!(s.batches_produced >= s.batches);
                assert!(s.worker_queue_depths.iter().all(|&d| d <= 2), "{s:?}");
                assert!(s.consumer_queue_depth <= 2);
                assert!(s.gathers_in_flight <= workers as u64);
                assert!(s.records_in_flight <= 64 * workers as u64);
            }
        });
        let s = loader.stats();
        assert_eq!((s.batches, s.records), (16, 1000), "workers={workers}");
        assert_eq!(s.batches_produced, 16);
        assert_eq!(s.failed_attempts, 1);
        // One histogram entry per gather attempt: 16 batches and the failed try.
        assert_eq!(s.gather_latency.iter().sum::<u64>(), 17);
        assert_eq!((s.gathers_in_flight, s.records_in_flight), (0, 0));
        assert!(s.retry_wait >= Duration::from_millis(1));
        assert!(s.gather_quantile(0.99).is_some());
        assert!(s.gather_quantile(0.5) <= s.gather_quantile(0.99));
    }
}
