//! The read window changes when bytes are read, never which: a loader announcing its next
//! batches (lookahead) over a local dataset on cold pages yields byte for byte the batches of
//! a loader without lookahead, on every backend (io_uring, pread pool, mmap, auto), with and
//! without `O_DIRECT`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use futures::executor::block_on;
use zrecord::pipeline::{DatasetSource, Loader, PrefetchConfig};
use zrecord::{Backend, Codec, DType, Dataset, Field, ReadConfig, Schema, Writer, WriterConfig};

const N: u64 = 600;

fn value(i: u64, field: usize) -> Vec<u8> {
    // Around a page, and some empty values: ranges that coalesce, straddle blocks and vanish.
    let len = [0usize, 1, 700, 4095, 4096, 4097, 9000][(i as usize * 3 + field) % 7];
    (0..len)
        .map(|j| (i as u8).wrapping_mul(31).wrapping_add(j as u8) ^ field as u8)
        .collect()
}

fn build(dir: &std::path::Path) {
    let schema = Schema::new()
        .field(Field::new("raw", DType::U8))
        .field(Field::new("packed", DType::U8).codec(Codec::Deflate))
        .chunk_size_bytes(1 << 20);
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    for i in 0..N {
        w.append(&[value(i, 0), value(i, 1)]).unwrap();
    }
    w.commit().unwrap();
}

fn evict(dir: &std::path::Path) {
    for e in std::fs::read_dir(dir.join("chunk")).unwrap() {
        zrecord::diagnostics::evict_page_cache(&e.unwrap().path()).unwrap();
    }
}

/// Every batch of one epoch, as (indices, each value's bytes).
fn epoch(ds: &Dataset, lookahead: usize) -> Vec<(Vec<u64>, Vec<Vec<u8>>)> {
    let mut loader = Loader::builder(Arc::new(DatasetSource::new(ds)))
        .seed(3)
        .epochs(Some(1))
        .batch_size(24)
        .prefetch(
            PrefetchConfig::default()
                .num_workers(3)
                .lookahead(lookahead),
        )
        .build()
        .unwrap();
    let mut out = Vec::new();
    block_on(async {
        while let Some(b) = loader.next().await {
            let b = b.unwrap();
            let mut values = Vec::new();
            for r in 0..b.data.len() {
                for f in 0..2 {
                    values.push(b.data.get(r, f).unwrap_or_default().to_vec());
                }
            }
            out.push((b.batch.indices(), values));
        }
        loader.shutdown().await;
    });
    out
}

#[test]
fn lookahead_yields_the_batches_of_no_lookahead_on_every_backend() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    build(&dir);
    if !zrecord::uring_available() {
        eprintln!("io_uring is unavailable here: the uring case runs on the pread pool");
    }
    let expected = epoch(&Dataset::open(&dir).unwrap(), 0);
    assert_eq!(expected.len(), N.div_ceil(24) as usize);
    for (i, (_, values)) in expected.iter().enumerate().take(3) {
        assert!(values.iter().any(|v| !v.is_empty()), "batch {i} is empty");
    }
    for backend in [Backend::Uring, Backend::Psync, Backend::Mmap, Backend::Auto] {
        for direct in [false, true] {
            let cfg = ReadConfig::default()
                .with_backend(backend)
                .with_direct_io(direct);
            for lookahead in [1, 4] {
                // Cold pages: the window has reads to start (warm batches are left alone). A
                // fresh dataset each time: pages an earlier one mapped cannot be evicted.
                evict(&dir);
                let ds = Dataset::open_with(&dir, cfg.clone()).unwrap();
                let before = zrecord::testing::read_window_announced(&ds);
                let got = epoch(&ds, lookahead);
                assert!(
                    zrecord::testing::read_window_announced(&ds) > before,
                    "{backend} direct={direct} lookahead={lookahead}: the window started nothing"
                );
                assert!(
                    got == expected,
                    "{backend} direct={direct} lookahead={lookahead}: different batches"
                );
                assert_eq!(
                    zrecord::testing::read_window_held(&ds),
                    0,
                    "{backend} direct={direct}: the window still holds bytes"
                );
            }
        }
    }
}
