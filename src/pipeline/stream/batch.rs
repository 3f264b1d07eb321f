//! [`BatchStream`]: consecutive samples of each epoch grouped into [`IndexBatch`]es.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::stream::{FusedStream, Stream};
use serde::{Deserialize, Serialize};

use super::super::batch::{span, BatchConfig, IndexBatch};
use super::super::stage::Sample;
use super::group::{GroupStart, Grouper};
use super::Checkpoint;
use crate::{Error, Result};

/// The stream of [`super::CheckpointExt::batch`]: batches of `batch_size` consecutive items of
/// one epoch (a change of [`Sample::epoch`] ends an epoch). The last batch of an epoch holds
/// the remainder or, with `drop_last`, is dropped. A batch's [`IndexBatch::position`] is its
/// place in its epoch, so over a cursor of a stage it equals the seekable
/// [`super::super::Batcher`].
///
/// Which items form batch `p` and whether a short last batch is kept is decided by the seekable
/// batcher's own arithmetic (the crate's `batch::span`), given the end of the group pulled, so
/// the two forms cannot drift.
///
/// To see that an epoch ended, the stream pulls the first item of the next one; the checkpoint
/// holds that item (a [`GroupStart::pending`] sample), so nothing is lost or pulled twice.
#[must_use = "streams do nothing unless polled"]
pub struct BatchStream<S: Checkpoint> {
    grouper: Grouper<S>,
    config: BatchConfig,
}

/// The checkpoint of a [`BatchStream`]: where the next batch starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchStreamState<St> {
    /// The start of the next batch.
    pub next: GroupStart<St>,
}

impl<S> BatchStream<S>
where
    S: Checkpoint<Item = Result<Sample>> + Unpin,
{
    /// Batches `input`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if `batch_size` is 0 or does not fit `usize`.
    pub fn new(input: S, config: BatchConfig) -> Result<Self> {
        let size = usize::try_from(config.batch_size)
            .ok()
            .filter(|&b| b > 0)
            .ok_or_else(|| Error::InvalidConfig {
                reason: format!(
                    "batch: batch_size must be at least 1 and fit in memory, got {}",
                    config.batch_size
                ),
            })?;
        Ok(Self {
            grouper: Grouper::new(input, size),
            config,
        })
    }

    /// The input stream.
    pub fn get_ref(&self) -> &S {
        self.grouper.input()
    }
}

impl<S: Checkpoint + fmt::Debug> fmt::Debug for BatchStream<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchStream")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<S> Stream for BatchStream<S>
where
    S: Checkpoint<Item = Result<Sample>> + Unpin,
{
    type Item = Result<IndexBatch>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<IndexBatch>>> {
        let this = self.get_mut();
        loop {
            let group = match this.grouper.poll_group(cx) {
                Poll::Ready(Some(Ok(group))) => group,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            };
            // The group holds consecutive ordinals of one epoch, cut every `batch_size` and at
            // the epoch's end: it ends where the epoch ends if it is short.
            let (Some(first), Some(last)) = (group.items.first(), group.items.last()) else {
                continue;
            };
            let position = first.ordinal / this.config.batch_size;
            let end = last.ordinal.saturating_add(1);
            let Some((start, end)) = span(&this.config, position, end) else {
                continue;
            };
            return Poll::Ready(Some(Ok(IndexBatch {
                epoch: first.sample.epoch,
                position,
                samples: group
                    .items
                    .iter()
                    .filter(|c| (start..end).contains(&c.ordinal))
                    .map(|c| c.sample)
                    .collect(),
            })));
        }
    }
}

impl<S> FusedStream for BatchStream<S>
where
    S: Checkpoint<Item = Result<Sample>> + Unpin,
{
    fn is_terminated(&self) -> bool {
        self.grouper.is_terminated()
    }
}

impl<S> Checkpoint for BatchStream<S>
where
    S: Checkpoint<Item = Result<Sample>> + Unpin,
{
    type State = BatchStreamState<S::State>;

    fn checkpoint(&self) -> Self::State {
        BatchStreamState {
            next: self.grouper.start(),
        }
    }

    fn restore(&mut self, state: Self::State) -> Result<()> {
        self.grouper.restore(state.next)
    }
}

// Nothing in a `BatchStream` is structurally pinned.
impl<S: Checkpoint + Unpin> Unpin for BatchStream<S> {}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use super::super::testing::{every_split, sampler};
    use super::super::CheckpointExt;
    use super::*;
    use crate::pipeline::{Stage, StageExt};

    #[test]
    fn equals_the_seekable_batch_and_resumes_everywhere() {
        for (n, size, drop_last) in [(10, 3, false), (10, 3, true), (9, 3, false), (0, 2, false)] {
            let config = BatchConfig::new(size).drop_last(drop_last);
            let got = every_split(|| sampler(n, 3).cursor().batch(config).unwrap(), |b| b);
            let expected: Vec<IndexBatch> = sampler(n, 3)
                .batch(config)
                .unwrap()
                .cursor()
                .into_iter()
                .map(|b| b.unwrap())
                .collect();
            assert_eq!(
                got, expected,
                "{n} items, batches of {size}, drop_last {drop_last}"
            );
        }
    }

    #[test]
    fn a_zero_batch_size_is_refused() {
        let r = sampler(3, 1).cursor().batch(BatchConfig::new(0));
        assert!(matches!(r, Err(Error::InvalidConfig { .. })));
    }
}
