//! Append + commit throughput: how fast a writer turns records into durable bytes.
//!
//! One iteration appends 256 MiB of records of the given size to a fresh dataset with 1, 2 or 4
//! append tasks (`WriterConfig::num_writers`) and commits (fdatasync of the chunks, the offset
//! table, meta.json, the directories), so the figure includes every fsync a real ingest pays.
//! Compare it with
//! `benches/limits.sh`'s `buffered-seq-write-64k+fsync` (see docs/BENCHMARKS.md).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use zrecord::{DType, Field, Schema, Writer, WriterConfig};

/// Bytes written per iteration: 256 MiB per commit, as a bulk ingest does, so the fixed cost of
/// creating the dataset and of the commit's six fsyncs is a small share (fio's figure is 1 GiB
/// and one fsync).
const BYTES_PER_ITER: usize = 256 << 20;

fn append_commit(c: &mut Criterion) {
    let mut group = c.benchmark_group("append_commit");
    group.sample_size(10);
    for record_bytes in [1usize << 10, 64 << 10] {
        let records = BYTES_PER_ITER / record_bytes;
        let payload: Vec<u8> = (0..record_bytes).map(|i| (i * 31 % 251) as u8).collect();
        group.throughput(Throughput::Bytes((records * record_bytes) as u64));
        for writers in [1usize, 2, 4] {
            group.bench_with_input(
                BenchmarkId::new(format!("raw/{record_bytes}"), format!("writers={writers}")),
                &writers,
                |b, &writers| {
                    b.iter_batched(
                        || tempfile::tempdir_in(bench_dir()).unwrap(),
                        |tmp| {
                            let schema = Schema::new().field(Field::new("x", DType::U8));
                            let config = WriterConfig::default().num_writers(writers);
                            let mut w =
                                Writer::create(tmp.path().join("ds"), &schema, config).unwrap();
                            for _ in 0..records {
                                w.append(&[&payload[..]]).unwrap();
                            }
                            w.commit().unwrap();
                            tmp
                        },
                        criterion::BatchSize::PerIteration,
                    );
                },
            );
        }
    }
    group.finish();
}

/// Where the datasets go: `ZRECORD_BENCH_DIR` if set (put it on the disk you measure), else the
/// system temp dir.
fn bench_dir() -> std::path::PathBuf {
    std::env::var_os("ZRECORD_BENCH_DIR")
        .map(Into::into)
        .unwrap_or_else(std::env::temp_dir)
}

criterion_group!(benches, append_commit);
criterion_main!(benches);
