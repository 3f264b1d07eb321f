//! A collection handle shows the manifest it opened until `refresh` moves it to a newer one
//! (a snapshot taken before keeps its parts), and a loader checkpoint taken on manifest N is
//! refused on manifest N+1 with `ResumeMismatch` naming the generation.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::executor::block_on;
use zrecord::pipeline::{Loader, SamplerConfig, SamplerMode};
use zrecord::{DType, Dataset, Field, Schema, Writer, WriterConfig};

fn part(dir: &Path, name: &str, n: u8) -> PathBuf {
    let path = dir.join(name);
    let schema = Schema::new().field(Field::new("x", DType::U8));
    let mut w = Writer::create(&path, &schema, WriterConfig::default()).unwrap();
    for i in 0..n {
        w.append(&[vec![i; usize::from(i) + 1]]).unwrap();
    }
    w.commit().unwrap();
    path
}

#[test]
fn refresh_moves_to_the_next_manifest_and_checkpoints_name_theirs() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("c");
    let a = part(tmp.path(), "a", 10);
    zrecord::collection::commit(&root, &[a], Default::default()).unwrap();
    let ds = Arc::new(Dataset::open(&root).unwrap());
    assert_eq!((ds.generation(), ds.len()), (1, 10));
    assert!(!ds.refresh().unwrap());

    let builder = || {
        Loader::builder(Arc::clone(&ds))
            .sampler(
                SamplerConfig::default()
                    .mode(SamplerMode::Shuffled)
                    .seed(1)
                    .epochs(Some(1)),
            )
            .batch_size(2)
    };
    let mut loader = builder().build().unwrap();
    block_on(loader.next()).unwrap().unwrap();
    let state = loader.state();
    drop(loader);

    let old = ds.snapshot();
    let b = part(tmp.path(), "b", 5);
    let r = zrecord::collection::commit(&root, &[b], Default::default()).unwrap();
    assert_eq!((r.number, r.len), (2, 15));
    // Not seen until a refresh.
    assert_eq!(ds.len(), 10);
    assert!(ds.refresh().unwrap());
    assert_eq!((ds.generation(), ds.len()), (2, 15));
    assert_eq!(&ds.get(14).unwrap()[0][..], &[4u8; 5][..]);
    // The old snapshot still reads its manifest's parts.
    assert_eq!(old.len(), 10);
    assert_eq!(&old.get(9).unwrap()[0][..], &[9u8; 10][..]);

    match builder().resume(&state) {
        Err(e @ zrecord::Error::ResumeMismatch { .. }) => {
            assert!(e.to_string().contains("generation 1"), "{e}");
        }
        Err(e) => panic!("expected ResumeMismatch, got {e}"),
        Ok(_) => panic!("a checkpoint of manifest 1 resumed on manifest 2"),
    }
}
