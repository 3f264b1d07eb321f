//! A failing gather, key or transform surfaces as `Some(Err(..))` from `next()` in the place of
//! the batch it broke, never as a hang or a panic. By default the stream then ends and the
//! checkpoint still points at the failed batch, so a resumed loader tries it again and, once it
//! succeeds, delivers exactly the uninterrupted run; under `OnError::Skip` the loader goes on
//! after it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::executor::block_on;
use futures::StreamExt;
use zrecord::pipeline::{
    BucketConfig, BucketKey, LoaderBuilder, MemorySource, OnError, PrefetchConfig, RetryPolicy,
    SamplerConfig, SamplerMode, Source, Stage,
};
use zrecord::Error;

/// Records whose index is a multiple of 17 are "corrupt" while the source is broken.
struct Flaky(MemorySource, AtomicBool);

impl Source for Flaky {
    type Batch = Vec<Vec<u8>>;

    fn len(&self) -> u64 {
        self.0.len()
    }

    fn item_len(&self, index: u64) -> zrecord::Result<u64> {
        self.0.item_len(index)
    }

    fn gather(&self, indices: &[u64]) -> zrecord::Result<Self::Batch> {
        let broken = self.1.load(Ordering::SeqCst);
        if let Some(&bad) = indices.iter().find(|&&i| broken && i % 17 == 0) {
            return Err(Error::ShapeMismatch {
                field: "x".into(),
                reason: format!("record {bad} is corrupt"),
            });
        }
        self.0.gather(indices)
    }
}

fn flaky(n: u8) -> Arc<Flaky> {
    Arc::new(Flaky(
        MemorySource::new((0..n).map(|i| vec![i]).collect()),
        AtomicBool::new(true),
    ))
}

fn builder(src: Arc<Flaky>, workers: usize) -> LoaderBuilder<Flaky> {
    LoaderBuilder::new(src)
        .sampler(
            SamplerConfig::default()
                .mode(SamplerMode::Shuffled)
                .seed(8)
                .epochs(Some(2)),
        )
        .batch_size(3)
        .prefetch(prefetch(workers))
}

/// The prefetch of [`builder`]'s loaders.
fn prefetch(workers: usize) -> PrefetchConfig {
    PrefetchConfig::default()
        .num_workers(workers)
        .worker_queue_size(1)
        // The corrupt records fail on every try: retrying only slows the tests.
        .retry(RetryPolicy::none())
}

/// Per batch: Ok(indices) or Err(message).
fn outcomes(b: LoaderBuilder<Flaky>) -> Vec<Result<Vec<u64>, String>> {
    block_on(
        b.build()
            .unwrap()
            .map(|r| r.map(|b| b.indices()).map_err(|e| e.to_string()))
            .collect(),
    )
}

#[test]
fn under_skip_gather_errors_arrive_in_place_and_the_loader_goes_on() {
    let src = flaky(100);
    let b = builder(Arc::clone(&src), 1);
    let chain = b.index_chain().unwrap();
    let want: Vec<Result<Vec<u64>, String>> = chain
        .cursor()
        .into_iter()
        .map(|ib| {
            let ib = ib.unwrap();
            src.gather(&ib.indices())
                .map(|_| ib.indices())
                .map_err(|e| e.to_string())
        })
        .collect();
    assert!(want.iter().filter(|r| r.is_err()).count() >= 6);
    for workers in [1, 2, 5] {
        let got = outcomes(
            builder(Arc::clone(&src), workers).prefetch(prefetch(workers).on_error(OnError::Skip)),
        );
        assert_eq!(got, want, "{workers} workers");
    }
}

#[test]
fn a_panicking_transform_is_an_error_not_a_crash() {
    let src = Arc::new(MemorySource::new((0..60u8).map(|i| vec![i]).collect()));
    let loader = LoaderBuilder::new(src)
        .sampler(
            SamplerConfig::default()
                .mode(SamplerMode::Shuffled)
                .seed(8)
                .epochs(Some(2)),
        )
        .batch_size(3)
        .prefetch(
            PrefetchConfig::default()
                .num_workers(3)
                .on_error(OnError::Skip),
        )
        .transform(|data: Vec<Vec<u8>>, batch| {
            if batch.position == 4 {
                panic!("transform bug at position 4");
            }
            Ok(data.len())
        })
        .build()
        .unwrap();
    let got: Vec<_> = block_on(loader.collect());
    assert_eq!(got.len(), 40);
    let panics: Vec<String> = got
        .iter()
        .filter_map(|r| r.as_ref().err().map(ToString::to_string))
        .filter(|m| m.contains("panicked"))
        .collect();
    assert_eq!(panics.len(), 2, "position 4 of both epochs: {panics:?}");
    assert!(panics[0].contains("transform bug at position 4"));
    // Batches after the panic still arrive.
    assert!(got[5..].iter().any(Result::is_ok));
}

#[test]
fn a_failing_bucket_key_fails_the_batches_of_its_buffer() {
    let src = flaky(40);
    let loader = builder(Arc::clone(&src), 2)
        .prefetch(prefetch(2).on_error(OnError::Skip))
        .bucket(BucketConfig::default().buffer_size(12).pack_size(3).seed(0))
        .bucket_key(BucketKey::new("fails_on_39", |i| {
            if i == 39 {
                Err(Error::IndexOutOfRange { index: i, len: 39 })
            } else {
                Ok(i % 3)
            }
        }))
        .build()
        .unwrap();
    let got: Vec<_> = block_on(loader.collect());
    assert_eq!(got.len(), 28);
    let key_errors = got
        .iter()
        .filter(|r| matches!(r, Err(Error::IndexOutOfRange { index: 39, .. })))
        .count();
    // The buffer holding record 39 is 12 (or the last, 4) records: 4 (or 2) batches per epoch.
    assert!((4..=8).contains(&key_errors), "{key_errors}");
}

#[test]
fn by_default_a_failed_batch_ends_the_stream_and_a_resume_retries_it() {
    for workers in [1, 2, 5] {
        let src = flaky(100);
        src.1.store(false, Ordering::SeqCst);
        let want: Vec<Vec<u64>> = outcomes(builder(Arc::clone(&src), workers))
            .into_iter()
            .map(Result::unwrap)
            .collect();
        src.1.store(true, Ordering::SeqCst);

        let mut loader = builder(Arc::clone(&src), workers).build().unwrap();
        let mut got = Vec::new();
        let error = loop {
            match block_on(loader.next()).expect("a batch fails before the end") {
                Ok(b) => got.push(b.indices()),
                Err(e) => break e.to_string(),
            }
        };
        let failed = &want[got.len()];
        assert!(
            failed
                .iter()
                .any(|i| error.contains(&format!("record {i} is corrupt"))),
            "{workers} workers: {error} is the error of {failed:?}"
        );
        assert!(block_on(loader.next()).is_none(), "{workers} workers");
        assert!(block_on(loader.next()).is_none(), "the stream stays ended");
        let state = loader.state();
        assert_eq!(state.prefetch.consumed(), got.len() as u64);
        drop(loader);

        // Still broken: the resumed loader tries the same batch first, fails and stops again.
        let mut again = builder(Arc::clone(&src), workers).resume(&state).unwrap();
        let e = block_on(again.next()).unwrap().unwrap_err().to_string();
        assert_eq!(e, error, "{workers} workers");
        assert!(block_on(again.next()).is_none());
        assert_eq!(again.state(), state);
        drop(again);

        // Repaired: the resumed loader delivers the failed batch and the rest.
        src.1.store(false, Ordering::SeqCst);
        let resumed = builder(Arc::clone(&src), workers).resume(&state).unwrap();
        got.extend(block_on(
            resumed.map(|r| r.unwrap().indices()).collect::<Vec<_>>(),
        ));
        assert_eq!(got, want, "{workers} workers");
    }
}
