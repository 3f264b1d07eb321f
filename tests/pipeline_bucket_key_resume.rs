//! A bucketed checkpoint records which key it was bucketed by (which field, computed how), and
//! resuming with a differently computed key is refused naming both keys; the key does not matter
//! to an unbucketed checkpoint.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use futures::executor::block_on;
use zrecord::pipeline::{
    BucketConfig, DatasetSource, LoaderBuilder, LoaderState, PrefetchConfig, Source,
};
use zrecord::{DType, Dataset, Error, Field, Schema, Writer, WriterConfig};

fn create(dir: &std::path::Path) {
    let schema = Schema::new()
        .field(Field::new("x", DType::U8))
        .field(Field::new("label", DType::I32).shape(vec![]));
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    for i in 0..120u64 {
        let x = vec![i as u8; (i * 37 % 23) as usize];
        w.append(&[x, (i as i32).to_le_bytes().to_vec()]).unwrap();
    }
    w.commit().unwrap();
}

fn builder<S: Source>(src: S, bucketed: bool) -> LoaderBuilder<S> {
    let b = LoaderBuilder::new(Arc::new(src))
        .seed(5)
        .epochs(Some(1))
        .batch_size(4)
        .prefetch(PrefetchConfig::default().num_workers(2));
    if bucketed {
        b.bucket(BucketConfig::default().buffer_size(32).pack_size(4))
    } else {
        b
    }
}

/// Checkpoint after 3 batches, and the indices of every later batch.
fn checkpoint<S: Source<Batch = zrecord::Batch>>(
    b: LoaderBuilder<S>,
) -> (LoaderState, Vec<Vec<u64>>) {
    let mut loader = b.build().unwrap();
    for _ in 0..3 {
        block_on(loader.next()).unwrap().unwrap();
    }
    let state = loader.state();
    (state, rest(loader))
}

fn rest<S: Source<Batch = zrecord::Batch>>(
    mut loader: zrecord::pipeline::Loader<S>,
) -> Vec<Vec<u64>> {
    std::iter::from_fn(|| block_on(loader.next()))
        .map(|b| b.unwrap().indices())
        .collect()
}

fn refused<S: Source<Batch = zrecord::Batch>>(
    b: LoaderBuilder<S>,
    state: &LoaderState,
    needle: &str,
) {
    match b.resume(state) {
        Err(e @ Error::ResumeMismatch { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(needle), "{msg:?} should mention {needle:?}");
        }
        Err(e) => panic!("expected ResumeMismatch, got {e:?}"),
        Ok(_) => panic!("expected ResumeMismatch, the resume was accepted"),
    }
}

#[test]
fn a_differently_computed_key_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    create(&dir);
    let ds = Dataset::open(&dir).unwrap();
    let by_x = || DatasetSource::new(&ds);
    let by_label = || DatasetSource::new(&ds).key_field("label").unwrap();

    assert_eq!(by_x().key_description(), "stored_len(field=x)");
    assert_eq!(by_label().key_description(), "stored_len(field=label)");
    assert_eq!(
        DatasetSource::new(&ds)
            .fields(&["label"])
            .unwrap()
            .key_description(),
        "stored_len(field=label)"
    );
    assert_eq!(Source::key_description(&ds), "stored_len(all_fields)");

    let (state, want) = checkpoint(builder(by_x(), true));
    assert!(
        state.config.contains("key=stored_len(field=x))"),
        "{}",
        state.config
    );
    // The same key resumes, exactly where it was.
    assert_eq!(rest(builder(by_x(), true).resume(&state).unwrap()), want);
    // Another field, or another computation, is refused, naming both keys.
    refused(
        builder(by_label(), true),
        &state,
        "bucket.key: checkpoint stored_len(field=x), this loader stored_len(field=label)",
    );
    refused(
        builder(Dataset::open(&dir).unwrap(), true),
        &state,
        "bucket.key: checkpoint stored_len(field=x), this loader stored_len(all_fields)",
    );
    // The key field chosen by `fields` or by `key_field` is the same key.
    let (state, want) = checkpoint(builder(by_label(), true));
    let by_fields = DatasetSource::new(&ds).fields(&["label", "x"]).unwrap();
    assert_eq!(rest(builder(by_fields, true).resume(&state).unwrap()), want);

    // Unbucketed, the key plays no part.
    let (state, want) = checkpoint(builder(by_x(), false));
    assert!(!state.config.contains("key="), "{}", state.config);
    assert_eq!(
        rest(builder(by_label(), false).resume(&state).unwrap()),
        want
    );
}
