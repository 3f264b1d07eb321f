//! Proptest strategies for small, random loader configurations, shared by the pipeline tests.
#![allow(dead_code)]

use proptest::prelude::*;
use zrecord::pipeline::{
    BatchConfig, BucketConfig, LoaderConfig, MergePolicy, PrefetchConfig, SamplerConfig,
    SamplerMode, ShardConfig, ShardMode,
};

prop_compose! {
    fn sampler_config()(kind in 0..3u8, window in 1..5u64, seed in any::<u64>(), epochs in 1..3u64)
        -> SamplerConfig {
        let mode = match kind {
            0 if window == 1 => SamplerMode::Sequential,
            0 => SamplerMode::SequentialWrap { window_len: window },
            1 => SamplerMode::Shuffled,
            _ => SamplerMode::Random,
        };
        SamplerConfig::default().mode(mode).seed(seed).epochs(Some(epochs))
    }
}

prop_compose! {
    fn shard_config()(total in 1..4u64, index in 0..4u64, contiguous in any::<bool>(), pad in 0..3u8)
        -> ShardConfig {
        ShardConfig::new(total, index % total)
            .mode(if contiguous { ShardMode::Contiguous } else { ShardMode::Interleaved })
            .pad_to_equal(pad == 1)
            .drop_remainder(pad == 2)
    }
}

prop_compose! {
    fn bucket_config()(on in any::<bool>(), buffer_size in 1..20u64, pack_size in 1..6u64, seed in any::<u64>())
        -> Option<BucketConfig> {
        on.then_some(BucketConfig::default().buffer_size(buffer_size).pack_size(pack_size).seed(seed))
    }
}

prop_compose! {
    pub fn loader_config()(
        sampler in sampler_config(),
        shard in shard_config(),
        bucket in bucket_config(),
        batch_size in 1..7u64,
        drop_last in any::<bool>(),
        num_workers in 1..=8usize,
        worker_queue_size in 1..4usize,
        consumer_queue_size in 1..4usize,
    ) -> LoaderConfig {
        LoaderConfig::default()
            .sampler(sampler)
            .shard(shard)
            .bucket(bucket)
            .batch(BatchConfig::new(batch_size).drop_last(drop_last))
            .prefetch(
                PrefetchConfig::default()
                    .num_workers(num_workers)
                    .worker_queue_size(worker_queue_size)
                    .consumer_queue_size(consumer_queue_size)
                    .merge(MergePolicy::Strict),
            )
    }
}
