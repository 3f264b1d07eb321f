//! A random transform stays exact: every record gets the same decoded, cropped and flipped
//! image in the same epoch with any worker count, after a resume at any batch with another
//! worker count, and after an elastic resume from 2 ranks onto 3, where every record of the
//! interrupted epoch gets the crop the uninterrupted run gave it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::executor::block_on;

#[path = "support/images.rs"]
mod images;

use zrecord::pipeline::{
    DatasetSource, Loader, LoaderBuilder, LoaderState, PrefetchConfig, ShardConfig,
};
use zrecord::transform::{image, Map};
use zrecord::Dataset;

type Seen = BTreeMap<(u64, u64), Vec<u8>>;

fn builder(dir: &std::path::Path, workers: usize) -> LoaderBuilder<DatasetSource> {
    let source = Arc::new(DatasetSource::new(&Dataset::open(dir).unwrap()));
    Loader::builder(source)
        .seed(11)
        .epochs(Some(2))
        .batch_size(7)
        .prefetch(PrefetchConfig::default().num_workers(workers))
        .map(Map::new().field(
            "image",
            [
                image::decode(),
                image::random_resized_crop(16),
                image::random_flip(),
            ],
        ))
}

/// Takes up to `limit` batches: every (epoch, index) → its image, and the state after them.
fn take(mut loader: Loader<DatasetSource>, limit: usize, seen: &mut Seen) -> LoaderState {
    for _ in 0..limit {
        let Some(batch) = block_on(loader.next()) else {
            break;
        };
        let batch = batch.unwrap();
        let f = batch.data.field_position("image").unwrap();
        assert_eq!(batch.data.shape(f), Some(&[16u64, 16, 3][..]));
        assert_eq!(
            batch.data.column(f).unwrap().len(),
            batch.data.len() * 16 * 16 * 3
        );
        for (r, s) in batch.batch.samples.iter().enumerate() {
            let img = batch.data.get(r, f).unwrap().to_vec();
            if let Some(old) = seen.insert((s.epoch, s.index), img.clone()) {
                assert_eq!(
                    old, img,
                    "record {} of epoch {} seen twice, differently",
                    s.index, s.epoch
                );
            }
        }
    }
    loader.state()
}

#[test]
fn same_images_across_workers_and_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    images::dataset(&dir, 60, None);

    let mut reference = Seen::new();
    take(
        builder(&dir, 1).build().unwrap(),
        usize::MAX,
        &mut reference,
    );
    assert_eq!(reference.len(), 120);
    // Not a constant transform: the crops differ between epochs.
    let differ = (0..60)
        .filter(|i| reference[&(0, *i)] != reference[&(1, *i)])
        .count();
    assert!(differ > 50, "{differ}");

    for workers in [2, 3] {
        let mut seen = Seen::new();
        take(
            builder(&dir, workers).build().unwrap(),
            usize::MAX,
            &mut seen,
        );
        assert_eq!(seen, reference, "{workers} workers");
    }
    for (split, before, after) in [(1, 1, 3), (5, 2, 1), (9, 3, 2), (13, 2, 2)] {
        let mut seen = Seen::new();
        let state = take(builder(&dir, before).build().unwrap(), split, &mut seen);
        let state: LoaderState =
            serde_json::from_str(&serde_json::to_string(&state).unwrap()).unwrap();
        take(
            builder(&dir, after).resume(&state).unwrap(),
            usize::MAX,
            &mut seen,
        );
        assert_eq!(
            seen, reference,
            "split at batch {split}, {before} then {after} workers"
        );
    }
}

#[test]
fn elastic_resume_gives_every_record_its_crop() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    images::dataset(&dir, 60, None);
    let mut reference = Seen::new();
    take(
        builder(&dir, 2).build().unwrap(),
        usize::MAX,
        &mut reference,
    );

    // Two ranks stop at different places in epoch 0; three ranks take over.
    let mut seen = Seen::new();
    let states: Vec<LoaderState> = [(0, 2), (1, 3)]
        .into_iter()
        .map(|(rank, batches)| {
            let b = builder(&dir, 1).shard(ShardConfig::new(2, rank));
            take(b.build().unwrap(), batches, &mut seen)
        })
        .collect();
    for rank in 0..3 {
        let b = builder(&dir, 2).shard(ShardConfig::new(3, rank));
        take(b.resume_elastic(&states).unwrap(), usize::MAX, &mut seen);
    }
    assert_eq!(seen, reference);
}
