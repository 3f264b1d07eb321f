//! [`CheckpointExt`]: the chain's stages over every [`Checkpoint`] stream.

use std::sync::Arc;

use super::batch::{BatchConfig, Batcher, IndexBatch};
use super::bucket::{Bucket, BucketConfig, BucketKey};
use super::checkpoint::Checkpoint;
use super::filter_items::FilterItems;
use super::map_items::MapItems;
use super::prefetch::{identity, Prefetch, PrefetchConfig, Transform};
use super::shard::{Shard, ShardConfig};
use super::source::Source;
use super::stage::Sample;
use crate::Result;

/// The chain's stages over any [`Checkpoint`] stream, a user's own stage included:
/// `stream.shard(..)?.bucket(..)?.batch(..)?.prefetch(..)?`. [`Shard`], [`Bucket`] and
/// [`Batcher`] are the stage types of the seekable chain ([`super::StageExt`]); over a stream
/// each is itself a [`Checkpoint`] stream whose state holds its input's.
///
/// The names do not clash with [`futures::StreamExt`]'s (`map_items`, not `map`), so both
/// traits can be in scope.
pub trait CheckpointExt: Checkpoint {
    /// Keeps this rank's share of every epoch, interleaved; see [`Shard`].
    ///
    /// # Errors
    /// [`crate::Error::InvalidConfig`] for an invalid configuration or a mode that needs the
    /// epoch's length (contiguous, `pad_to_equal`, `drop_remainder`).
    fn shard(self, config: ShardConfig) -> Result<Shard<Self>>
    where
        Self: Checkpoint<Item = Result<Sample>> + Sized + Unpin,
    {
        Shard::over_stream(self, config)
    }

    /// Length-buckets every epoch by `key`; see [`Bucket`].
    ///
    /// # Errors
    /// [`crate::Error::InvalidConfig`] for an invalid configuration.
    fn bucket(
        self,
        config: BucketConfig,
        key: BucketKey,
    ) -> Result<Bucket<Self, <Self as Checkpoint>::State>>
    where
        Self: Checkpoint<Item = Result<Sample>> + Sized + Unpin,
    {
        Bucket::over_stream(self, config, key)
    }

    /// Groups every epoch into batches of indices; see [`Batcher`].
    ///
    /// # Errors
    /// [`crate::Error::InvalidConfig`] for an invalid configuration.
    fn batch(self, config: BatchConfig) -> Result<Batcher<Self, <Self as Checkpoint>::State>>
    where
        Self: Checkpoint<Item = Result<Sample>> + Sized + Unpin,
    {
        Batcher::over_stream(self, config)
    }

    /// Gathers every batch from `source` on worker threads, merged in order or best effort; see
    /// [`Prefetch`].
    ///
    /// # Errors
    /// [`crate::Error::InvalidConfig`] for an invalid configuration.
    fn prefetch<Src: Source>(
        self,
        source: Arc<Src>,
        config: PrefetchConfig,
    ) -> Result<Prefetch<Src::Batch, Self>>
    where
        Self: Checkpoint<Item = Result<IndexBatch>> + Sized + Unpin,
    {
        Prefetch::from_stream(self, source, identity(), config)
    }

    /// Like [`CheckpointExt::prefetch`], applying `transform` to every gathered batch on the
    /// worker thread.
    ///
    /// # Errors
    /// As [`CheckpointExt::prefetch`].
    fn prefetch_with<Src: Source, T: Send + 'static>(
        self,
        source: Arc<Src>,
        config: PrefetchConfig,
        transform: Transform<Src::Batch, T>,
    ) -> Result<Prefetch<T, Self>>
    where
        Self: Checkpoint<Item = Result<IndexBatch>> + Sized + Unpin,
    {
        Prefetch::from_stream(self, source, transform, config)
    }

    /// Applies `f` to every `Ok` item; see [`MapItems`]. `f` should be a pure function of the
    /// item.
    fn map_items<T, U, F>(self, f: F) -> MapItems<Self, F>
    where
        Self: Checkpoint<Item = Result<T>> + Sized + Unpin,
        F: FnMut(T) -> Result<U> + Unpin,
    {
        MapItems::new(self, f)
    }

    /// Keeps the `Ok` items `f` accepts; see [`FilterItems`]. `f` should be a pure function of
    /// the item.
    fn filter_items<T, F>(self, f: F) -> FilterItems<Self, F>
    where
        Self: Checkpoint<Item = Result<T>> + Sized + Unpin,
        F: FnMut(&T) -> bool + Unpin,
    {
        FilterItems::new(self, f)
    }
}

impl<S: Checkpoint + ?Sized> CheckpointExt for S {}
