//! A damaged record read through the read window (readahead into the page cache, or an
//! `O_DIRECT` read kept for the gather) is still a typed checksum error naming its chunk file
//! and record index: the window only moves bytes, and the gather checks every record.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::os::unix::fs::FileExt as _;
use std::sync::Arc;

use futures::executor::block_on;
use zrecord::pipeline::{
    DatasetSource, Loader, PrefetchConfig, RetryPolicy, SamplerConfig, SamplerMode,
};
use zrecord::{Backend, DType, Dataset, Error, Field, ReadConfig, Schema, Writer, WriterConfig};

const N: u64 = 200;
const BAD: u64 = 77;

fn record(i: u64) -> Vec<u8> {
    (0..6000).map(|j| (i * 13 + j) as u8).collect()
}

#[test]
fn a_damaged_record_through_the_window_is_a_checksum_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let schema = Schema::new().field(Field::new("x", DType::U8));
    let mut w = Writer::create(&dir, &schema, WriterConfig::default()).unwrap();
    for i in 0..N {
        w.append(&[record(i)]).unwrap();
    }
    w.commit().unwrap();
    drop(w);
    let chunk = dir.join("chunk").join("00000.zr");
    let data = std::fs::read(&chunk).unwrap();
    let bad = record(BAD);
    let at = data.windows(bad.len()).position(|w| w == &bad[..]).unwrap() as u64;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&chunk)
        .unwrap();
    f.write_all_at(&[data[at as usize + 4321] ^ 0x40], at + 4321)
        .unwrap();
    drop(f);

    for backend in [Backend::Uring, Backend::Psync, Backend::Auto] {
        for direct in [false, true] {
            let cfg = ReadConfig::default()
                .with_backend(backend)
                .with_direct_io(direct);
            let ds = Dataset::open_with(&dir, cfg).unwrap();
            // Cold: the window reads ahead (the damaged byte was written back first).
            zrecord::diagnostics::evict_page_cache(&chunk).unwrap();
            let before = zrecord::testing::read_window_announced(&ds);
            let mut loader = Loader::builder(Arc::new(DatasetSource::new(&ds)))
                .sampler(
                    SamplerConfig::default()
                        .mode(SamplerMode::Sequential)
                        .epochs(Some(1)),
                )
                .batch_size(10)
                .prefetch(
                    PrefetchConfig::default()
                        .num_workers(2)
                        .lookahead(8)
                        .retry(RetryPolicy::default().attempts(1)),
                )
                .build()
                .unwrap();
            let mut errors = Vec::new();
            let mut records = 0;
            block_on(async {
                while let Some(b) = loader.next().await {
                    match b {
                        Ok(b) => {
                            for r in 0..b.data.len() {
                                let i = b.batch.indices()[r];
                                assert_eq!(b.data.get(r, 0).unwrap(), &record(i)[..]);
                            }
                            records += b.data.len();
                        }
                        Err(e) => errors.push(e),
                    }
                }
                loader.shutdown().await;
            });
            let what = format!("{backend} direct={direct}");
            assert!(
                zrecord::testing::read_window_announced(&ds) > before,
                "{what}: the window started nothing"
            );
            assert_eq!(errors.len(), 1, "{what}: {errors:?}");
            match &errors[0] {
                Error::ChecksumMismatch { path, index, .. } => {
                    assert_eq!(path, &chunk, "{what}");
                    assert_eq!(*index, BAD, "{what}");
                }
                other => panic!("{what}: expected a checksum mismatch, got {other:?}"),
            }
            // The batches before the damaged one arrived whole.
            assert_eq!(records, (BAD / 10 * 10) as usize, "{what}");
        }
    }
}
