//! Code written against 0.1.0's names of renamed items still compiles (with a deprecation
//! warning pointing at the new name) and does what the new names do.
#![allow(deprecated)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use zrecord::pipeline::{DatasetSource, Source};
use zrecord::{Backend, DType, Dataset, Field, ReadConfig, ReadOptions, Schema, Writer};

#[test]
fn read_options_is_read_config() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let schema = Schema::new().field(Field::new("x", DType::U8));
    let mut w = Writer::create(&dir, &schema, zrecord::WriterConfig::default()).unwrap();
    for i in 0..5u8 {
        w.append(&[vec![i; 3]]).unwrap();
    }
    w.commit().unwrap();

    // 0.1.0's way of opening with options.
    let options: ReadOptions = ReadOptions::default()
        .with_backend(Backend::Psync)
        .with_verify_checksums(true)
        .with_direct_io(false);
    let ds = Dataset::open_with(&dir, options).unwrap();
    assert!(format!("{:?}", ds.read_config()).contains("Psync"));
    let config: ReadConfig = ds.read_options();
    assert_eq!(format!("{config:?}"), format!("{:?}", ds.read_config()));
    let batch = ds
        .snapshot()
        .gather_with(&[4, 1], &ReadOptions::default())
        .unwrap();
    assert_eq!(batch.get(0, 0).unwrap(), &[4, 4, 4]);

    let source = DatasetSource::new(&ds).read_options(ReadConfig::default());
    assert_eq!(source.gather(&[2]).unwrap().get(0, 0).unwrap(), &[2, 2, 2]);
}

/// The builder's eight prefetch setters (deprecated: `LoaderBuilder::prefetch` takes the one
/// `PrefetchConfig`) still set their option, and only it, in the builder's prefetch
/// configuration.
#[test]
fn loader_builder_prefetch_setters_set_the_prefetch_configuration() {
    use std::sync::Arc;
    use std::time::Duration;
    use zrecord::pipeline::{
        Loader, MemorySource, MergePolicy, OnError, PrefetchConfig, RetryPolicy,
    };

    let source = Arc::new(MemorySource::new(vec![vec![1u8]; 10]));
    let merge = MergePolicy::BestEffort {
        max_lead: 3,
        max_skips_per_round: 1,
    };
    let retry = RetryPolicy::default()
        .attempts(5)
        .backoff(Duration::from_millis(2));
    let want = PrefetchConfig::default()
        .num_workers(3)
        .worker_queue_size(4)
        .consumer_queue_size(5)
        .lookahead(6)
        .gathers_in_flight(7)
        .merge(merge)
        .retry(retry)
        .on_error(OnError::Skip);
    let old = Loader::builder(Arc::clone(&source))
        .batch_size(2)
        .num_workers(3)
        .worker_queue_size(4)
        .consumer_queue_size(5)
        .lookahead(6)
        .gathers_in_flight(7)
        .merge(merge)
        .retry(retry)
        .on_error(OnError::Skip);
    let new = Loader::builder(source).batch_size(2).prefetch(want);
    assert_eq!(old.current_config(), new.current_config());
    assert_eq!(old.current_config().prefetch, want);
    // One setter changes one option of what `prefetch` set.
    let one = new.num_workers(1);
    assert_eq!(one.current_config().prefetch, want.num_workers(1));
}

fn send_sync<X: Send + Sync>(_: &X) {}

/// The stream stages' names before #31 (`ShardStream`, `BucketStream`, `BatchStream` and their
/// `*StreamState`s) name the one stage types over a stream, and `get_ref` is `upstream`.
#[test]
fn the_stream_stage_names_are_the_stage_types_over_a_stream() {
    use futures::executor::block_on;
    use futures::TryStreamExt;
    use zrecord::pipeline::{
        BatchConfig, BatchStream, BatchStreamState, BucketConfig, BucketKey, BucketStream,
        BucketStreamState, Checkpoint, CheckpointExt, Cursor, CursorState, IndexBatch, Sampler,
        SamplerConfig, ShardConfig, ShardState, ShardStream, ShardStreamState, Stage,
    };

    let sampler = Sampler::new(9, SamplerConfig::default().seed(4).epochs(Some(2))).unwrap();
    let shard: ShardStream<Cursor<Sampler>> = sampler
        .clone()
        .cursor()
        .shard(ShardConfig::new(2, 1))
        .unwrap();
    let state: ShardStreamState<CursorState> = shard.checkpoint();
    let _: ShardState<CursorState> = state;
    let bucket: BucketStream<ShardStream<Cursor<Sampler>>> = shard
        .bucket(
            BucketConfig::default().buffer_size(3).pack_size(2),
            BucketKey::new("id", Ok),
        )
        .unwrap();
    let _: BucketStreamState<ShardState<CursorState>> = bucket.checkpoint();
    let batch: BatchStream<BucketStream<ShardStream<Cursor<Sampler>>>> =
        bucket.batch(BatchConfig::new(2)).unwrap();
    let _: BatchStreamState<_> = batch.checkpoint();
    assert_eq!(
        batch.get_ref().get_ref().get_ref().state(),
        batch.upstream().upstream().upstream().state()
    );
    send_sync(&batch);
    let batches: Vec<IndexBatch> = block_on(batch.try_collect()).unwrap();
    // 9 items an epoch, shard 1 of 2 keeps 4 of each.
    assert_eq!(batches.iter().map(|b| b.samples.len()).sum::<usize>(), 8);
}

/// The stream prefetch's name before #31 (`PrefetchStream<S, T>`) names the one `Prefetch` over
/// a stream (`Prefetch<T, S>`), and its `get_ref` still reaches the input.
#[test]
fn the_stream_prefetch_name_is_the_prefetch_over_a_stream() {
    use std::sync::Arc;

    use futures::executor::block_on;
    use futures::TryStreamExt;
    use zrecord::pipeline::{
        BatchConfig, Batcher, Checkpoint, CheckpointExt, Cursor, MemorySource, Prefetch,
        PrefetchConfig, PrefetchStream, PrefetchStreamState, Sampler, SamplerConfig, Stage,
    };

    type Input = Batcher<Cursor<Sampler>, zrecord::pipeline::CursorState>;
    let source = Arc::new(MemorySource::new((0..9u8).map(|i| vec![i]).collect()));
    let sampler = Sampler::new(9, SamplerConfig::default().seed(4).epochs(Some(1))).unwrap();
    let input: Input = sampler.cursor().batch(BatchConfig::new(2)).unwrap();
    let prefetch: PrefetchStream<Input, Vec<Vec<u8>>> = input
        .prefetch(source, PrefetchConfig::default().num_workers(2))
        .unwrap();
    let prefetch: Prefetch<Vec<Vec<u8>>, Input> = prefetch;
    let _: PrefetchStreamState<_> = prefetch.checkpoint();
    assert_eq!(prefetch.get_ref().config().batch_size, 2);
    send_sync(&prefetch);
    let batches: Vec<_> = block_on(prefetch.try_collect()).unwrap();
    assert_eq!(batches.iter().map(|b| b.indices().len()).sum::<usize>(), 9);
}
