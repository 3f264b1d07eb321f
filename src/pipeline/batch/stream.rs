//! The stream form of [`Batcher`]: consecutive samples of each epoch of a [`Checkpoint`] stream
//! grouped into [`IndexBatch`]es.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::stream::{FusedStream, Stream};
use serde::{Deserialize, Serialize};

use super::super::checkpoint::Checkpoint;
use super::super::group::{GroupStart, Grouper};
use super::super::stage::Sample;
use super::{size, span, BatchConfig, Batcher, IndexBatch};
use crate::Result;

/// The checkpoint of a [`Batcher`] over a stream: where the next batch starts
/// (`BatchStreamState` before #31; the same JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchState<St> {
    /// The start of the next batch.
    pub next: GroupStart<St>,
}

impl<S> Batcher<S, S::State>
where
    S: Checkpoint<Item = Result<Sample>> + Unpin,
{
    /// Batches the stream `input` (`CheckpointExt::batch`).
    ///
    /// # Errors
    /// [`crate::Error::InvalidConfig`] if `batch_size` is 0 or does not fit `usize`.
    pub(crate) fn over_stream(input: S, config: BatchConfig) -> Result<Self> {
        let size = size(&config)?;
        Ok(Self {
            upstream: input,
            config,
            grouper: Box::new(Grouper::new(size)),
        })
    }
}

impl<S> Stream for Batcher<S, S::State>
where
    S: Checkpoint<Item = Result<Sample>> + Unpin,
{
    type Item = Result<IndexBatch>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<IndexBatch>>> {
        let this = self.get_mut();
        loop {
            let group = match this.grouper.poll_group(&mut this.upstream, cx) {
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

impl<S> FusedStream for Batcher<S, S::State>
where
    S: Checkpoint<Item = Result<Sample>> + Unpin,
{
    fn is_terminated(&self) -> bool {
        self.grouper.is_terminated()
    }
}

impl<S> Checkpoint for Batcher<S, S::State>
where
    S: Checkpoint<Item = Result<Sample>> + Unpin,
{
    type State = BatchState<S::State>;

    fn checkpoint(&self) -> Self::State {
        BatchState {
            next: self.grouper.start(&self.upstream),
        }
    }

    fn restore(&mut self, state: Self::State) -> Result<()> {
        self.grouper.restore(&mut self.upstream, state.next)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use super::super::super::checkpoint::testing::{every_split, sampler};
    use super::super::super::checkpoint_ext::CheckpointExt;
    use super::*;
    use crate::pipeline::{Stage, StageExt};
    use crate::Error;

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
