//! The loader pipeline: sampler (or mix) → shard → bucket → batch → prefetch → collate.
//!
//! ```text
//! Sampler ─┐
//!          ├► Shard ─► Bucket ─► Batch       index side: pure functions of (epoch, position)
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
//! # Stages
//!
//! Every index-side stage ([`Sampler`], [`Mix`], [`Shard`], [`Bucket`], [`Batch`]) implements
//! [`Stage`]: a deterministic, seekable function from `(epoch, position)` to an item,
//! composable by hand with [`StageExt`]
//! (`sampler.shard(..)?.bucket(..)?.batch(..)?.prefetch(..)?`). Because every stage is such a
//! function — the bucket derives its sorted buffer from `(seed, epoch, buffer index)` and
//! rebuilds it on demand — the state of a whole chain is a cursor, `(epoch, position)`: a
//! [`Cursor`] streams any stage (a [`futures::Stream`], or an iterator through
//! [`Cursor::into_iter`]) with a serde [`CursorState`], and seeking is O(1) (one bucket buffer
//! at most).
//!
//! # Streams
//!
//! The same stages exist as [`futures::Stream`] adapters in [`stream`]: [`Checkpoint`] says
//! what a checkpointable stream is, and [`CheckpointExt`] adds `.shard() .bucket() .batch()
//! .prefetch() .map_items() .filter_items()` to any of them, so a stage of your own fits
//! anywhere in a checkpointed chain (`sampler.cursor().filter_items(..).shard(..)?…`). The
//! seekable chain above is the fast path (workers split the work without coordination, O(1)
//! resume, every shard mode, best-effort merge); the stream chain accepts any stage. See
//! [`stream`] for when to use which.
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
//!
//! # Elastic resume
//!
//! [`LoaderBuilder::merge_checkpoints`] takes the checkpoints of all N ranks of a run and
//! returns the checkpoint one of M new ranks resumes from ([`LoaderBuilder::resume_elastic`] does
//! both): every item of an unfinished epoch that no old rank consumed is delivered exactly once
//! across the new ranks, then later epochs run in the M-rank order. See [`elastic`].
//!
//! # Collate
//!
//! [`stack`] stacks a fixed-shape field (every record one byte length) into one `[B, …]`
//! buffer, like `torch.utils.data.default_collate`; [`pad_stack`] / [`pad_stack_field`] pad
//! variable-length 1-D records into one buffer with lengths and an attention mask;
//! [`pooling_mask`] derives first/last/all token masks.

pub mod batch;
pub mod bucket;
pub mod collate;
pub mod concat;
pub mod elastic;
pub mod loader;
pub mod mix;
pub mod prefetch;
mod queue;
pub mod root;
pub mod sampler;
pub mod shard;
pub mod source;
pub mod stage;
pub mod stage_ext;
pub mod state;
pub mod stats;
pub mod stream;

pub use batch::{Batch, BatchConfig, IndexBatch};
pub use bucket::{Bucket, BucketConfig, BucketKey};
pub use collate::{
    pad_stack, pad_stack_field, pooling_mask, stack, PadConfig, PadSide, PaddedBatch, PoolingType,
    StackedBatch,
};
pub use concat::{Concat, Concatenate};
pub use elastic::{ElasticChain, ElasticState, ResidualEpoch, Run};
pub use loader::{IndexChain, Loader, LoaderBuilder, LoaderConfig};
pub use mix::{Exhausted, Mix, MixConfig};
pub use prefetch::{
    identity, LoaderBatch, MergePolicy, OnError, Prefetch, PrefetchConfig, RetryPolicy, Transform,
};
pub use root::Root;
pub use sampler::{Sampler, SamplerConfig, SamplerMode};
pub use shard::{Shard, ShardConfig, ShardMode};
pub use source::{DatasetSource, GatherFuture, MemorySource, Source};
pub use stage::{describe, Cursor, CursorIter, CursorState, Sample, Stage};
pub use stage_ext::StageExt;
pub use state::{LoaderState, Position, PrefetchState, WorkerState, LOADER_STATE_VERSION};
pub use stats::LoaderStats;
pub use stream::{Checkpoint, CheckpointExt};
