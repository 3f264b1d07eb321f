//! Sharding: d9d's examples; without padding the shards partition every epoch exactly once;
//! with padding they have equal lengths and the repeats are marked; drop_remainder cuts them to
//! equal lengths; the markers reach the loader's batches.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use futures::executor::block_on;
use futures::StreamExt;
use zrecord::pipeline::{
    LoaderBuilder, MemorySource, PrefetchConfig, Sampler, SamplerConfig, SamplerMode, ShardConfig,
    ShardMode, Stage, StageExt,
};

fn sampler(n: u64, mode: SamplerMode) -> Sampler {
    Sampler::new(
        n,
        SamplerConfig::default().mode(mode).seed(9).epochs(Some(2)),
    )
    .unwrap()
}

const SEQ: SamplerMode = SamplerMode::Sequential;

/// Epoch `epoch` of shard `index`: (record index, padded).
fn shard(n: u64, mode: SamplerMode, config: ShardConfig, epoch: u64) -> Vec<(u64, bool)> {
    let mut s = sampler(n, mode).shard(config).unwrap();
    (0..s.epoch_len())
        .map(|p| {
            let x = s.get(epoch, p).unwrap();
            (x.index, x.padded)
        })
        .collect()
}

fn cfg(total: u64, index: u64, mode: ShardMode, pad: bool, drop: bool) -> ShardConfig {
    ShardConfig::new(total, index)
        .mode(mode)
        .pad_to_equal(pad)
        .drop_remainder(drop)
}

fn indices(v: &[(u64, bool)]) -> Vec<u64> {
    v.iter().map(|x| x.0).collect()
}

#[test]
fn d9d_examples() {
    let inter = |k| {
        indices(&shard(
            14,
            SEQ,
            cfg(4, k, ShardMode::Interleaved, false, false),
            0,
        ))
    };
    assert_eq!(inter(0), vec![0, 4, 8, 12]);
    assert_eq!(inter(1), vec![1, 5, 9, 13]);
    assert_eq!(inter(2), vec![2, 6, 10]);
    assert_eq!(inter(3), vec![3, 7, 11]);
    let chunk = |k| {
        indices(&shard(
            14,
            SEQ,
            cfg(4, k, ShardMode::Contiguous, false, false),
            0,
        ))
    };
    assert_eq!(chunk(0), vec![0, 1, 2, 3]);
    assert_eq!(chunk(1), vec![4, 5, 6, 7]);
    assert_eq!(chunk(2), vec![8, 9, 10, 11]);
    assert_eq!(chunk(3), vec![12, 13]);
    // With padding, the short shards repeat the last item, marked.
    assert_eq!(
        shard(14, SEQ, cfg(4, 3, ShardMode::Interleaved, true, false), 0),
        vec![(3, false), (7, false), (11, false), (13, true)]
    );
    assert_eq!(
        shard(14, SEQ, cfg(4, 3, ShardMode::Contiguous, true, false), 0),
        vec![(12, false), (13, false), (13, true), (13, true)]
    );
    // drop_remainder: floor(14 / 4) = 3 each.
    assert_eq!(
        indices(&shard(
            14,
            SEQ,
            cfg(4, 1, ShardMode::Interleaved, false, true),
            0
        )),
        vec![1, 5, 9]
    );
    assert_eq!(
        indices(&shard(
            14,
            SEQ,
            cfg(4, 3, ShardMode::Contiguous, false, true),
            0
        )),
        vec![9, 10, 11]
    );
}

#[test]
fn shards_partition_pad_and_drop_for_many_sizes() {
    for mode in [SEQ, SamplerMode::Shuffled] {
        for n in 0..40u64 {
            for total in 1..7u64 {
                for smode in [ShardMode::Interleaved, ShardMode::Contiguous] {
                    for epoch in 0..2 {
                        // Exactly once across shards, nothing padded.
                        let mut all = Vec::new();
                        for k in 0..total {
                            let s = shard(n, mode, cfg(total, k, smode, false, false), epoch);
                            assert!(s.iter().all(|x| !x.1));
                            all.extend(indices(&s));
                        }
                        all.sort_unstable();
                        assert_eq!(
                            all,
                            (0..n).collect::<Vec<_>>(),
                            "n={n} total={total} {smode:?}"
                        );

                        // Padded: equal lengths ceil(n / total); the real items are the same,
                        // the extra ones are marked repeats of the epoch's last item.
                        let last = sampler(n, mode)
                            .get(epoch, n.saturating_sub(1))
                            .ok()
                            .map(|s| s.index);
                        let mut real = Vec::new();
                        for k in 0..total {
                            let s = shard(n, mode, cfg(total, k, smode, true, false), epoch);
                            assert_eq!(s.len() as u64, n.div_ceil(total));
                            for &(i, padded) in &s {
                                if padded {
                                    assert_eq!(Some(i), last);
                                } else {
                                    real.push(i);
                                }
                            }
                        }
                        real.sort_unstable();
                        assert_eq!(real, (0..n).collect::<Vec<_>>());

                        // Dropped: equal lengths floor(n / total), no repeats.
                        let mut kept = Vec::new();
                        for k in 0..total {
                            let s = shard(n, mode, cfg(total, k, smode, false, true), epoch);
                            assert_eq!(s.len() as u64, n / total);
                            kept.extend(indices(&s));
                        }
                        let len = kept.len();
                        kept.sort_unstable();
                        kept.dedup();
                        assert_eq!(kept.len(), len);
                    }
                }
            }
        }
    }
}

#[test]
fn padded_markers_reach_the_loader() {
    let src = Arc::new(MemorySource::new((0..14u8).map(|i| vec![i]).collect()));
    let loader = LoaderBuilder::new(src)
        .sampler(SamplerConfig::default().mode(SEQ).seed(0).epochs(Some(1)))
        .shard(cfg(4, 2, ShardMode::Interleaved, true, false))
        .batch_size(3)
        .prefetch(PrefetchConfig::default().num_workers(2))
        .build()
        .unwrap();
    type Row = (Vec<u64>, Vec<bool>, Vec<Vec<u8>>);
    let got: Vec<Row> = block_on(
        loader
            .map(|b| {
                let b = b.unwrap();
                (b.indices(), b.padded(), b.data)
            })
            .collect(),
    );
    assert_eq!(
        got,
        vec![
            (
                vec![2, 6, 10],
                vec![false, false, false],
                vec![vec![2], vec![6], vec![10]]
            ),
            (vec![13], vec![true], vec![vec![13]]),
        ]
    );
}
