//! Length bucketing reduces the padding of collated batches compared with plain shuffling, while
//! every record still appears exactly once per epoch.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use futures::executor::block_on;
use futures::StreamExt;
use zrecord::pipeline::{
    pad_stack, BucketConfig, BucketKey, LoaderBuilder, MemorySource, PadConfig, PrefetchConfig,
    SamplerConfig, SamplerMode,
};

const N: u64 = 4000;
const BATCH: u64 = 16;

fn source() -> Arc<MemorySource> {
    // Lengths 1..=256, spread pseudo-randomly over the indices.
    Arc::new(MemorySource::new(
        (0..N)
            .map(|i| {
                let len = (i.wrapping_mul(0x9e37_79b9) >> 7) % 256 + 1;
                vec![1u8; len as usize]
            })
            .collect(),
    ))
}

/// Runs 2 epochs; returns (padding elements / real elements, indices per epoch).
fn run(bucket: Option<BucketConfig>, key: Option<BucketKey>) -> (f64, Vec<Vec<u64>>) {
    let mut b = LoaderBuilder::new(source())
        .sampler(
            SamplerConfig::default()
                .mode(SamplerMode::Shuffled)
                .seed(1)
                .epochs(Some(2)),
        )
        .batch_size(BATCH)
        .prefetch(PrefetchConfig::default().num_workers(3));
    if let Some(c) = bucket {
        b = b.bucket(c);
    }
    if let Some(k) = key {
        b = b.bucket_key(k);
    }
    let loader = b
        .transform(|records: Vec<Vec<u8>>, _| {
            let p = pad_stack(&records, PadConfig::default())?;
            let real: usize = p.lengths.iter().sum();
            Ok((p.data.len() - real, real))
        })
        .build()
        .unwrap();
    let (mut pad, mut real) = (0usize, 0usize);
    let mut epochs = vec![Vec::new(), Vec::new()];
    for b in block_on(loader.collect::<Vec<_>>()) {
        let b = b.unwrap();
        pad += b.data.0;
        real += b.data.1;
        epochs[b.epoch() as usize].extend(b.indices());
    }
    (pad as f64 / real as f64, epochs)
}

fn assert_each_once(epochs: &[Vec<u64>]) {
    for e in epochs {
        let mut v = e.clone();
        v.sort_unstable();
        assert_eq!(v, (0..N).collect::<Vec<_>>());
    }
}

#[test]
fn bucketing_reduces_padding_and_keeps_every_item_once() {
    let (plain, plain_epochs) = run(None, None);
    let config = BucketConfig::default()
        .buffer_size(512)
        .pack_size(BATCH)
        .seed(7);
    let (bucketed, bucketed_epochs) = run(Some(config), None);
    println!(
        "padding / real elements: unbucketed {plain:.3}, bucketed {bucketed:.3} ({:.1}x less)",
        plain / bucketed
    );
    assert_each_once(&plain_epochs);
    assert_each_once(&bucketed_epochs);
    assert!(
        bucketed * 4.0 < plain,
        "bucketed {bucketed} vs plain {plain}"
    );
    // The two epochs differ (fresh permutation and fresh buffers per epoch).
    assert_ne!(bucketed_epochs[0], bucketed_epochs[1]);

    // A user key: the negated length sorts the other way and pads as little.
    let src = source();
    let key = BucketKey::new("neg_len", move |i| {
        Ok(u64::MAX - src.records()[i as usize].len() as u64)
    });
    let (user, user_epochs) = run(Some(config), Some(key));
    assert_each_once(&user_epochs);
    assert!(user * 4.0 < plain);
}
