//! A record a transform cannot handle is a typed error naming the record index, the field and
//! the operation, never a panic: a corrupt JPEG mid-epoch stops the stream there (the
//! checkpoint points at the failed batch) or, with `OnError::Skip`, costs only its batch; an
//! operation of the user's that fails or panics is reported the same way, and is not retried.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures::executor::block_on;

#[path = "support/images.rs"]
mod images;

use zrecord::pipeline::{DatasetSource, Loader, LoaderBuilder, OnError, PrefetchConfig};
use zrecord::transform::{image, Map, Op, OpError, Rng, Value};
use zrecord::{Dataset, Error};

fn builder(dir: &std::path::Path, map: Map, on_error: OnError) -> LoaderBuilder<DatasetSource> {
    let source = Arc::new(DatasetSource::new(&Dataset::open(dir).unwrap()));
    Loader::builder(source)
        .sampler(
            zrecord::pipeline::SamplerConfig::default()
                .mode(zrecord::pipeline::SamplerMode::Sequential),
        )
        .batch_size(4)
        .prefetch(PrefetchConfig::default().num_workers(2).on_error(on_error))
        .map(map)
}

fn vision() -> Map {
    Map::new().field("image", [image::decode(), image::random_resized_crop(8)])
}

#[test]
fn corrupt_jpeg_mid_epoch_names_the_record() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    images::dataset(&dir, 20, Some(9));

    let mut loader = builder(&dir, vision(), OnError::Stop).build().unwrap();
    let mut good = 0;
    let err = loop {
        match block_on(loader.next()).expect("the error ends the stream, not silence") {
            Ok(_) => good += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(good, 2, "batches 0 and 1 come before record 9's batch");
    match &err {
        Error::Transform {
            field,
            index,
            op,
            reason,
        } => {
            assert_eq!((field.as_str(), *index), ("image", 9));
            assert!(
                op.starts_with("decode") || op.starts_with("random_resized_crop"),
                "{op}"
            );
            assert!(reason.contains("JPEG"), "{reason}");
        }
        other => panic!("expected Error::Transform, got {other:?}"),
    }
    assert!(err.to_string().contains("record 9"), "{err}");
    assert!(block_on(loader.next()).is_none());
    // The checkpoint points at the failed batch: a resume tries it first (and fails the same).
    let mut resumed = builder(&dir, vision(), OnError::Stop)
        .resume(&loader.state())
        .unwrap();
    assert!(matches!(
        block_on(resumed.next()),
        Some(Err(Error::Transform { index: 9, .. }))
    ));
}

#[test]
fn skip_loses_only_the_bad_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    images::dataset(&dir, 20, Some(9));
    let mut loader = builder(&dir, vision(), OnError::Skip).build().unwrap();
    let mut indices = Vec::new();
    let mut errors = 0;
    while let Some(b) = block_on(loader.next()) {
        match b {
            Ok(b) => indices.extend(b.indices()),
            Err(Error::Transform { index: 9, .. }) => errors += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(errors, 1);
    let want: Vec<u64> = (0..8).chain(12..20).collect();
    assert_eq!(indices, want);
}

/// Fails on label 5, counting its calls.
#[derive(Debug)]
struct Picky(Arc<AtomicU64>);

impl Op for Picky {
    fn name(&self) -> String {
        "picky".into()
    }
    fn apply(&self, value: Value, _rng: &mut Rng) -> Result<Value, OpError> {
        self.0.fetch_add(1, Ordering::Relaxed);
        let Value::Bytes(b) = &value else {
            return Err("expects bytes".into());
        };
        match i64::from_le_bytes(b[..8].try_into().unwrap()) {
            5 => Err(OpError::new("five is right out")),
            _ => Ok(value),
        }
    }
}

#[test]
fn a_users_failing_op_is_not_retried() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    // Labels are i % 10: record 5 (label 5) fails.
    images::dataset(&dir, 8, None);
    let calls = Arc::new(AtomicU64::new(0));
    let map = Map::new().field(
        "label",
        [Arc::new(Picky(Arc::clone(&calls))) as Arc<dyn Op>],
    );
    let mut loader = builder(&dir, map, OnError::Stop).build().unwrap();
    assert_eq!(
        block_on(loader.next()).unwrap().unwrap().indices(),
        [0, 1, 2, 3]
    );
    match block_on(loader.next()) {
        Some(Err(Error::Transform {
            field,
            index: 5,
            op,
            reason,
        })) => {
            assert_eq!(
                (field.as_str(), op.as_str(), reason.as_str()),
                ("label", "picky", "five is right out")
            );
        }
        other => panic!("{other:?}"),
    }
    // Records 0–3, then 4 and 5 once each: the failure was not tried again.
    assert_eq!(calls.load(Ordering::Relaxed), 6);
}

/// Panics on every record.
#[derive(Debug)]
struct Panics;

impl Op for Panics {
    fn name(&self) -> String {
        "panics".into()
    }
    fn apply(&self, _: Value, _: &mut Rng) -> Result<Value, OpError> {
        panic!("thirteen")
    }
}

#[test]
fn a_panicking_op_is_an_error_not_a_crash() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    images::dataset(&dir, 8, None);
    let map = Map::new().field("image", [Arc::new(Panics) as Arc<dyn Op>]);
    let mut loader = builder(&dir, map, OnError::Stop).build().unwrap();
    match block_on(loader.next()) {
        Some(Err(Error::Transform {
            field,
            index,
            op,
            reason,
        })) => {
            assert_eq!((field.as_str(), op.as_str()), ("image", "panics"));
            assert!(index < 4, "{index}");
            assert_eq!(reason, "the operation panicked: thirteen");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_unknown_field_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    images::dataset(&dir, 8, None);
    let map = Map::new().field("pixels", [image::decode()]);
    let mut loader = builder(&dir, map, OnError::Stop).build().unwrap();
    match block_on(loader.next()) {
        Some(Err(Error::UnknownField { field })) => assert_eq!(field, "pixels"),
        other => panic!("{other:?}"),
    }
}
