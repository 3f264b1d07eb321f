//! Warm random gathers: records/s and bytes/s by record size, batch size and backend.
//!
//! The datasets (256 MiB each) are written first and stay in the page cache, so this measures
//! the engine's CPU path: table lookups, checksums, copies or zero-copy slices. Cold reads are
//! measured with `zrecord bench gather --evict` (see docs/BENCHMARKS.md). Every byte is
//! consumed: checksums are verified (the default).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use zrecord::{Backend, DType, Dataset, Field, ReadConfig, Schema, Writer, WriterConfig};

const DATASET_BYTES: usize = 256 << 20;

fn make(dir: &std::path::Path, record_bytes: usize) -> u64 {
    let schema = Schema::new().field(Field::new("x", DType::U8));
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    let n = DATASET_BYTES / record_bytes;
    let mut rec = vec![0u8; record_bytes];
    for i in 0..n {
        for (j, b) in rec.iter_mut().enumerate() {
            *b = (i.wrapping_mul(31) ^ j) as u8;
        }
        w.append(&[&rec]).unwrap();
    }
    w.commit().unwrap();
    n as u64
}

fn gather(c: &mut Criterion) {
    let base = std::env::var_os("ZRECORD_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let tmp = tempfile::tempdir_in(base).unwrap();
    let mut group = c.benchmark_group("gather_warm");
    group.sample_size(20);
    for record_bytes in [1usize << 10, 64 << 10] {
        let dir = tmp.path().join(format!("r{record_bytes}"));
        let n = make(&dir, record_bytes);
        for batch in [64usize, 256] {
            group.throughput(Throughput::Elements(batch as u64));
            for backend in [Backend::Mmap, Backend::Uring, Backend::Psync] {
                let ds =
                    Dataset::open_with(&dir, ReadConfig::default().with_backend(backend)).unwrap();
                let mut x = 0x9E37_79B9_7F4A_7C15u64;
                let mut idx = vec![0u64; batch];
                let id = BenchmarkId::new(
                    format!("{}KiB/{}", record_bytes >> 10, ds.backend_name()),
                    batch,
                );
                group.bench_function(id, |b| {
                    b.iter(|| {
                        for i in idx.iter_mut() {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            *i = x % n;
                        }
                        ds.gather_blocking(&idx).unwrap()
                    })
                });
            }
        }
    }
    group.finish();
}

criterion_group!(benches, gather);
criterion_main!(benches);
