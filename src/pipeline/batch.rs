//! Batching: consecutive items of each epoch grouped into batches of record indices.
//!
//! Batches never straddle epochs: the last batch of an epoch holds the remainder
//! (`epoch_len mod batch_size` items) or, with `drop_last`, is dropped. Gathering the records of a
//! batch is the prefetch stage's work; a batch here is only indices.

use serde::{Deserialize, Serialize};

use super::stage::{Sample, Stage};
use crate::{Error, Result};

/// Configuration of a [`Batcher`].
///
/// Built from [`BatchConfig::default`] or [`BatchConfig::new`] with chainable setters, so options
/// added later do not break callers:
///
/// ```
/// use zrecord::pipeline::BatchConfig;
///
/// let config = BatchConfig::new(64).drop_last(true);
/// assert_eq!((config.batch_size, config.drop_last), (64, true));
/// assert_eq!(BatchConfig::default().batch_size, 32);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BatchConfig {
    /// Items per batch, at least 1. Default: 32.
    pub batch_size: u64,
    /// Drop the last, short batch of every epoch. Default: false.
    pub drop_last: bool,
}

impl Default for BatchConfig {
    /// 32 items per batch, the last short batch of every epoch kept.
    fn default() -> Self {
        Self {
            batch_size: 32,
            drop_last: false,
        }
    }
}

impl BatchConfig {
    /// Batches of `batch_size` items; every other option at its default.
    #[must_use]
    pub fn new(batch_size: u64) -> Self {
        Self::default().batch_size(batch_size)
    }

    /// Sets the items per batch, at least 1. Default 32.
    #[must_use]
    pub fn batch_size(mut self, batch_size: u64) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// Sets whether the last, short batch of every epoch is dropped. Default false.
    #[must_use]
    pub fn drop_last(mut self, drop_last: bool) -> Self {
        self.drop_last = drop_last;
        self
    }
}

/// One batch of samples: what the index side hands to the prefetch workers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexBatch {
    /// The epoch.
    pub epoch: u64,
    /// The batch's position within the epoch.
    pub position: u64,
    /// The samples, in order.
    pub samples: Vec<Sample>,
}

impl IndexBatch {
    /// The record indices, in order.
    pub fn indices(&self) -> Vec<u64> {
        self.samples.iter().map(|s| s.index).collect()
    }

    /// Per sample, true if it is padding (see [`super::ShardConfig::pad_to_equal`]).
    pub fn padded(&self) -> Vec<bool> {
        self.samples.iter().map(|s| s.padded).collect()
    }
}

/// The batch stage: groups each epoch's items into [`IndexBatch`]es (`.batch()` in
/// [`super::StageExt`]; [`crate::Batch`] is a batch of records)
#[derive(Debug, Clone)]
pub struct Batcher<S> {
    upstream: S,
    config: BatchConfig,
}

impl<S: Stage<Item = Sample>> Batcher<S> {
    /// Batches `upstream`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if `batch_size` is 0.
    pub fn new(upstream: S, config: BatchConfig) -> Result<Self> {
        if config.batch_size == 0 || usize::try_from(config.batch_size).is_err() {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "batch: batch_size must be at least 1 and fit in memory, got {}",
                    config.batch_size
                ),
            });
        }
        Ok(Self { upstream, config })
    }

    /// The configuration.
    pub fn config(&self) -> &BatchConfig {
        &self.config
    }
}

impl<S: Stage<Item = Sample>> Stage for Batcher<S> {
    type Item = IndexBatch;

    fn epochs(&self) -> Option<u64> {
        self.upstream.epochs()
    }

    fn epoch_len(&self) -> u64 {
        let l = self.upstream.epoch_len();
        if self.config.drop_last {
            l / self.config.batch_size
        } else {
            l.div_ceil(self.config.batch_size)
        }
    }

    fn get(&mut self, epoch: u64, position: u64) -> Result<IndexBatch> {
        let len = self.epoch_len();
        if position >= len {
            return Err(Error::IndexOutOfRange {
                index: position,
                len,
            });
        }
        let start = position * self.config.batch_size;
        let end = start
            .saturating_add(self.config.batch_size)
            .min(self.upstream.epoch_len());
        let mut samples = Vec::new();
        let count =
            usize::try_from(end.saturating_sub(start)).map_err(|_| Error::InvalidConfig {
                reason: format!("batch of {} samples does not fit in memory", end - start),
            })?;
        self.upstream
            .get_strided(epoch, start, 1, count, &mut samples)?;
        Ok(IndexBatch {
            epoch,
            position,
            samples,
        })
    }

    fn describe(&self, out: &mut String) {
        self.upstream.describe(out);
        out.push_str(&format!(
            " | batch(batch_size={}, drop_last={})",
            self.config.batch_size, self.config.drop_last
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::super::sampler::{Sampler, SamplerConfig, SamplerMode};
    use super::*;

    fn batches(n: u64, batch_size: u64, drop_last: bool) -> Vec<Vec<u64>> {
        let s = Sampler::new(
            n,
            SamplerConfig::default()
                .mode(SamplerMode::Sequential)
                .seed(0)
                .epochs(Some(2)),
        )
        .unwrap();
        Batcher::new(s, BatchConfig::new(batch_size).drop_last(drop_last))
            .unwrap()
            .cursor()
            .into_iter()
            .map(|b| b.unwrap().indices())
            .collect()
    }

    #[test]
    fn batches_stay_within_epochs() {
        assert_eq!(
            batches(5, 2, false),
            vec![
                vec![0, 1],
                vec![2, 3],
                vec![4],
                vec![0, 1],
                vec![2, 3],
                vec![4]
            ]
        );
        assert_eq!(
            batches(5, 2, true),
            vec![vec![0, 1], vec![2, 3], vec![0, 1], vec![2, 3]]
        );
        assert_eq!(batches(1, 2, true), Vec::<Vec<u64>>::new());
        assert!(Batcher::new(
            Sampler::new(1, SamplerConfig::default()).unwrap(),
            BatchConfig::new(0).drop_last(false)
        )
        .is_err());
    }
}
