//! A weighted `mix` over collections (two collections, and a collection with a plain dataset)
//! delivers the plain model's sequence, `Mix`'s own index stream over the sources' lengths, with
//! each record's bytes the model's, and resumes from a checkpoint after any batch exactly where
//! it stopped.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::Path;
use std::sync::Arc;

use futures::executor::block_on;
use futures::StreamExt;
use zrecord::collection::{commit, CommitOptions};
use zrecord::pipeline::{
    Concat, Exhausted, Loader, LoaderBuilder, LoaderState, MergePolicy, Mix, MixConfig,
    PrefetchConfig, Stage,
};
use zrecord::{DType, Dataset, Field, Schema, Writer, WriterConfig};

/// Record `i` of part `part`.
fn record(part: u64, i: u64) -> Vec<u8> {
    let len = 1 + ((i * 17 + part * 5) % 40) as usize;
    (0..len)
        .map(|j| (part as u8).wrapping_mul(41) ^ (i as u8).wrapping_add(j as u8))
        .collect()
}

/// A dataset of `n` records of part `part` at `dir`; its records.
fn make(dir: &Path, part: u64, n: u64) -> Vec<Vec<u8>> {
    let schema = Schema::new().field(Field::new("x", DType::Bytes));
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    let recs: Vec<Vec<u8>> = (0..n).map(|i| record(part, i)).collect();
    for r in &recs {
        w.append(&[r]).unwrap();
    }
    w.commit().unwrap();
    recs
}

/// A local collection at `root` of parts with these lengths (ids from `first`), committed in
/// two commits; its records in global index order.
fn collection(tmp: &Path, root: &str, first: u64, lens: &[u64]) -> (Arc<Dataset>, Vec<Vec<u8>>) {
    let mut model = Vec::new();
    let mut dirs = Vec::new();
    for (k, &n) in lens.iter().enumerate() {
        let part = first + k as u64;
        let dir = tmp.join(format!("{root}-src/p{part}"));
        model.extend(make(&dir, part, n));
        dirs.push(dir);
    }
    let at = tmp.join(root);
    let (one, two) = dirs.split_at(1);
    commit(&at, one, CommitOptions::default()).unwrap();
    commit(&at, two, CommitOptions::default()).unwrap();
    let ds = Dataset::open(&at).unwrap();
    assert!(ds.snapshot().is_collection());
    (Arc::new(ds), model)
}

type Src = Concat<Dataset>;

fn config() -> MixConfig {
    MixConfig::new(vec![3.0, 1.0])
        .exhausted(Exhausted::Restart)
        .epochs(Some(2))
        .epoch_len(Some(61))
}

fn builder(src: &Arc<Src>, workers: usize) -> LoaderBuilder<Src> {
    Loader::builder(Arc::clone(src))
        .mix(config())
        .seed(11)
        .batch_size(5)
        .prefetch(
            PrefetchConfig::default()
                .num_workers(workers)
                .worker_queue_size(2)
                .merge(MergePolicy::Strict),
        )
}

/// Each batch's indices and records.
type Item = (Vec<u64>, Vec<Vec<u8>>);

fn item(b: zrecord::Result<zrecord::pipeline::LoaderBatch<zrecord::Batch>>) -> Item {
    let b = b.unwrap();
    let records = b
        .data
        .into_records()
        .into_iter()
        .map(|r| r[0].to_vec())
        .collect();
    (b.batch.indices(), records)
}

fn check(sources: Vec<(Arc<Dataset>, Vec<Vec<u8>>)>) {
    let lens: Vec<u64> = sources.iter().map(|(d, _)| d.len()).collect();
    let model: Vec<Vec<u8>> = sources.iter().flat_map(|(_, m)| m.clone()).collect();
    let src = Arc::new(Concat::new(sources.into_iter().map(|(d, _)| d).collect()).unwrap());

    // The model: the mix's own stream over the sources' lengths, seeded as the loader seeds it.
    let want: Vec<u64> = Mix::new(&lens, config().seed(11))
        .unwrap()
        .cursor()
        .into_iter()
        .map(|s| s.unwrap().index)
        .collect();
    assert_eq!(want.len(), 2 * 61);
    let full: Vec<Item> = block_on(builder(&src, 2).build().unwrap().map(item).collect());
    let got: Vec<u64> = full.iter().flat_map(|(i, _)| i.clone()).collect();
    assert_eq!(got, want, "the loader's sequence is the mix's");
    for (indices, records) in &full {
        for (i, r) in indices.iter().zip(records) {
            assert_eq!(r, &model[*i as usize], "record {i}");
        }
    }
    // Both sources serve; the heavier one about three times as much.
    let first = got.iter().filter(|&&i| i < lens[0]).count();
    assert!((85..=98).contains(&first), "{first} of 122 from the first");

    for k in 0..=full.len() {
        let mut loader = builder(&src, 2).build().unwrap();
        let head: Vec<Item> = block_on(async {
            let mut v = Vec::new();
            for _ in 0..k {
                v.push(item(loader.next().await.unwrap()));
            }
            v
        });
        let json = serde_json::to_string(&loader.state()).unwrap();
        drop(loader);
        let state: LoaderState = serde_json::from_str(&json).unwrap();
        let resumed = builder(&src, 1 + k % 3).resume(&state).unwrap();
        let tail: Vec<Item> = block_on(resumed.map(item).collect());
        assert_eq!(head[..], full[..k]);
        assert_eq!(tail[..], full[k..], "resumed after batch {k}");
    }
}

#[test]
fn a_mix_of_two_collections_follows_the_model_and_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let a = collection(tmp.path(), "a", 0, &[30, 0, 17]);
    let b = collection(tmp.path(), "b", 10, &[9, 12]);
    check(vec![a, b]);
}

#[test]
fn a_mix_of_a_collection_and_a_dataset_follows_the_model_and_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let a = collection(tmp.path(), "a", 0, &[21, 25]);
    let model = make(&tmp.path().join("plain"), 20, 33);
    let plain = Arc::new(Dataset::open(tmp.path().join("plain")).unwrap());
    assert!(!plain.snapshot().is_collection());
    check(vec![a, (plain, model)]);
}
