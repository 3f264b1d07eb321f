//! Lookahead (s3s-fs started by the test): a loader's workers announce their next batches, the
//! remote backend starts those range requests early and hands them to the gathers that ask for
//! them; the batches are exactly those of a loader without lookahead; a loader dropped mid-epoch
//! (resumed elsewhere, seeked) cancels what it announced and nothing took.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/s3.rs"]
mod s3;

use std::sync::Arc;

use futures::executor::block_on;
use zrecord::diagnostics::remote_stats as stats;
use zrecord::pipeline::{DatasetSource, Loader, LoaderBatch, PrefetchConfig};
use zrecord::remote::{push, RemoteConfig, TransferOptions};
use zrecord::{DType, Dataset, Field, ReadConfig, Schema, Writer, WriterConfig};

fn record(i: u64) -> Vec<u8> {
    (0..(100 + i * 13 % 400) as usize)
        .map(|j| (i + j as u64) as u8)
        .collect()
}

fn loader(ds: &Dataset, lookahead: usize) -> Loader<DatasetSource> {
    Loader::builder(Arc::new(DatasetSource::new(ds)))
        .seed(5)
        .batch_size(32)
        .prefetch(
            PrefetchConfig::default()
                .num_workers(2)
                .lookahead(lookahead),
        )
        .build()
        .unwrap()
}

fn indices(b: &LoaderBatch<zrecord::Batch>) -> Vec<u64> {
    b.batch.indices()
}

#[test]
fn lookahead_serves_gathers_exactly_and_cancels_with_its_loader() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("ds");
    let schema = Schema::new()
        .field(Field::new("x", DType::U8))
        .chunk_size_bytes(64 << 10);
    let mut w = Writer::create(&local, &schema, WriterConfig::default()).unwrap();
    let n = 2000;
    for i in 0..n {
        w.append(&[record(i)]).unwrap();
    }
    w.commit().unwrap();
    drop(w);
    let url = server.url("ahead/a");
    push(
        &local,
        &url,
        &TransferOptions::default().store(server.options()),
    )
    .unwrap();
    let remote = RemoteConfig::default()
        .lookahead_bytes(64 << 20)
        .store(server.options())
        .cache_dir(tmp.path().join("cache"));
    let ds = zrecord::remote::open(&url, ReadConfig::default(), remote).unwrap();

    let plain: Vec<Vec<u64>> = {
        let mut l = loader(&ds, 0);
        let mut out = Vec::new();
        while let Some(b) = block_on(l.next()) {
            out.push(indices(&b.unwrap()));
        }
        out
    };
    let before = stats();
    let mut l = loader(&ds, 4);
    let mut got = Vec::new();
    while let Some(b) = block_on(l.next()) {
        let b = b.unwrap();
        for (r, &i) in b.data.indices().iter().enumerate() {
            assert_eq!(b.data.get(r, 0).unwrap(), record(i).as_slice());
        }
        got.push(indices(&b));
    }
    assert_eq!(got, plain);
    let after = stats();
    assert!(
        after.lookahead_issued > before.lookahead_issued,
        "{after:?}"
    );
    assert!(after.lookahead_hits > before.lookahead_hits, "{after:?}");

    // Dropped after a few batches: what it announced and nothing took is canceled.
    let mut l = loader(&ds, 8);
    for _ in 0..3 {
        block_on(l.next()).unwrap().unwrap();
    }
    let state = l.state();
    drop(l);
    assert!(
        stats().lookahead_canceled > after.lookahead_canceled,
        "{:?}",
        stats()
    );
    // The resumed loader continues exactly.
    let mut resumed = Loader::builder(Arc::new(DatasetSource::new(&ds)))
        .seed(5)
        .batch_size(32)
        .prefetch(PrefetchConfig::default().num_workers(2).lookahead(8))
        .resume(&state)
        .unwrap();
    let mut rest = Vec::new();
    while let Some(b) = block_on(resumed.next()) {
        rest.push(indices(&b.unwrap()));
    }
    assert_eq!(rest, plain[3..]);
}
