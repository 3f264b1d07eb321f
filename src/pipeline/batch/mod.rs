//! Batching: consecutive items of each epoch grouped into batches of record indices.
//!
//! Batches never straddle epochs: the last batch of an epoch holds the remainder
//! (`epoch_len mod batch_size` items) or, with `drop_last`, is dropped. Gathering the records of a
//! batch is the prefetch stage's work; a batch here is only indices.
//!
//! Seekable over a seekable stage, a checkpointable stream over a stream (`stream.rs`).

mod stream;

use std::fmt;

use serde::{Deserialize, Serialize};

use super::group::Grouper;
use super::stage::{Sample, Stage};
use crate::{Error, Result};

pub use stream::BatchState;

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

/// The number of batches of an epoch of `epoch_len` items: `ceil(epoch_len / batch_size)`, or
/// `floor` with `drop_last`.
pub(crate) fn batch_count(config: &BatchConfig, epoch_len: u64) -> u64 {
    let size = config.batch_size.max(1);
    if config.drop_last {
        epoch_len / size
    } else {
        epoch_len.div_ceil(size)
    }
}

/// The upstream positions `start..end` of batch `position` of an epoch of `epoch_len` items, or
/// `None` if the epoch has no such batch (past its end, or the short last batch `drop_last`
/// drops).
///
/// This is the one place batch boundaries, `drop_last` and the epoch's end are decided: the
/// seekable [`Batcher`] calls it with the upstream epoch length, the stream form with the end of the group it pulled — the epoch's length
/// when the group is short (the epoch ended), and a lower bound of it when the group is full,
/// which yields the same full batch.
pub(crate) fn span(config: &BatchConfig, position: u64, epoch_len: u64) -> Option<(u64, u64)> {
    if position >= batch_count(config, epoch_len) {
        return None;
    }
    let start = position.checked_mul(config.batch_size)?;
    Some((
        start,
        start.saturating_add(config.batch_size).min(epoch_len),
    ))
}

/// The batch stage: groups each epoch's items into [`IndexBatch`]es (`.batch()` in
/// [`super::StageExt`] and [`super::CheckpointExt`]; [`crate::Batch`] is a batch of records).
///
/// # Seekable or stream
///
/// Like every stage of the chain, `Batcher` is what its input is. Over a seekable [`Stage`]
/// ([`Batcher::new`], `StageExt::batch`) it is a seekable stage. Over a
/// [`super::Checkpoint`] stream (`CheckpointExt::batch`) it is a checkpointable stream of the
/// same batches: `batch_size` consecutive items of one epoch (a change of [`Sample::epoch`]
/// ends an epoch), the last batch of an epoch holding the remainder or, with `drop_last`,
/// dropped; a batch's [`IndexBatch::position`] is its place in its epoch. Which items form a
/// batch is decided by the same arithmetic for both forms, so over a cursor of a stage the
/// stream form yields exactly what the seekable form yields. `St` is then the input's
/// [`super::Checkpoint::State`] (kept for where the batch being filled started); it is `()` for
/// the seekable form.
///
/// To see that an epoch ended, the stream form pulls the first item of the next one; its
/// checkpoint ([`BatchState`]) holds that item (a [`super::GroupStart::pending`] sample), so
/// nothing is lost or pulled twice.
#[derive(Clone)]
pub struct Batcher<S, St = ()> {
    upstream: S,
    config: BatchConfig,
    /// Over a stream: the batch being pulled and where it started (unused when seeking, and
    /// boxed so the seekable form stays small: every prefetch worker clones it).
    grouper: Box<Grouper<St>>,
}

// Nothing in a `Batcher` is structurally pinned (over a stream, the input's state it keeps need
// not be `Unpin`).
impl<S: Unpin, St> Unpin for Batcher<S, St> {}

impl<S: fmt::Debug, St> fmt::Debug for Batcher<S, St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batcher")
            .field("upstream", &self.upstream)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<S, St> Batcher<S, St> {
    /// The configuration.
    pub fn config(&self) -> &BatchConfig {
        &self.config
    }

    /// The upstream stage or stream.
    pub fn upstream(&self) -> &S {
        &self.upstream
    }

    /// The input stream: the name of [`Batcher::upstream`] in `BatchStream`, kept for one
    /// release.
    #[deprecated(note = "use `upstream()`; `BatchStream` is `Batcher` now, see CHANGELOG.md")]
    pub fn get_ref(&self) -> &S {
        &self.upstream
    }
}

/// The batch size of `config` as `usize`.
///
/// # Errors
/// [`Error::InvalidConfig`] if it is 0 or does not fit `usize`.
fn size(config: &BatchConfig) -> Result<usize> {
    usize::try_from(config.batch_size)
        .ok()
        .filter(|&b| b > 0)
        .ok_or_else(|| Error::InvalidConfig {
            reason: format!(
                "batch: batch_size must be at least 1 and fit in memory, got {}",
                config.batch_size
            ),
        })
}

impl<S: Stage<Item = Sample>> Batcher<S> {
    /// Batches `upstream`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if `batch_size` is 0.
    pub fn new(upstream: S, config: BatchConfig) -> Result<Self> {
        let size = size(&config)?;
        Ok(Self {
            upstream,
            config,
            grouper: Box::new(Grouper::new(size)),
        })
    }
}

impl<S: Stage<Item = Sample>> Stage for Batcher<S> {
    type Item = IndexBatch;

    fn epochs(&self) -> Option<u64> {
        self.upstream.epochs()
    }

    fn epoch_len(&self) -> u64 {
        batch_count(&self.config, self.upstream.epoch_len())
    }

    fn get(&mut self, epoch: u64, position: u64) -> Result<IndexBatch> {
        let Some((start, end)) = span(&self.config, position, self.upstream.epoch_len()) else {
            return Err(Error::IndexOutOfRange {
                index: position,
                len: self.epoch_len(),
            });
        };
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

    /// `span` covers every epoch exactly once with `batch_count` batches (the last one short
    /// unless `drop_last` dropped it), and a full batch's span does not depend on the items
    /// after it: what the stream form relies on when it passes the end of a full group.
    #[test]
    fn span_cuts_the_epoch_and_a_full_batch_needs_no_length() {
        for l in 0u64..40 {
            for size in 1u64..9 {
                for drop_last in [false, true] {
                    let c = BatchConfig::new(size).drop_last(drop_last);
                    let n = batch_count(&c, l);
                    let spans: Vec<_> = (0..n).map(|p| span(&c, p, l).unwrap()).collect();
                    assert_eq!(span(&c, n, l), None);
                    let covered: Vec<u64> = spans.iter().flat_map(|&(a, b)| a..b).collect();
                    let kept = if drop_last { l - l % size } else { l };
                    assert_eq!(
                        covered,
                        (0..kept).collect::<Vec<_>>(),
                        "{l} {size} {drop_last}"
                    );
                    for (p, &(a, b)) in spans.iter().enumerate() {
                        if b - a == size {
                            for more in b..b + 2 * size {
                                assert_eq!(span(&c, p as u64, more), Some((a, b)));
                            }
                        }
                    }
                }
            }
        }
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
