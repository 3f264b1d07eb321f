//! A batch whose gather fails on fewer tries than the retry policy allows is delivered as if it
//! had never failed, in its place; one that fails on every try surfaces its last error; a panic
//! is never retried.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::executor::block_on;
use futures::StreamExt;
use zrecord::pipeline::{
    LoaderBuilder, MemorySource, OnError, PrefetchConfig, RetryPolicy, SamplerConfig, SamplerMode,
    Source, Stage,
};
use zrecord::Error;

/// The gathers of a batch holding record `bad` fail on their first `failures` tries.
struct FailsTimes {
    inner: MemorySource,
    bad: u64,
    failures: u32,
    tries: Mutex<HashMap<u64, u32>>,
}

impl FailsTimes {
    fn new(n: u8, bad: u64, failures: u32) -> Arc<Self> {
        Arc::new(Self {
            inner: MemorySource::new((0..n).map(|i| vec![i]).collect()),
            bad,
            failures,
            tries: Mutex::new(HashMap::new()),
        })
    }

    fn tries(&self) -> u32 {
        self.tries
            .lock()
            .unwrap()
            .get(&self.bad)
            .copied()
            .unwrap_or(0)
    }
}

impl Source for FailsTimes {
    type Batch = Vec<Vec<u8>>;

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn item_len(&self, index: u64) -> zrecord::Result<u64> {
        self.inner.item_len(index)
    }

    fn gather(&self, indices: &[u64]) -> zrecord::Result<Self::Batch> {
        if indices.contains(&self.bad) {
            let mut tries = self.tries.lock().unwrap();
            let t = tries.entry(self.bad).or_insert(0);
            *t += 1;
            if *t <= self.failures {
                return Err(Error::ShapeMismatch {
                    field: "x".into(),
                    reason: format!("record {} failed on try {t}", self.bad),
                });
            }
        }
        self.inner.gather(indices)
    }
}

fn builder(src: Arc<FailsTimes>, workers: usize) -> LoaderBuilder<FailsTimes> {
    LoaderBuilder::new(src)
        .sampler(
            SamplerConfig::default()
                .mode(SamplerMode::Shuffled)
                .seed(5)
                .epochs(Some(1)),
        )
        .batch_size(4)
        .prefetch(PrefetchConfig::default().num_workers(workers))
}

fn baseline(b: &LoaderBuilder<FailsTimes>) -> Vec<Vec<u64>> {
    b.index_chain()
        .unwrap()
        .cursor()
        .into_iter()
        .map(|ib| ib.unwrap().indices())
        .collect()
}

#[test]
fn a_batch_failing_twice_is_delivered_under_the_default_three_tries() {
    for workers in [1, 3] {
        let src = FailsTimes::new(50, 21, 2);
        let b = builder(Arc::clone(&src), workers);
        let want = baseline(&b);
        let got: Vec<Vec<u64>> =
            block_on(b.build().unwrap().map(|r| r.unwrap().indices()).collect());
        assert_eq!(got, want, "{workers} workers");
        assert_eq!(src.tries(), 3);
    }
}

#[test]
fn a_batch_failing_on_every_try_surfaces_the_last_error() {
    let src = FailsTimes::new(50, 21, 5);
    let b = builder(Arc::clone(&src), 2).prefetch(
        PrefetchConfig::default().num_workers(2).retry(
            RetryPolicy::default()
                .attempts(2)
                .backoff(Duration::from_millis(1)),
        ),
    );
    let want = baseline(&b);
    let mut loader = b.build().unwrap();
    let mut got = Vec::new();
    let error = loop {
        match block_on(loader.next()).unwrap() {
            Ok(batch) => got.push(batch.indices()),
            Err(e) => break e,
        }
    };
    assert!(want[got.len()].contains(&21));
    assert!(
        matches!(&error, Error::ShapeMismatch { reason, .. } if reason == "record 21 failed on try 2"),
        "{error}"
    );
    assert!(block_on(loader.next()).is_none());
    assert_eq!(src.tries(), 2);
}

#[test]
fn a_panic_is_not_retried() {
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let src = FailsTimes::new(50, 99, 0);
    let loader = builder(src, 2)
        .prefetch(
            PrefetchConfig::default()
                .num_workers(2)
                .retry(RetryPolicy::default().attempts(4))
                .on_error(OnError::Skip),
        )
        .transform(move |data: Vec<Vec<u8>>, batch| {
            if batch.position == 3 {
                counted.fetch_add(1, Ordering::SeqCst);
                panic!("transform bug");
            }
            Ok(data)
        })
        .build()
        .unwrap();
    let got: Vec<_> = block_on(loader.collect());
    assert_eq!(got.len(), 13);
    assert!(matches!(&got[3], Err(Error::WorkerPanicked { .. })));
    assert_eq!(got.iter().filter(|r| r.is_err()).count(), 1);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn zero_attempts_is_an_invalid_configuration() {
    let src = FailsTimes::new(10, 99, 0);
    let err = builder(src, 1)
        .prefetch(
            PrefetchConfig::default()
                .num_workers(1)
                .retry(RetryPolicy::default().attempts(0)),
        )
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
}
