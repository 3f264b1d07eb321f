//! The stream form of [`Shard`]: one rank's share of a [`Checkpoint`] stream of samples,
//! interleaved, by counting the items of each epoch.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::stream::{FusedStream, Stream};
use serde::{Deserialize, Serialize};

use super::super::checkpoint::Checkpoint;
use super::super::epoch_count::EpochCount;
use super::super::stage::Sample;
use super::{Geometry, Shard, ShardConfig};
use crate::Result;

/// The checkpoint of a [`Shard`] over a stream (`ShardStreamState` before #31; the same JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardState<St> {
    /// The input's state.
    pub input: St,
    /// The count of input items in the current epoch.
    pub count: EpochCount,
}

impl<S> Shard<S>
where
    S: Stream<Item = Result<Sample>> + Unpin,
{
    /// Shards the stream `input` (`CheckpointExt::shard`).
    ///
    /// # Errors
    /// [`crate::Error::InvalidConfig`] if `total` is 0 or `index >= total`, and for the modes
    /// that need the epoch's length: [`super::ShardMode::Contiguous`], `pad_to_equal`,
    /// `drop_remainder`.
    pub(crate) fn over_stream(input: S, config: ShardConfig) -> Result<Self> {
        let geometry = Geometry::new(&config, None)?;
        Ok(Self {
            upstream: input,
            config,
            upstream_len: 0,
            geometry,
            count: EpochCount::default(),
        })
    }
}

impl<S> Stream for Shard<S>
where
    S: Stream<Item = Result<Sample>> + Unpin,
{
    type Item = Result<Sample>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Sample>>> {
        let this = self.get_mut();
        loop {
            match Pin::new(&mut this.upstream).poll_next(cx) {
                Poll::Ready(Some(Ok(sample))) => {
                    let ordinal = this.count.next(sample.epoch);
                    if this.geometry.position_of(ordinal).is_some() {
                        return Poll::Ready(Some(Ok(sample)));
                    }
                }
                other => return other,
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, self.upstream.size_hint().1)
    }
}

impl<S> FusedStream for Shard<S>
where
    S: FusedStream<Item = Result<Sample>> + Unpin,
{
    fn is_terminated(&self) -> bool {
        self.upstream.is_terminated()
    }
}

impl<S> Checkpoint for Shard<S>
where
    S: Checkpoint<Item = Result<Sample>> + Unpin,
{
    type State = ShardState<S::State>;

    fn checkpoint(&self) -> Self::State {
        ShardState {
            input: self.upstream.checkpoint(),
            count: self.count,
        }
    }

    fn restore(&mut self, state: Self::State) -> Result<()> {
        self.upstream.restore(state.input)?;
        self.count = state.count;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use super::super::super::checkpoint::testing::{all, every_split, sampler};
    use super::super::super::checkpoint_ext::CheckpointExt;
    use super::super::ShardMode;
    use super::*;
    use crate::pipeline::{Stage, StageExt};
    use crate::Error;

    #[test]
    fn equals_the_interleaved_seekable_shard_and_resumes_everywhere() {
        for (total, index) in [(1, 0), (3, 0), (3, 2), (4, 1)] {
            let config = ShardConfig::new(total, index);
            let got = every_split(|| sampler(14, 2).cursor().shard(config).unwrap(), |s| s);
            let seekable = sampler(14, 2).shard(config).unwrap().cursor();
            let expected: Vec<Sample> = seekable.into_iter().map(|s| s.unwrap()).collect();
            assert_eq!(got, expected, "shard {index} of {total}");
        }
    }

    #[test]
    fn refuses_the_modes_that_need_a_length() {
        let bad = |c: ShardConfig| {
            matches!(
                sampler(5, 1).cursor().shard(c),
                Err(Error::InvalidConfig { .. })
            )
        };
        assert!(bad(ShardConfig::new(2, 0).mode(ShardMode::Contiguous)));
        assert!(bad(ShardConfig::new(2, 0).pad_to_equal(true)));
        assert!(bad(ShardConfig::new(2, 0).drop_remainder(true)));
        assert!(bad(ShardConfig::new(2, 2)));
        assert!(bad(ShardConfig::default().total(0)));
        assert_eq!(
            all(
                sampler(5, 1)
                    .cursor()
                    .shard(ShardConfig::new(2, 1))
                    .unwrap(),
                |s| s
            )
            .len(),
            2
        );
    }
}
