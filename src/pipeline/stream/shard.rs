//! [`ShardStream`]: one rank's share of a stream of samples, interleaved.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::stream::{FusedStream, Stream};
use serde::{Deserialize, Serialize};

use super::super::shard::{Geometry, ShardConfig};
use super::super::stage::Sample;
use super::count::EpochCount;
use super::Checkpoint;
use crate::Result;

/// The stream of [`super::CheckpointExt::shard`]: of the items of every epoch (counted from 0
/// at each change of [`Sample::epoch`]), shard `index` of `total` keeps those whose count is
/// `index` modulo `total` — the interleaved mode of [`super::super::Shard`], which it equals
/// over a cursor of the same stage. Which counts it keeps is decided by the seekable shard's
/// own arithmetic (the crate's `shard::Geometry`, built without an epoch length), so the two
/// forms cannot drift.
///
/// A stream has no known epoch length, so the modes that need one are refused:
/// [`super::super::ShardMode::Contiguous`] (its block size is `ceil(L / total)`),
/// `pad_to_equal` and `drop_remainder` (they need `ceil` and `floor` of `L / total` before the
/// epoch's end); use the seekable [`super::super::Shard`] for them.
#[must_use = "streams do nothing unless polled"]
pub struct ShardStream<S> {
    input: S,
    config: ShardConfig,
    geometry: Geometry,
    count: EpochCount,
}

/// The checkpoint of a [`ShardStream`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardStreamState<St> {
    /// The input's state.
    pub input: St,
    /// The count of input items in the current epoch.
    pub count: EpochCount,
}

impl<S> ShardStream<S> {
    /// Shards `input`.
    ///
    /// # Errors
    /// [`crate::Error::InvalidConfig`] if `total` is 0 or `index >= total`, and for the modes
    /// that need the epoch's length: [`super::super::ShardMode::Contiguous`], `pad_to_equal`,
    /// `drop_remainder`.
    pub fn new(input: S, config: ShardConfig) -> Result<Self> {
        let geometry = Geometry::new(&config, None)?;
        Ok(Self {
            input,
            config,
            geometry,
            count: EpochCount::default(),
        })
    }

    /// The input stream.
    pub fn get_ref(&self) -> &S {
        &self.input
    }
}

impl<S: fmt::Debug> fmt::Debug for ShardStream<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardStream")
            .field("input", &self.input)
            .field("total", &self.config.total)
            .field("index", &self.config.index)
            .field("count", &self.count)
            .finish()
    }
}

impl<S> Stream for ShardStream<S>
where
    S: Stream<Item = Result<Sample>> + Unpin,
{
    type Item = Result<Sample>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Sample>>> {
        let this = self.get_mut();
        loop {
            match Pin::new(&mut this.input).poll_next(cx) {
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
        (0, self.input.size_hint().1)
    }
}

impl<S> FusedStream for ShardStream<S>
where
    S: FusedStream<Item = Result<Sample>> + Unpin,
{
    fn is_terminated(&self) -> bool {
        self.input.is_terminated()
    }
}

impl<S> Checkpoint for ShardStream<S>
where
    S: Checkpoint<Item = Result<Sample>> + Unpin,
{
    type State = ShardStreamState<S::State>;

    fn checkpoint(&self) -> Self::State {
        ShardStreamState {
            input: self.input.checkpoint(),
            count: self.count,
        }
    }

    fn restore(&mut self, state: Self::State) -> Result<()> {
        self.input.restore(state.input)?;
        self.count = state.count;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use super::super::testing::{all, every_split, sampler};
    use super::super::CheckpointExt;
    use super::*;
    use crate::pipeline::{ShardMode, Stage, StageExt};
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
