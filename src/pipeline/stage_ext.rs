//! [`StageExt`]: the builder methods of the seekable index chain
//! (`sampler.shard(..)?.bucket(..)?.batch(..)?.prefetch(..)?`), blanket-implemented for every
//! [`Stage`].
//!
//! They live here rather than on [`Stage`] so that the stage contract (`stage.rs`) depends on
//! nothing but its own types, and every stage file depends on it, not the other way round.

use std::sync::Arc;

use super::batch::{BatchConfig, Batcher, IndexBatch};
use super::bucket::{Bucket, BucketConfig, BucketKey};
use super::prefetch::{identity, Prefetch, PrefetchConfig, Transform};
use super::shard::{Shard, ShardConfig};
use super::source::Source;
use super::stage::{Sample, Stage};
use crate::Result;

/// Builder methods for every [`Stage`]: each wraps the stage in the next one of the seekable
/// chain.
///
/// ```
/// use std::sync::Arc;
/// use zrecord::pipeline::{
///     BatchConfig, MemorySource, PrefetchConfig, Sampler, SamplerConfig, ShardConfig, Stage,
///     StageExt,
/// };
///
/// # fn main() -> zrecord::Result<()> {
/// let source = Arc::new(MemorySource::new((0..10u8).map(|i| vec![i]).collect()));
/// let sampler = Sampler::new(10, SamplerConfig::default().epochs(Some(1)))?;
/// let batches = sampler.shard(ShardConfig::new(2, 0))?.batch(BatchConfig::new(2))?;
/// assert_eq!(batches.epoch_len(), 3);
/// let prefetch = batches.prefetch(source, PrefetchConfig::default())?;
/// # drop(prefetch);
/// # Ok(())
/// # }
/// ```
pub trait StageExt: Stage {
    /// Shards every epoch of this stage; see [`Shard`].
    ///
    /// # Errors
    /// [`crate::Error::InvalidConfig`] for an invalid configuration.
    fn shard(self, config: ShardConfig) -> Result<Shard<Self>>
    where
        Self: Stage<Item = Sample> + Sized,
    {
        Shard::new(self, config)
    }

    /// Buffer-sorts (length-buckets) every epoch of this stage; see [`Bucket`].
    ///
    /// # Errors
    /// [`crate::Error::InvalidConfig`] for an invalid configuration.
    fn bucket(self, config: BucketConfig, key: BucketKey) -> Result<Bucket<Self>>
    where
        Self: Stage<Item = Sample> + Sized,
    {
        Bucket::new(self, config, key)
    }

    /// Groups every epoch of this stage into batches of indices; see [`Batcher`].
    ///
    /// # Errors
    /// [`crate::Error::InvalidConfig`] for an invalid configuration.
    fn batch(self, config: BatchConfig) -> Result<Batcher<Self>>
    where
        Self: Stage<Item = Sample> + Sized,
    {
        Batcher::new(self, config)
    }

    /// Gathers the batches of this stage from `source` on worker threads; see [`Prefetch`].
    ///
    /// # Errors
    /// [`crate::Error::InvalidConfig`] for an invalid configuration;
    /// [`crate::Error::ThreadSpawn`] if a worker thread cannot be spawned.
    fn prefetch<Src: Source>(
        self,
        source: Arc<Src>,
        config: PrefetchConfig,
    ) -> Result<Prefetch<Src::Batch>>
    where
        Self: Stage<Item = IndexBatch> + Sized,
    {
        Prefetch::new(self, source, identity(), config)
    }

    /// Like [`StageExt::prefetch`], applying `transform` to every gathered batch on the worker
    /// thread.
    ///
    /// # Errors
    /// As [`StageExt::prefetch`].
    fn prefetch_with<Src: Source, T: Send + 'static>(
        self,
        source: Arc<Src>,
        config: PrefetchConfig,
        transform: Transform<Src::Batch, T>,
    ) -> Result<Prefetch<T>>
    where
        Self: Stage<Item = IndexBatch> + Sized,
    {
        Prefetch::new(self, source, transform, config)
    }
}

impl<S: Stage> StageExt for S {}
