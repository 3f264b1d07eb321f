//! [`IndexChain`]: the index side of a [`super::Loader`] — root (sampler or mix) → shard →
//! (bucket) → batch — as one seekable stage.

use super::batch::{Batcher, IndexBatch};
use super::bucket::Bucket;
use super::root::Root;
use super::shard::Shard;
use super::stage::Stage;
use crate::Result;

/// The index chain a [`super::Loader`] runs: root (sampler or mix) → shard → (bucket) → batch.
/// Its item sequence is the loader's batch order under [`super::MergePolicy::Strict`], so
/// iterating it (with [`Stage::cursor`]) and gathering each batch is the sequential baseline of
/// the loader.
#[derive(Debug, Clone)]
pub enum IndexChain {
    /// Without bucketing.
    Plain(Batcher<Shard<Root>>),
    /// With bucketing.
    Bucketed(Batcher<Bucket<Shard<Root>>>),
}

impl Stage for IndexChain {
    type Item = IndexBatch;

    fn epochs(&self) -> Option<u64> {
        match self {
            Self::Plain(s) => s.epochs(),
            Self::Bucketed(s) => s.epochs(),
        }
    }

    fn epoch_len(&self) -> u64 {
        match self {
            Self::Plain(s) => s.epoch_len(),
            Self::Bucketed(s) => s.epoch_len(),
        }
    }

    fn get(&mut self, epoch: u64, position: u64) -> Result<IndexBatch> {
        match self {
            Self::Plain(s) => s.get(epoch, position),
            Self::Bucketed(s) => s.get(epoch, position),
        }
    }

    fn describe(&self, out: &mut String) {
        match self {
            Self::Plain(s) => s.describe(out),
            Self::Bucketed(s) => s.describe(out),
        }
    }
}
