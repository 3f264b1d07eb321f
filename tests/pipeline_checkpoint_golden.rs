//! An unbucketed loader's checkpoint is byte-identical to the one earlier versions wrote (a
//! golden JSON), and that golden checkpoint resumes; the one intended break, a checkpoint of the
//! old wrapping sequential sampler, is refused with the setting named.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use futures::executor::block_on;
use zrecord::pipeline::{
    LoaderBuilder, LoaderState, MemorySource, PrefetchConfig, SamplerConfig, SamplerMode,
    ShardConfig,
};
use zrecord::Error;

/// Written by the loader before bucket keys were described by their source.
const GOLDEN: &str = r#"{"version":1,"generation":3,"source_len":40,"fingerprint":3380771771635338364,"config":"sampler(len=40, mode=Shuffled, seed=11, epochs=Some(2)) | shard(total=2, index=1, mode=Interleaved, pad=false, drop=false) | batch(batch_size=3, drop_last=false)","prefetch":{"num_workers":2,"base":0,"next_worker":1,"workers":[{"consumed":3,"next":{"epoch":0,"position":6}},{"consumed":2,"next":{"epoch":0,"position":5}}]}}"#;

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

#[test]
fn unbucketed_checkpoints_are_unchanged() {
    let mut loader = builder().build().unwrap();
    let mut batches = Vec::new();
    while let Some(b) = block_on(loader.next()) {
        batches.push(b.unwrap().indices());
        if batches.len() == 5 {
            let json = serde_json::to_string(&loader.state()).unwrap();
            assert_eq!(json, GOLDEN);
        }
    }
    let state: LoaderState = serde_json::from_str(GOLDEN).unwrap();
    let mut resumed = builder().resume(&state).unwrap();
    let rest: Vec<Vec<u64>> = std::iter::from_fn(|| block_on(resumed.next()))
        .map(|b| b.unwrap().indices())
        .collect();
    assert_eq!(rest, batches[5..]);
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
