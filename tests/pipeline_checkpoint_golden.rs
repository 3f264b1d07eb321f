//! Checkpoints keep their meaning across versions: an unbucketed loader's checkpoint is
//! byte-identical to a golden JSON of this version; a checkpoint zrecord 0.1 wrote (whose
//! shuffled order was another permutation) resumes into exactly that version's order, again
//! after a resume, and through an elastic merge; the one intended break, a checkpoint of the old
//! wrapping sequential sampler, is refused with the setting named.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use futures::executor::block_on;
use zrecord::pipeline::{
    LoaderBuilder, LoaderState, MemorySource, PrefetchConfig, SamplerConfig, SamplerMode,
    ShardConfig,
};
use zrecord::Error;

/// Written by zrecord 0.1 (whose shuffled sampler ran a balanced Feistel network, and whose
/// descriptions have no `permutation` setting) after the five batches of `BATCHES_0_1` below.
const GOLDEN: &str = r#"{"version":1,"generation":3,"source_len":40,"fingerprint":3380771771635338364,"config":"sampler(len=40, mode=Shuffled, seed=11, epochs=Some(2)) | shard(total=2, index=1, mode=Interleaved, pad=false, drop=false) | batch(batch_size=3, drop_last=false)","prefetch":{"num_workers":2,"base":0,"next_worker":1,"workers":[{"consumed":3,"next":{"epoch":0,"position":6}},{"consumed":2,"next":{"epoch":0,"position":5}}]}}"#;

/// Every batch zrecord 0.1's loader of `builder()` delivered (rank 1 of 2), in order: `GOLDEN`
/// was taken after the first five.
const BATCHES_0_1: [&[u64]; 14] = [
    &[22, 36, 1],
    &[4, 29, 16],
    &[24, 27, 21],
    &[14, 12, 26],
    &[28, 37, 34],
    &[0, 11, 31],
    &[32, 38],
    &[24, 38, 10],
    &[26, 12, 33],
    &[25, 39, 32],
    &[13, 1, 28],
    &[16, 23, 8],
    &[18, 19, 11],
    &[20, 22],
];

/// This version's checkpoint of the same loader at the same point: the sampler's description
/// names its permutation.
const GOLDEN_2: &str = r#"{"version":1,"generation":3,"source_len":40,"fingerprint":4814680155274665695,"config":"sampler(len=40, mode=Shuffled, seed=11, epochs=Some(2), permutation=2) | shard(total=2, index=1, mode=Interleaved, pad=false, drop=false) | batch(batch_size=3, drop_last=false)","prefetch":{"num_workers":2,"base":0,"next_worker":1,"workers":[{"consumed":3,"next":{"epoch":0,"position":6}},{"consumed":2,"next":{"epoch":0,"position":5}}]}}"#;

/// zrecord 0.1's checkpoints of both ranks of a 2-rank run of `builder()`: rank 0 after the four
/// batches of `CONSUMED_0_1_RANK0`, rank 1 after the two of `CONSUMED_0_1_RANK1`.
const RANK0_0_1: &str = r#"{"version":1,"generation":3,"source_len":40,"fingerprint":6032610598311715714,"config":"sampler(len=40, mode=Shuffled, seed=11, epochs=Some(2)) | shard(total=2, index=0, mode=Interleaved, pad=false, drop=false) | batch(batch_size=3, drop_last=false)","prefetch":{"num_workers":2,"base":0,"next_worker":0,"workers":[{"consumed":2,"next":{"epoch":0,"position":4}},{"consumed":2,"next":{"epoch":0,"position":5}}]}}"#;
const RANK1_0_1: &str = r#"{"version":1,"generation":3,"source_len":40,"fingerprint":3380771771635338364,"config":"sampler(len=40, mode=Shuffled, seed=11, epochs=Some(2)) | shard(total=2, index=1, mode=Interleaved, pad=false, drop=false) | batch(batch_size=3, drop_last=false)","prefetch":{"num_workers":2,"base":0,"next_worker":0,"workers":[{"consumed":1,"next":{"epoch":0,"position":2}},{"consumed":1,"next":{"epoch":0,"position":3}}]}}"#;
const CONSUMED_0_1_RANK0: [[u64; 3]; 4] = [[9, 15, 35], [20, 3, 19], [30, 18, 8], [23, 39, 2]];
const CONSUMED_0_1_RANK1: [[u64; 3]; 2] = [[22, 36, 1], [4, 29, 16]];

/// Written by a loader whose `SamplerMode::Sequential { window_len: 3 }` wrapped around inside
/// an epoch (before `Sequential` meant exactly `0..n` and the wrap became `SequentialWrap`).
const GOLDEN_OLD_SEQUENTIAL: &str = r#"{"version":1,"generation":3,"source_len":40,"fingerprint":3313458903803327985,"config":"sampler(len=40, mode=Sequential { window_len: 3 }, seed=11, epochs=Some(2)) | shard(total=2, index=1, mode=Interleaved, pad=false, drop=false) | batch(batch_size=3, drop_last=false)","prefetch":{"num_workers":2,"base":0,"next_worker":1,"workers":[{"consumed":3,"next":{"epoch":0,"position":6}},{"consumed":2,"next":{"epoch":0,"position":5}}]}}"#;

fn builder() -> LoaderBuilder<MemorySource> {
    let src = MemorySource::new((0..40u8).map(|i| vec![i; usize::from(i % 5)]).collect());
    LoaderBuilder::new(Arc::new(src.with_generation(3)))
        .sampler(
            SamplerConfig::default()
                .mode(SamplerMode::Shuffled)
                .seed(11)
                .epochs(Some(2)),
        )
        .shard(ShardConfig::default().total(2).index(1))
        .batch_size(3)
        .prefetch(PrefetchConfig::default().num_workers(2))
}

fn rest(loader: &mut zrecord::pipeline::Loader<MemorySource>) -> Vec<Vec<u64>> {
    std::iter::from_fn(|| block_on(loader.next()))
        .map(|b| b.unwrap().indices())
        .collect()
}

#[test]
fn unbucketed_checkpoints_are_unchanged() {
    let mut loader = builder().build().unwrap();
    let mut batches = Vec::new();
    let mut json = String::new();
    while let Some(b) = block_on(loader.next()) {
        batches.push(b.unwrap().indices());
        if batches.len() == 5 {
            json = serde_json::to_string(&loader.state()).unwrap();
        }
    }
    let state: LoaderState = serde_json::from_str(&json).unwrap();
    assert_eq!(json, GOLDEN_2);
    assert_eq!(rest(&mut builder().resume(&state).unwrap()), batches[5..]);
    // This version's order is another permutation than 0.1's.
    assert_ne!(batches, BATCHES_0_1.map(<[u64]>::to_vec));
}

#[test]
fn a_checkpoint_of_0_1_resumes_into_its_order_and_keeps_it() {
    let state: LoaderState = serde_json::from_str(GOLDEN).unwrap();
    let mut resumed = builder().resume(&state).unwrap();
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(block_on(resumed.next()).unwrap().unwrap().indices());
    }
    // A checkpoint taken after such a resume still names 0.1's order, and resumes into it.
    let again = resumed.state();
    assert_eq!(again.config, state.config);
    assert_eq!(again.fingerprint, state.fingerprint);
    got.extend(rest(&mut resumed));
    assert_eq!(
        got,
        BATCHES_0_1[5..]
            .iter()
            .map(|b| b.to_vec())
            .collect::<Vec<_>>()
    );
    let json = serde_json::to_string(&again).unwrap();
    let again: LoaderState = serde_json::from_str(&json).unwrap();
    assert_eq!(rest(&mut builder().resume(&again).unwrap()), got[4..]);
}

#[test]
fn checkpoints_of_0_1_merge_elastically_into_its_order() {
    let states: Vec<LoaderState> = [RANK0_0_1, RANK1_0_1]
        .iter()
        .map(|j| serde_json::from_str(j).unwrap())
        .collect();
    // Resumed on 3 ranks: with what the 2 old ranks consumed, every index exactly twice (two
    // epochs), and the first epoch finishes before the second starts on every rank.
    let mut count = vec![0u32; 40];
    for b in CONSUMED_0_1_RANK0.iter().chain(&CONSUMED_0_1_RANK1) {
        for &i in b {
            count[i as usize] += 1;
        }
    }
    for rank in 0..3 {
        let b = builder().shard(ShardConfig::default().total(3).index(rank));
        let merged = b.merge_checkpoints(&states).unwrap();
        assert!(!merged.config.contains("permutation"), "{}", merged.config);
        for batch in rest(&mut b.resume(&merged).unwrap()) {
            for i in batch {
                count[i as usize] += 1;
            }
        }
    }
    assert_eq!(count, vec![2; 40]);
    // The same merge on this version's order would be refused: a checkpoint names one order.
    let mut mixed = states.clone();
    mixed[0].config = mixed[0]
        .config
        .replace("epochs=Some(2))", "epochs=Some(2), permutation=2)");
    let err = builder().merge_checkpoints(&mixed).unwrap_err().to_string();
    assert!(
        err.contains("sampler.permutation: checkpoint (absent), this loader 2"),
        "{err}"
    );
}

#[test]
fn the_sequential_baseline_of_a_0_1_merge_is_its_loader() {
    // `elastic_chain` of a merged 0.1 checkpoint (the sequential baseline of the resumed
    // loader) runs 0.1's order too: its residual segments name 0.1's positions.
    let states: Vec<LoaderState> = [RANK0_0_1, RANK1_0_1]
        .iter()
        .map(|j| serde_json::from_str(j).unwrap())
        .collect();
    for rank in 0..3 {
        let b = builder().shard(ShardConfig::default().total(3).index(rank));
        let merged = b.merge_checkpoints(&states).unwrap();
        let loader = rest(&mut b.clone().resume(&merged).unwrap());
        let chain = b.elastic_chain(&merged).unwrap();
        let sequential: Vec<Vec<u64>> = zrecord::pipeline::Stage::cursor(chain)
            .into_iter()
            .map(|batch| batch.unwrap().indices())
            .collect();
        assert_eq!(sequential, loader, "rank {rank} of 3");
    }
}

#[test]
fn an_old_wrapping_sequential_checkpoint_is_refused() {
    let state: LoaderState = serde_json::from_str(GOLDEN_OLD_SEQUENTIAL).unwrap();
    for mode in [
        SamplerMode::Sequential,
        SamplerMode::SequentialWrap { window_len: 3 },
    ] {
        let err = builder()
            .sampler(SamplerConfig::default().mode(mode).seed(11).epochs(Some(2)))
            .resume(&state)
            .unwrap_err();
        let Error::ResumeMismatch { reason } = &err else {
            panic!("{err}");
        };
        assert!(
            reason.contains(&format!(
                "sampler.mode: checkpoint Sequential {{ window_len: 3 }}, this loader {mode:?}"
            )),
            "{reason}"
        );
    }
}
