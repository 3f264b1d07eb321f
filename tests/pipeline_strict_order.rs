//! Under the strict merge, the prefetched stream equals the sequential no-prefetch baseline for
//! any configuration and any number of workers.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use futures::executor::block_on;
use futures::StreamExt;
use proptest::prelude::*;
use zrecord::pipeline::{
    BatchConfig, BucketConfig, IndexBatch, LoaderBuilder, LoaderConfig, MemorySource,
    PrefetchConfig, SamplerConfig, SamplerMode, Source, Stage,
};

mod common;
use common::loader_config;

fn source(n: u64) -> Arc<MemorySource> {
    Arc::new(MemorySource::new(
        (0..n)
            .map(|i| {
                let len = (i * 7 + 3) % 11;
                (0..len).map(|j| (i as u8).wrapping_add(j as u8)).collect()
            })
            .collect(),
    ))
}

type Item = (IndexBatch, Vec<Vec<u8>>);

fn baseline(builder: &LoaderBuilder<MemorySource>, src: &MemorySource) -> Vec<Item> {
    builder
        .index_chain()
        .unwrap()
        .cursor()
        .into_iter()
        .map(|b| {
            let b = b.unwrap();
            let data = src.gather(&b.indices()).unwrap();
            (b, data)
        })
        .collect()
}

fn prefetched(builder: LoaderBuilder<MemorySource>) -> Vec<Item> {
    let loader = builder.build().unwrap();
    block_on(
        loader
            .map(|b| {
                let b = b.unwrap();
                (b.batch, b.data)
            })
            .collect(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn strict_prefetch_equals_the_sequential_baseline(n in 0..60u64, config in loader_config()) {
        let src = source(n);
        let builder = LoaderBuilder::new(Arc::clone(&src)).config(config);
        let want = baseline(&builder, &src);
        let got = prefetched(builder);
        prop_assert_eq!(got.len(), want.len());
        prop_assert_eq!(got, want);
    }
}

#[test]
fn every_worker_count_gives_the_same_stream() {
    let src = source(200);
    let config = |num_workers| {
        LoaderConfig::default()
            .sampler(
                SamplerConfig::default()
                    .mode(SamplerMode::Shuffled)
                    .seed(5)
                    .epochs(Some(2)),
            )
            .bucket(Some(
                BucketConfig::default().buffer_size(32).pack_size(4).seed(1),
            ))
            .batch(BatchConfig::new(4).drop_last(false))
            .prefetch(PrefetchConfig::default().num_workers(num_workers))
    };
    let one = prefetched(LoaderBuilder::new(Arc::clone(&src)).config(config(1)));
    assert_eq!(one.len(), 100);
    for n in [2, 3, 7, 16] {
        let many = prefetched(LoaderBuilder::new(Arc::clone(&src)).config(config(n)));
        assert_eq!(many, one, "{n} workers");
    }
}
