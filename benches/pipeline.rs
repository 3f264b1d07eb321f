//! The loader: batches/s over a warm dataset (shuffled, shard 1/1, no bucketing, batch 256,
//! 2 workers), and the cost of resuming deep inside a 100M-record shuffled epoch (resume plus
//! the first batch).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use futures::executor::block_on;
use zrecord::pipeline::{
    DatasetSource, Loader, LoaderBuilder, Position, PrefetchConfig, SamplerConfig, SamplerMode,
    Source,
};
use zrecord::{DType, Dataset, Field, Schema, Writer, WriterConfig};

/// 100M records, none stored: the index side is all a resume touches.
struct Synthetic;

impl Source for Synthetic {
    type Batch = usize;

    fn len(&self) -> u64 {
        100_000_000
    }

    fn item_len(&self, index: u64) -> zrecord::Result<u64> {
        Ok(index % 1000)
    }

    fn gather(&self, indices: &[u64]) -> zrecord::Result<usize> {
        Ok(indices.len())
    }
}

fn shuffled() -> SamplerConfig {
    SamplerConfig::default()
        .mode(SamplerMode::Shuffled)
        .seed(7)
        .epochs(None)
}

fn resume_deep(c: &mut Criterion) {
    let builder = || {
        LoaderBuilder::new(Arc::new(Synthetic))
            .sampler(shuffled())
            .batch_size(256)
            .prefetch(PrefetchConfig::default().num_workers(2))
    };
    // A checkpoint 99% into the first epoch, as a loader would have written it.
    let deep = 100_000_000 / 256 * 99 / 100;
    let mut state = LoaderBuilder::new(Arc::new(Synthetic))
        .sampler(shuffled())
        .batch_size(256)
        .prefetch(PrefetchConfig::default().num_workers(1))
        .build()
        .unwrap()
        .state();
    state.prefetch.workers[0].consumed = deep;
    state.prefetch.workers[0].next = Some(Position {
        epoch: 0,
        position: deep,
    });
    c.bench_function("resume_deep_100m/first_batch", |b| {
        b.iter_with_large_drop(|| {
            let mut loader = builder().resume(&state).unwrap();
            let first = block_on(loader.next()).unwrap().unwrap();
            (loader, first)
        })
    });
}

fn loader(c: &mut Criterion) {
    let base = std::env::var_os("ZRECORD_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let tmp = tempfile::tempdir_in(base).unwrap();
    let dir = tmp.path().join("r1k");
    let schema = Schema::new().field(Field::new("x", DType::U8));
    let mut w = Writer::create(&dir, &schema, WriterConfig::default()).unwrap();
    let rec = vec![7u8; 1024];
    for _ in 0..(256 << 10) {
        w.append(&[&rec]).unwrap();
    }
    w.commit().unwrap();
    drop(w);
    let ds = Dataset::open(&dir).unwrap();
    let source = Arc::new(DatasetSource::new(&ds));
    let mut group = c.benchmark_group("loader_warm_1KiB");
    group.throughput(Throughput::Elements(256));
    for workers in [1usize, 2] {
        let mut loader = Loader::builder(Arc::clone(&source))
            .sampler(shuffled())
            .batch_size(256)
            .prefetch(PrefetchConfig::default().num_workers(workers))
            .build()
            .unwrap();
        group.bench_function(BenchmarkId::new("next", workers), |b| {
            b.iter(|| block_on(loader.next()).unwrap().unwrap().data.total_bytes())
        });
    }
    group.finish();
}

/// The index side alone: one batch of 256 shuffled indices over 2M records (sampler → shard
/// 1/1 → batch), and the whole loader over a source whose gather reads nothing (the pipeline's
/// own cost per batch: index computation, queues, wake-ups).
fn index_side(c: &mut Criterion) {
    use zrecord::pipeline::{BatchConfig, Sampler, ShardConfig, Stage, StageExt};
    let mut chain = Sampler::new(2_000_000, shuffled())
        .unwrap()
        .shard(ShardConfig::new(1, 0))
        .unwrap()
        .batch(BatchConfig::new(256))
        .unwrap();
    let mut group = c.benchmark_group("index_side");
    group.throughput(Throughput::Elements(256));
    let mut k = 0u64;
    group.bench_function("batch256_shuffled_2m", |b| {
        b.iter(|| {
            k = (k + 1) % 7000;
            chain.get(0, k).unwrap().samples.len()
        })
    });
    struct Small;
    impl Source for Small {
        type Batch = usize;
        fn len(&self) -> u64 {
            2_000_000
        }
        fn item_len(&self, _index: u64) -> zrecord::Result<u64> {
            Ok(1)
        }
        fn gather(&self, indices: &[u64]) -> zrecord::Result<usize> {
            Ok(indices.len())
        }
    }
    for workers in [1usize, 2] {
        let mut loader = LoaderBuilder::new(Arc::new(Small))
            .sampler(shuffled())
            .batch_size(256)
            .prefetch(PrefetchConfig::default().num_workers(workers))
            .build()
            .unwrap();
        group.bench_function(BenchmarkId::new("loader_no_data", workers), |b| {
            b.iter(|| block_on(loader.next()).unwrap().unwrap().data)
        });
    }
    group.finish();
}

criterion_group!(benches, resume_deep, loader, index_side);
criterion_main!(benches);
