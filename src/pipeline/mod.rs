//! The loader pipeline: sampler (or mix) → shard → bucket → batch → prefetch → collate.
//!
//! ```text
//! Sampler ─┐
//!          ├► Shard ─► Bucket ─► Batcher     index side: pure functions of (epoch, position)
//! Mix ─────┘  (Mix: K parts by weight, indices in the parts' concatenated space)
//!                                  │
//!            Prefetch: N worker threads, worker w runs global items base + w + k·N:
//!            IndexBatch ─► Source::gather ─► transform ─► bounded queue (worker_queue_size)
//!                                  │
//!            merge (Strict round-robin | BestEffort bounded lead) ─► consumer buffer
//!                                  │
//!                          Loader::next().await   (collate: stack / pad_stack in the transform)
//! ```
//!
//! # One chain
//!
//! There is one chain, the way [`std::iter`] has one adapter per concept: one [`Shard`], one
//! [`Bucket`], one [`Batcher`], each composable by hand (`….shard(..)?.bucket(..)?.batch(..)?
//! .prefetch(..)?`). Seeking is a capability a stage has when its input has it:
//!
//! - Over a seekable [`Stage`] ([`Sampler`], [`Mix`], or another seekable stage, through
//!   [`StageExt`]) every stage is seekable: a deterministic function from `(epoch, position)` to
//!   an item. Because every stage is such a function — the bucket derives its sorted buffer from
//!   `(seed, epoch, buffer index)` and rebuilds it on demand — the state of a whole chain is a
//!   cursor, `(epoch, position)`, seeking is O(1) (one bucket buffer at most), and each prefetch
//!   worker runs its own share without coordination ([`Prefetch`]).
//! - Over a [`Checkpoint`] stream (through [`CheckpointExt`]) every stage is a checkpointable
//!   [`futures::Stream`]: a stream with a serde [`Checkpoint::State`], the position after the
//!   last item yielded, and [`Checkpoint::restore`] to go back there. So a stage of your own —
//!   a filter, a stage that drops or repeats items, a stream read from elsewhere — fits
//!   anywhere in a checkpointed chain, and the state of the whole chain is one nested value,
//!   each stage's state ([`ShardState`], [`BucketState`], [`BatchState`]) holding its input's.
//!
//! A [`Cursor`] turns a seekable stage into a stream: it streams any stage (a
//! [`futures::Stream`], or an iterator through [`Cursor::into_iter`]) and is a [`Checkpoint`]
//! whose state is its [`CursorState`]. `sampler.cursor()` starts a stream chain;
//! `sampler.shard(c)?.cursor()` starts one after a seekable shard.
//!
//! ```text
//!  seekable:  Sampler | Mix ─► Shard ─► Bucket ─► Batcher ─► Prefetch        (StageExt)
//!                 │                                           workers seek their own share
//!               .cursor()  (at any point: a seekable stage becomes a Checkpoint stream)
//!                 ▼
//!  stream:    Cursor ─► [your stage] ─► Shard ─► Bucket ─► Batcher ─► Prefetch
//!             (CheckpointExt; map_items / filter_items or your own stage fit between any two;
//!              the prefetch pulls index batches on the consumer's task, deals them to workers)
//! ```
//!
//! Over a cursor, the stream form places items exactly as the seekable form does (it counts the
//! items of each epoch, an epoch being a run of one [`Sample::epoch`] value), so
//! `sampler.cursor().shard(c)?.bucket(..)?.batch(..)?` yields the batches of
//! `sampler.shard(c)?.bucket(..)?.batch(..)?.cursor()`. Each stage's order is computed once,
//! for both forms: which items a shard keeps and in what order by its `Geometry`, the bucket
//! buffers by its `order`, the batch boundaries, `drop_last` and the epoch's end by its `span`;
//! the stream form only counts.
//!
//! ## Which form
//!
//! - The **seekable form** ([`StageExt`], [`LoaderBuilder`]) is the fast path: each prefetch
//!   worker runs its own share without coordination, a resume is O(1), the shard has every
//!   mode, and the merge can be best-effort. Use it (through [`Loader`]) unless you need a stage
//!   of your own.
//! - **A stage of your own in [`Loader`]**: [`LoaderBuilder::stage`] puts it over the loader's
//!   whole index chain (sampler or mix, shard, bucket, batch), and the loader runs the stream
//!   form's prefetch over it: its workers, merges, stats and checkpoint, resumed on the same
//!   ranks with any worker count.
//! - The **stream form** accepts any stage. The index side runs on the consumer's task, the
//!   gathers on worker threads; a restore replays at most one bucket buffer from its input. A
//!   stream has no known epoch length, so its shard is interleaved only (shard the seekable
//!   stage first for the other modes). Its prefetch is the same [`Prefetch`] type, with the
//!   same workers, merge, consumer buffer, errors and [`Prefetch::stats`]; only the index side
//!   differs (the consumer deals the stream's batches to the workers).
//!
//! ```
//! use std::sync::Arc;
//! use futures::executor::block_on;
//! use futures::{StreamExt, TryStreamExt};
//! use zrecord::pipeline::{
//!     BatchConfig, Checkpoint, CheckpointExt, MemorySource, PrefetchConfig, Sampler,
//!     SamplerConfig, ShardConfig, Stage,
//! };
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let source = Arc::new(MemorySource::new((0..20u8).map(|i| vec![i]).collect()));
//! let sampler = Sampler::new(20, SamplerConfig::default().seed(3).epochs(Some(1)))?;
//! let chain = || {
//!     sampler
//!         .clone()
//!         .cursor()
//!         .filter_items(|s| s.index % 4 != 0) // a stage of your own: drop every fourth record
//!         .shard(ShardConfig::new(2, 0))? // rank 0 of 2
//!         .batch(BatchConfig::new(3))?
//!         .prefetch(Arc::clone(&source), PrefetchConfig::default())
//! };
//! let mut stream = chain()?;
//! let first = block_on(stream.next()).expect("a batch")?;
//! assert_eq!(first.indices().len(), 3);
//! let saved = serde_json::to_string(&stream.checkpoint())?;
//!
//! // Later, perhaps in another process: the same chain, restored.
//! let mut resumed = chain()?;
//! resumed.restore(serde_json::from_str(&saved)?)?;
//! let rest: Vec<Vec<u64>> = block_on(resumed.map_ok(|b| b.indices()).try_collect())?;
//! let expected: Vec<Vec<u64>> = block_on(stream.map_ok(|b| b.indices()).try_collect())?;
//! assert_eq!(rest, expected);
//! # Ok(())
//! # }
//! ```
//!
//! # Mixing
//!
//! [`Mix`] replaces the sampler at the root to interleave K parts by weight, exactly and
//! seekably (a balanced tree of Sturmian sequences: any window of n items holds n·w of each
//! part up to ⌈log2 K⌉), with a policy for exhausted parts ([`Exhausted`]). [`Concat`] serves
//! several sources as one in the same concatenated index space, and reports its parts through
//! [`Source::part_lens`], so `Loader::builder(Arc::new(Concat::new(parts)?)).mix(..)` mixes
//! them.
//!
//! # Loader
//!
//! [`Loader`] composes the usual chain over a [`Source`] (a [`crate::Dataset`], a pinned
//! [`DatasetSource`], a [`MemorySource`], or your own). [`Loader::state`] is a small serde
//! [`LoaderState`] — source generation, configuration fingerprint, next worker, per-worker
//! consumed counts and positions — and [`LoaderBuilder::resume`] continues exactly after the last
//! consumed batch. Under the default strict merge the stream is the same whatever the worker
//! count, and equals a sequential pass over [`LoaderBuilder::index_chain`].
//! [`LoaderBuilder::stage`] adds a stage of your own after the chain's batching (a filter, a
//! map, any [`Checkpoint`] stream of index batches); its state and name are part of the
//! checkpoint.
//!
//! # Elastic resume
//!
//! [`LoaderBuilder::merge_checkpoints`] takes the checkpoints of all N ranks of a run and
//! returns the checkpoint one of M new ranks resumes from ([`LoaderBuilder::resume_elastic`] does
//! both): every item of an unfinished epoch that no old rank consumed is delivered exactly once
//! across the new ranks, then later epochs run in the M-rank order. See [`ElasticState`].
//!
//! # Collate
//!
//! [`stack`] stacks a fixed-shape field (every record one byte length) into one `[B, …]`
//! buffer, like `torch.utils.data.default_collate`; [`pad_stack`] / [`pad_stack_field`] pad
//! variable-length 1-D records into one buffer with lengths and an attention mask;
//! [`pooling_mask`] derives first/last/all token masks.

mod batch;
mod bucket;
mod chain;
mod checkpoint;
mod checkpoint_ext;
mod checkpoints;
mod collate;
mod concat;
mod description;
mod elastic;
mod epoch_count;
mod filter_items;
mod group;
mod loader;
mod map_items;
mod mix;
mod prefetch;
mod queue;
mod residual;
mod root;
mod sampler;
mod shard;
mod source;
mod stage;
mod stage_ext;
mod staged_chain;
mod state;
mod stats;

pub use batch::{BatchConfig, BatchState, Batcher, IndexBatch};
pub use bucket::{Bucket, BucketConfig, BucketKey, BucketState};
pub use chain::IndexChain;
pub use checkpoint::Checkpoint;
pub use checkpoint_ext::CheckpointExt;
pub use collate::{
    pad_stack, pad_stack_field, pooling_mask, stack, PadConfig, PadSide, PaddedBatch, PoolingType,
    StackedBatch,
};
pub use concat::{Concat, Concatenate};
pub use elastic::ElasticChain;
pub use epoch_count::EpochCount;
pub use filter_items::FilterItems;
pub use group::{Counted, GroupStart};
pub use loader::{Loader, LoaderBuilder, LoaderConfig};
pub use map_items::MapItems;
pub use mix::{Exhausted, Mix, MixConfig};
pub use prefetch::{
    identity, LoaderBatch, MergePolicy, OnError, Prefetch, PrefetchConfig, PrefetchInput,
    PrefetchStreamState, RetryPolicy, Transform, MAX_NUM_WORKERS, MAX_QUEUE_SIZE,
};
pub use residual::{ElasticState, ResidualEpoch, Run};
pub use root::{ResidualRoot, Root};
pub use sampler::{Sampler, SamplerConfig, SamplerMode};
pub use shard::{Shard, ShardConfig, ShardMode, ShardState};
pub use source::{DatasetSource, MemorySource, Source, SourceFuture};
pub use stage::{describe, Cursor, CursorIter, CursorState, Sample, Stage};
pub use stage_ext::StageExt;
pub use state::{LoaderState, Position, PrefetchState, WorkerState, LOADER_STATE_VERSION};
pub use stats::{LoaderStats, LATENCY_BUCKETS};

/// The name of [`Batcher`], the batch stage, in 0.1.0 (`zrecord::Batch` is a batch of records).
#[deprecated(
    note = "renamed to `Batcher` (`zrecord::Batch` is a batch of records); this alias is kept \
            for one release, see CHANGELOG.md"
)]
pub type Batch<S> = Batcher<S>;

/// The name of [`SourceFuture`] in 0.1.0 (`zrecord::GatherFuture` is what
/// [`crate::Dataset::gather`] returns).
#[deprecated(
    note = "renamed to `SourceFuture` (`zrecord::GatherFuture` is what `Dataset::gather` \
            returns); this alias is kept for one release, see CHANGELOG.md"
)]
pub type GatherFuture<B> = SourceFuture<B>;

/// The stream form of [`Shard`] before #31, when it was a type of its own: [`Shard`] over a
/// [`Checkpoint`] stream is that stream now (`CheckpointExt::shard` returns it).
#[deprecated(
    note = "one shard type: `Shard` over a stream is the stream (`CheckpointExt::shard` returns \
            it); this alias is kept for one release, see CHANGELOG.md"
)]
pub type ShardStream<S> = Shard<S>;

/// The name of [`ShardState`] before #31 (the same JSON).
#[deprecated(
    note = "renamed to `ShardState`; this alias is kept for one release, see CHANGELOG.md"
)]
pub type ShardStreamState<St> = ShardState<St>;

/// The stream form of [`Bucket`] before #31, when it was a type of its own: [`Bucket`] over a
/// [`Checkpoint`] stream is that stream now (`CheckpointExt::bucket` returns it).
#[deprecated(
    note = "one bucket type: `Bucket` over a stream is the stream (`CheckpointExt::bucket` \
            returns it); this alias is kept for one release, see CHANGELOG.md"
)]
pub type BucketStream<S> = Bucket<S, <S as Checkpoint>::State>;

/// The name of [`BucketState`] before #31 (the same JSON).
#[deprecated(
    note = "renamed to `BucketState`; this alias is kept for one release, see CHANGELOG.md"
)]
pub type BucketStreamState<St> = BucketState<St>;

/// The stream form of [`Batcher`] before #31, when it was a type of its own: [`Batcher`] over a
/// [`Checkpoint`] stream is that stream now (`CheckpointExt::batch` returns it).
#[deprecated(
    note = "one batch type: `Batcher` over a stream is the stream (`CheckpointExt::batch` \
            returns it); this alias is kept for one release, see CHANGELOG.md"
)]
pub type BatchStream<S> = Batcher<S, <S as Checkpoint>::State>;

/// The stream prefetch before #31, when it was a type of its own: [`Prefetch`] over a
/// [`Checkpoint`] stream is that stream now ([`CheckpointExt::prefetch`] returns it).
#[deprecated(
    note = "one prefetch type: `Prefetch` over a stream is the stream prefetch \
            (`CheckpointExt::prefetch` returns it); this alias is kept for one release, see \
            CHANGELOG.md"
)]
pub type PrefetchStream<S, T> = Prefetch<T, S>;

/// The name of [`BatchState`] before #31 (the same JSON).
#[deprecated(
    note = "renamed to `BatchState`; this alias is kept for one release, see CHANGELOG.md"
)]
pub type BatchStreamState<St> = BatchState<St>;
