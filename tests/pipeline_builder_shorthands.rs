//! `LoaderBuilder::batch_size`, `drop_last` and `epochs` are shorthands over the one source of
//! truth, the builder's `BatchConfig` and `SamplerConfig`: each changes its one option of the
//! configuration set before it (by `.batch(..)`/`.sampler(..)` or another shorthand), exactly as
//! the configuration's own setter does, and keeps every other option.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use zrecord::pipeline::{BatchConfig, Loader, MemorySource, SamplerConfig, SamplerMode};

fn builder() -> zrecord::pipeline::LoaderBuilder<MemorySource> {
    Loader::builder(Arc::new(MemorySource::new(vec![vec![1u8]; 10])))
}

#[test]
fn batch_shorthands_change_one_option_of_the_batch_configuration() {
    let set = BatchConfig::new(7).drop_last(true);
    let b = builder().batch(set).batch_size(3);
    assert_eq!(b.current_config().batch, set.batch_size(3));
    let b = builder().batch(set).drop_last(false);
    assert_eq!(b.current_config().batch, set.drop_last(false));
    // And the other way round: `.batch` replaces what the shorthands set.
    let b = builder()
        .batch_size(3)
        .drop_last(true)
        .batch(BatchConfig::new(5));
    assert_eq!(b.current_config().batch, BatchConfig::new(5));
    let b = builder().batch_size(3).drop_last(true);
    assert_eq!(
        b.current_config().batch,
        BatchConfig::default().batch_size(3).drop_last(true)
    );
}

#[test]
fn epochs_changes_one_option_of_the_sampler_configuration() {
    let set = SamplerConfig::default()
        .mode(SamplerMode::Sequential)
        .seed(4)
        .epochs(Some(3));
    let b = builder().sampler(set).epochs(None);
    assert_eq!(b.current_config().sampler, set.epochs(None));
    let b = builder().epochs(Some(2)).sampler(set);
    assert_eq!(b.current_config().sampler, set);
}
