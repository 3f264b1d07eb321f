//! A stream chain's prefetch (above a stage of the user's own) reports the loader's stats:
//! batches and records consumed, batches produced, failed tries, one gather latency per try,
//! and nothing left in flight at the end.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::executor::block_on;
use futures::StreamExt;
use zrecord::pipeline::{
    BatchConfig, CheckpointExt, MemorySource, PrefetchConfig, RetryPolicy, Sampler, SamplerConfig,
    ShardConfig, Source, Stage,
};
use zrecord::{Error, Result};

/// A source whose first gather of a batch holding record 7 fails once.
struct FailsOnce {
    inner: MemorySource,
    failed: Mutex<HashSet<u64>>,
}

impl Source for FailsOnce {
    type Batch = Vec<Vec<u8>>;

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn item_len(&self, index: u64) -> Result<u64> {
        self.inner.item_len(index)
    }

    fn gather(&self, indices: &[u64]) -> Result<Self::Batch> {
        if indices.contains(&7) && self.failed.lock().unwrap().insert(7) {
            // An error a retry can cure (an index out of range, corruption or a failed remote
            // request is permanent: the loader returns it at once).
            return Err(Error::InvalidConfig {
                reason: "a transient failure".into(),
            });
        }
        self.inner.gather(indices)
    }
}

#[test]
fn a_stream_chain_counts_what_the_loader_counts() {
    let source = Arc::new(FailsOnce {
        inner: MemorySource::new((0..40u8).map(|i| vec![i; 3]).collect()),
        failed: Mutex::new(HashSet::new()),
    });
    let sampler = Sampler::new(40, SamplerConfig::default().seed(3).epochs(Some(1))).unwrap();
    let mut stream = sampler
        .cursor()
        .filter_items(|s| s.index % 4 != 0) // a stage of the user's own: 30 records left
        .shard(ShardConfig::new(1, 0))
        .unwrap()
        .batch(BatchConfig::new(4))
        .unwrap()
        .prefetch(
            Arc::clone(&source),
            PrefetchConfig::default()
                .num_workers(2)
                .retry(RetryPolicy::default().backoff(Duration::from_millis(1))),
        )
        .unwrap();
    let mut records = 0u64;
    let mut batches = 0u64;
    while let Some(batch) = block_on(stream.next()) {
        records += batch.unwrap().indices().len() as u64;
        batches += 1;
    }
    assert_eq!((batches, records), (8, 30));
    let stats = stream.stats();
    assert_eq!((stats.batches, stats.records), (8, 30));
    assert_eq!(stats.batches_produced, 8);
    assert_eq!(stats.failed_attempts, 1);
    assert_eq!(
        stats.gather_latency.iter().sum::<u64>(),
        9,
        "one gather per try"
    );
    assert_eq!((stats.gathers_in_flight, stats.records_in_flight), (0, 0));
    assert_eq!(stats.worker_queue_depths, vec![0, 0]);
    // An ended stream's consumer waits no longer: the wait stops growing.
    let wait = stream.stats().consumer_wait;
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(stream.stats().consumer_wait, wait);
}
