//! A real dataset runs through the loader on a multi-thread tokio runtime: every record arrives
//! once per epoch with its bytes, collated; a corrupted chunk surfaces as corruption errors in the
//! places of exactly the batches that read damaged records.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::BTreeMap;
use std::sync::Arc;

use zrecord::pipeline::{
    pad_stack_field, BucketConfig, DatasetSource, Loader, OnError, PadConfig, PadSide, PoolingType,
    PrefetchConfig, RetryPolicy, SamplerConfig, SamplerMode, Source, Stage,
};
use zrecord::{DType, Dataset, Field, Schema, Writer, WriterConfig};

const N: u64 = 600;

fn record(i: u64) -> Vec<u8> {
    let len = (i * 31 % 97) as usize + 1;
    (0..len)
        .map(|j| (i as u8).wrapping_mul(7).wrapping_add(j as u8))
        .collect()
}

fn create(dir: &std::path::Path) {
    let schema = Schema::new()
        .field(Field::new("x", DType::U8))
        .field(Field::new("label", DType::I32).shape(vec![]));
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    for i in 0..N {
        w.append(&[record(i), (i as i32).to_le_bytes().to_vec()])
            .unwrap();
    }
    w.commit().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dataset_through_the_loader() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    create(&dir);
    let ds = Dataset::open(&dir).unwrap();
    assert_eq!(
        Source::item_len(&ds, 5).unwrap(),
        record(5).len() as u64 + 4
    );

    // Pinned snapshot, field "x" only, bucketed by its length.
    let src = Arc::new(DatasetSource::new(&ds).fields(&["x"]).unwrap());
    let mut loader = Loader::builder(src)
        .sampler(
            SamplerConfig::default()
                .mode(SamplerMode::Shuffled)
                .seed(99)
                .epochs(Some(2)),
        )
        .bucket(
            BucketConfig::default()
                .buffer_size(128)
                .pack_size(8)
                .seed(99),
        )
        .batch_size(8)
        .prefetch(PrefetchConfig::default().num_workers(3))
        .transform(|batch: zrecord::Batch, _| {
            let padded = pad_stack_field::<u8>(
                &batch,
                0,
                PadConfig::new(0)
                    .side(PadSide::Left)
                    .pad_to_multiple_of(Some(4)),
            )?;
            let last = padded.pooling_mask(PoolingType::Last);
            Ok((padded, last))
        })
        .build()
        .unwrap();

    let mut seen: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut batches = 0;
    while let Some(b) = loader.next().await {
        let b = b.unwrap();
        let (padded, last) = &b.data;
        assert_eq!(padded.cols % 4, 0);
        for (r, &i) in b.indices().iter().enumerate() {
            let want = record(i);
            let row = padded.row(r).unwrap();
            assert_eq!(&row[padded.cols - want.len()..], &want[..], "record {i}");
            assert_eq!(padded.lengths[r], want.len());
            // Left padding: the last token is the last column.
            assert_eq!(last[r * padded.cols + padded.cols - 1], 1);
        }
        seen.entry(b.epoch()).or_default().extend(b.indices());
        batches += 1;
    }
    assert_eq!(batches, 2 * 75);
    for (_, mut v) in seen {
        v.sort_unstable();
        assert_eq!(v, (0..N).collect::<Vec<_>>());
    }
    loader.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corruption_surfaces_in_place() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    create(&dir);
    // Damage a few bytes in the middle of every chunk file.
    for entry in std::fs::read_dir(dir.join("chunk")).unwrap() {
        let path = entry.unwrap().path();
        let mut bytes = std::fs::read(&path).unwrap();
        let mid = bytes.len() / 2;
        for b in &mut bytes[mid..mid + 3] {
            *b ^= 0x5a;
        }
        std::fs::write(&path, bytes).unwrap();
    }
    let ds = Arc::new(Dataset::open(&dir).unwrap());
    let builder = Loader::builder(Arc::clone(&ds))
        .sampler(
            SamplerConfig::default()
                .mode(SamplerMode::Shuffled)
                .seed(3)
                .epochs(Some(1)),
        )
        .batch_size(16)
        .prefetch(
            PrefetchConfig::default()
                .num_workers(4)
                // Go on past each damaged batch, to see them all; the damage is there on every
                // try.
                .on_error(OnError::Skip)
                .retry(RetryPolicy::none()),
        );
    // The baseline: gather every batch in order, directly.
    let want: Vec<bool> = builder
        .index_chain()
        .unwrap()
        .cursor()
        .into_iter()
        .map(|b| ds.gather_blocking(&b.unwrap().indices()).is_ok())
        .collect();
    assert!(want.iter().any(|ok| !ok), "the damage hit some record");
    let mut loader = builder.build().unwrap();
    let mut got = Vec::new();
    while let Some(b) = loader.next().await {
        if let Err(e) = &b {
            assert!(e.is_corruption(), "{e}");
        }
        got.push(b.is_ok());
    }
    assert_eq!(got, want);
    assert_eq!(loader.state().prefetch.consumed(), want.len() as u64);
    assert_eq!(loader.state().generation, ds.generation());
}
