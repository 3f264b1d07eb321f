//! The stream forms of shard and batch never drift from the seekable ones: over a seekable
//! sampler, the stream chain (cursor → shard → batch) yields exactly the batches of the seekable
//! chain (sampler → shard → batch), for every size, shard count and mode, padding, dropping,
//! batch size and `drop_last` the stream form accepts, and it refuses exactly the shard settings
//! that need the epoch's length.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use futures::executor::block_on;
use futures::StreamExt;
use proptest::prelude::*;
use zrecord::pipeline::{
    BatchConfig, CheckpointExt, IndexBatch, Sampler, SamplerConfig, SamplerMode, ShardConfig,
    ShardMode, Stage, StageExt,
};
use zrecord::Error;

fn sampler(n: u64, mode: SamplerMode, seed: u64, epochs: u64) -> Sampler {
    Sampler::new(
        n,
        SamplerConfig::default()
            .mode(mode)
            .seed(seed)
            .epochs(Some(epochs)),
    )
    .unwrap()
}

/// The plain model: the seekable chain, read position by position.
fn seekable(up: Sampler, shard: ShardConfig, batch: BatchConfig) -> Vec<IndexBatch> {
    up.shard(shard)
        .unwrap()
        .batch(batch)
        .unwrap()
        .cursor()
        .into_iter()
        .map(|b| b.unwrap())
        .collect()
}

fn collect<S>(stream: S) -> Vec<IndexBatch>
where
    S: futures::Stream<Item = zrecord::Result<IndexBatch>> + Unpin,
{
    block_on(stream.map(|b| b.unwrap()).collect())
}

fn sampler_mode() -> impl Strategy<Value = SamplerMode> {
    prop_oneof![
        Just(SamplerMode::Sequential),
        Just(SamplerMode::Shuffled),
        Just(SamplerMode::Random),
    ]
}

fn shard_config() -> impl Strategy<Value = ShardConfig> {
    (1u64..7, 0u64..7, any::<bool>(), 0u8..3).prop_map(|(total, index, contiguous, fill)| {
        ShardConfig::new(total, index % total)
            .mode(if contiguous {
                ShardMode::Contiguous
            } else {
                ShardMode::Interleaved
            })
            .pad_to_equal(fill == 1)
            .drop_remainder(fill == 2)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn stream_chain_yields_the_seekable_batches(
        n in 0u64..80,
        epochs in 1u64..4,
        mode in sampler_mode(),
        seed in any::<u64>(),
        shard in shard_config(),
        batch_size in 1u64..9,
        drop_last in any::<bool>(),
    ) {
        let batch = BatchConfig::new(batch_size).drop_last(drop_last);
        let up = || sampler(n, mode, seed, epochs);
        let expected = seekable(up(), shard, batch);

        // Stream batch over the seekable shard: every shard mode.
        let got = collect(up().shard(shard).unwrap().cursor().batch(batch).unwrap());
        prop_assert_eq!(&got, &expected, "stream batch over the seekable shard");

        // Stream shard and stream batch: where the stream shard can know what it needs.
        let needs_len = shard.mode != ShardMode::Interleaved
            || shard.pad_to_equal
            || shard.drop_remainder;
        match up().cursor().shard(shard) {
            Ok(s) => {
                prop_assert!(!needs_len, "accepted {:?}", shard);
                let got = collect(s.batch(batch).unwrap());
                prop_assert_eq!(&got, &expected, "stream shard and batch");
            }
            Err(Error::InvalidConfig { .. }) => prop_assert!(needs_len, "refused {:?}", shard),
            Err(e) => prop_assert!(false, "unexpected error {e:?}"),
        }
    }
}
