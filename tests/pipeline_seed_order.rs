//! The order of `LoaderBuilder::seed` and `LoaderBuilder::bucket` does not matter: both orders
//! build the same loader (same batches, same checkpoints, same configuration description).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use futures::executor::block_on;
use zrecord::pipeline::{BucketConfig, LoaderBuilder, LoaderState, MemorySource, PrefetchConfig};

const SEED: u64 = 1234;

fn source() -> Arc<MemorySource> {
    Arc::new(MemorySource::new(
        (0..300u64)
            .map(|i| vec![i as u8; ((i.wrapping_mul(0x9e37_79b9) >> 7) % 40) as usize])
            .collect(),
    ))
}

fn base() -> LoaderBuilder<MemorySource> {
    LoaderBuilder::new(source())
        .epochs(Some(2))
        .batch_size(8)
        .prefetch(PrefetchConfig::default().num_workers(2))
}

fn bucket() -> BucketConfig {
    BucketConfig::default().buffer_size(64).pack_size(8)
}

/// Every batch's indices, and the checkpoint after every batch.
fn run(b: LoaderBuilder<MemorySource>) -> (String, Vec<Vec<u64>>, Vec<LoaderState>) {
    let mut loader = b.build().unwrap();
    let description = loader.config_description().to_string();
    let (mut batches, mut states) = (Vec::new(), Vec::new());
    while let Some(batch) = block_on(loader.next()) {
        batches.push(batch.unwrap().indices());
        states.push(loader.state());
    }
    (description, batches, states)
}

#[test]
fn seed_before_or_after_bucket_builds_the_same_loader() {
    let seed_first = run(base().seed(SEED).bucket(bucket()));
    let bucket_first = run(base().bucket(bucket()).seed(SEED));
    assert!(
        seed_first
            .0
            .contains(&format!("bucket(buffer_size=64, pack_size=8, seed={SEED}")),
        "{}",
        seed_first.0
    );
    assert_eq!(seed_first.0, bucket_first.0);
    assert_eq!(seed_first.1, bucket_first.1);
    assert_eq!(seed_first.2, bucket_first.2);
    assert_eq!(seed_first.1.len(), 2 * 300_u64.div_ceil(8) as usize);
    // A checkpoint of one order resumes a loader built in the other.
    let mid = &seed_first.2[10];
    let mut resumed = base().bucket(bucket()).seed(SEED).resume(mid).unwrap();
    let rest: Vec<Vec<u64>> = std::iter::from_fn(|| block_on(resumed.next()))
        .map(|b| b.unwrap().indices())
        .collect();
    assert_eq!(rest, seed_first.1[11..]);
}
