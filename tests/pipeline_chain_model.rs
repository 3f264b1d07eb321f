//! One chain, seekable or streamed, against a plain model: over a sampler, shard → bucket →
//! batch yields what a model of plain loops over `Vec`s gives, in the seekable form (`Stage`),
//! in the stream form (a `Cursor` and the same stage types over it), and resumed through a JSON
//! checkpoint at random points of either, for every size, sampler mode, shard count and mode,
//! padding, dropping, bucket and batch setting; and the stream form refuses exactly the shard
//! settings that need the epoch's length.
//!
//! The model takes the sampler's order as given (the root's order has tests of its own) and
//! computes the shard and the batches exactly. The bucket's order is a seeded hash, so the model
//! checks what it promises (every buffer a permutation of its items, cut into packs of
//! consecutive keys) and takes the order it produced.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use futures::executor::block_on;
use futures::StreamExt;
use proptest::prelude::*;
use zrecord::pipeline::{
    BatchConfig, BucketConfig, BucketKey, Checkpoint, CheckpointExt, IndexBatch, Sample, Sampler,
    SamplerConfig, SamplerMode, ShardConfig, ShardMode, Stage, StageExt,
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

fn key() -> BucketKey {
    BucketKey::new("mod7", |i| Ok(i % 7))
}

// The model.

/// The sampler's items, epoch by epoch.
fn model_sampler(mut up: Sampler) -> Vec<Vec<Sample>> {
    let epochs = up.epochs().unwrap();
    let len = up.epoch_len();
    (0..epochs)
        .map(|e| (0..len).map(|p| up.get(e, p).unwrap()).collect())
        .collect()
}

/// One epoch's items of shard `index` of `total`.
fn model_shard(items: &[Sample], c: &ShardConfig) -> Vec<Sample> {
    let l = items.len() as u64;
    let (total, index) = (c.total, c.index);
    let mut own: Vec<Sample> = match c.mode {
        ShardMode::Interleaved => {
            let mut own = Vec::new();
            for (p, item) in items.iter().enumerate() {
                if p as u64 % total == index {
                    own.push(*item);
                }
            }
            own
        }
        _ => {
            let block = if c.drop_remainder {
                l / total
            } else {
                l.div_ceil(total)
            };
            let mut own = Vec::new();
            for (p, item) in items.iter().enumerate() {
                let p = p as u64;
                if p >= index * block && p < (index + 1) * block {
                    own.push(*item);
                }
            }
            own
        }
    };
    if c.drop_remainder {
        own.truncate((l / total) as usize);
    }
    if c.pad_to_equal && l > 0 {
        let last = Sample {
            padded: true,
            ..items[items.len() - 1]
        };
        while (own.len() as u64) < l.div_ceil(total) {
            own.push(last);
        }
    }
    own
}

/// Every epoch's items cut into batches.
fn model_batches(epochs: &[Vec<Sample>], c: &BatchConfig) -> Vec<IndexBatch> {
    let mut out = Vec::new();
    for (e, items) in epochs.iter().enumerate() {
        for (p, chunk) in items.chunks(c.batch_size as usize).enumerate() {
            if c.drop_last && (chunk.len() as u64) < c.batch_size {
                continue;
            }
            out.push(IndexBatch {
                epoch: e as u64,
                position: p as u64,
                samples: chunk.to_vec(),
            });
        }
    }
    out
}

/// What the bucket promises of one epoch: `after` is `before` with every buffer of
/// `buffer_size` positions permuted, such that its packs (of `pack_size`, the short one
/// anywhere) are runs of consecutive keys of the buffer sorted by key.
fn check_bucket(before: &[Sample], after: &[Sample], c: &BucketConfig) -> Result<(), String> {
    if before.len() != after.len() {
        return Err(format!("{} items became {}", before.len(), after.len()));
    }
    let sorted = |v: &[Sample]| {
        let mut v: Vec<(u64, u64, bool)> =
            v.iter().map(|s| (s.index, s.position, s.padded)).collect();
        v.sort_unstable();
        v
    };
    let k = |s: &Sample| s.index % 7;
    for (b, (old, new)) in before
        .chunks(c.buffer_size as usize)
        .zip(after.chunks(c.buffer_size as usize))
        .enumerate()
    {
        if sorted(old) != sorted(new) {
            return Err(format!("buffer {b} is not a permutation of its items"));
        }
        let mut keys: Vec<u64> = old.iter().map(k).collect();
        keys.sort_unstable();
        let pack = c.pack_size as usize;
        let (full, short) = (new.len() / pack, new.len() % pack);
        // Where the short pack sits among the packs (anywhere, if there is one).
        let places = if short == 0 { 1 } else { full + 1 };
        let fits = (0..places).any(|at| {
            let mut packs: Vec<Vec<u64>> = Vec::new();
            let mut rest = new;
            for i in 0..full + usize::from(short > 0) {
                let len = if short > 0 && i == at { short } else { pack };
                let (this, more) = rest.split_at(len);
                let mut ks: Vec<u64> = this.iter().map(k).collect();
                ks.sort_unstable();
                packs.push(ks);
                rest = more;
            }
            packs.sort();
            packs.concat() == keys
        });
        if !fits {
            return Err(format!(
                "buffer {b} is not cut into packs of consecutive keys"
            ));
        }
    }
    Ok(())
}

// The chain's two forms, and resuming them.

fn collect<C: Checkpoint<Item = zrecord::Result<IndexBatch>> + Unpin>(s: C) -> Vec<IndexBatch> {
    block_on(s.map(|b| b.unwrap()).collect())
}

/// The first `split` batches of a chain, then the rest from a fresh chain restored from the
/// checkpoint taken there, through JSON.
fn resumed<C, F>(make: F, split: usize) -> Vec<IndexBatch>
where
    C: Checkpoint<Item = zrecord::Result<IndexBatch>> + Unpin,
    F: Fn() -> C,
{
    let mut first = make();
    let mut out = Vec::new();
    for _ in 0..split {
        match block_on(first.next()) {
            Some(b) => out.push(b.unwrap()),
            None => break,
        }
    }
    let json = serde_json::to_string(&first.checkpoint()).unwrap();
    let mut again = make();
    again.restore(serde_json::from_str(&json).unwrap()).unwrap();
    out.extend(collect(again));
    out
}

/// The chain in every form, each resumed at `splits`; all must equal `expected`.
fn check_forms<C, F>(
    what: &str,
    make: F,
    expected: &[IndexBatch],
    splits: &[f64],
) -> Result<(), TestCaseError>
where
    C: Checkpoint<Item = zrecord::Result<IndexBatch>> + Unpin,
    F: Fn() -> C,
{
    prop_assert_eq!(&collect(make())[..], expected, "{}", what);
    for &f in splits {
        let split = (f * (expected.len() + 1) as f64) as usize;
        prop_assert_eq!(
            &resumed(&make, split)[..],
            expected,
            "{} resumed after {}",
            what,
            split
        );
    }
    Ok(())
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

fn bucket_config() -> impl Strategy<Value = Option<BucketConfig>> {
    proptest::option::of(
        (1u64..20, 1u64..6, any::<u64>()).prop_map(|(buffer, pack, seed)| {
            BucketConfig::default()
                .buffer_size(buffer)
                .pack_size(pack)
                .seed(seed)
        }),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn one_chain_equals_the_model_in_both_forms_and_resumed(
        n in 0u64..80,
        epochs in 1u64..4,
        mode in sampler_mode(),
        seed in any::<u64>(),
        shard in shard_config(),
        bucket in bucket_config(),
        batch_size in 1u64..9,
        drop_last in any::<bool>(),
        splits in proptest::collection::vec(0.0f64..1.0, 2),
    ) {
        let batch = BatchConfig::new(batch_size).drop_last(drop_last);
        let up = || sampler(n, mode, seed, epochs);
        let sharded: Vec<Vec<Sample>> =
            model_sampler(up()).iter().map(|e| model_shard(e, &shard)).collect();
        // The stream shard refuses exactly what needs the epoch's length; then the stream form
        // starts after the seekable shard.
        let needs_len = shard.mode != ShardMode::Interleaved
            || shard.pad_to_equal
            || shard.drop_remainder;
        match up().cursor().shard(shard) {
            Ok(_) => prop_assert!(!needs_len, "accepted {:?}", shard),
            Err(Error::InvalidConfig { .. }) => prop_assert!(needs_len, "refused {:?}", shard),
            Err(e) => prop_assert!(false, "unexpected error {e:?}"),
        }
        let seekable_shard = || up().shard(shard).unwrap();

        match bucket {
            None => {
                let expected = model_batches(&sharded, &batch);
                check_forms(
                    "seekable",
                    || seekable_shard().batch(batch).unwrap().cursor(),
                    &expected,
                    &splits,
                )?;
                if needs_len {
                    check_forms(
                        "stream over the seekable shard",
                        || seekable_shard().cursor().batch(batch).unwrap(),
                        &expected,
                        &splits,
                    )?;
                } else {
                    check_forms(
                        "stream",
                        || up().cursor().shard(shard).unwrap().batch(batch).unwrap(),
                        &expected,
                        &splits,
                    )?;
                }
            }
            Some(b) => {
                // The bucket's order, checked against what it promises, epoch by epoch.
                let mut bucketed = vec![Vec::new(); sharded.len()];
                let items = seekable_shard().bucket(b, key()).unwrap().cursor();
                for s in items.into_iter() {
                    let s = s.unwrap();
                    bucketed[s.epoch as usize].push(s);
                }
                for (e, (before, after)) in sharded.iter().zip(&bucketed).enumerate() {
                    if let Err(why) = check_bucket(before, after, &b) {
                        prop_assert!(false, "epoch {}: {}", e, why);
                    }
                }
                let expected = model_batches(&bucketed, &batch);
                check_forms(
                    "seekable",
                    || seekable_shard().bucket(b, key()).unwrap().batch(batch).unwrap().cursor(),
                    &expected,
                    &splits,
                )?;
                if needs_len {
                    check_forms(
                        "stream over the seekable shard",
                        || {
                            seekable_shard()
                                .cursor()
                                .bucket(b, key())
                                .unwrap()
                                .batch(batch)
                                .unwrap()
                        },
                        &expected,
                        &splits,
                    )?;
                } else {
                    check_forms(
                        "stream",
                        || {
                            up().cursor()
                                .shard(shard)
                                .unwrap()
                                .bucket(b, key())
                                .unwrap()
                                .batch(batch)
                                .unwrap()
                        },
                        &expected,
                        &splits,
                    )?;
                }
            }
        }
    }
}
