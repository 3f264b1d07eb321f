//! Shared by the integration tests: proptest strategies for small, random loader configurations,
//! and a seeded generator for tests that script their own workloads.
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
            0 => SamplerMode::Sequential { window_len: window },
            1 => SamplerMode::Shuffled,
            _ => SamplerMode::Random,
        };
        SamplerConfig { mode, seed, epochs: Some(epochs) }
    }
}

prop_compose! {
    fn shard_config()(total in 1..4u64, index in 0..4u64, contiguous in any::<bool>(), pad in 0..3u8)
        -> ShardConfig {
        ShardConfig {
            total,
            index: index % total,
            mode: if contiguous { ShardMode::Contiguous } else { ShardMode::Interleaved },
            pad_to_equal: pad == 1,
            drop_remainder: pad == 2,
        }
    }
}

prop_compose! {
    fn bucket_config()(on in any::<bool>(), buffer_size in 1..20u64, pack_size in 1..6u64, seed in any::<u64>())
        -> Option<BucketConfig> {
        on.then_some(BucketConfig { buffer_size, pack_size, seed })
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
        LoaderConfig {
            sampler,
            shard,
            bucket,
            batch: BatchConfig { batch_size, drop_last },
            prefetch: PrefetchConfig {
                num_workers,
                worker_queue_size,
                consumer_queue_size,
                merge: MergePolicy::Strict,
            },
        }
    }
}

/// splitmix64: a seeded, portable generator for tests that script their own workloads.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform-ish in `[0, n)` (`n` = 0 counts as 1).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}
