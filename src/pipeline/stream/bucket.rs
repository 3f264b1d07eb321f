//! [`BucketStream`]: length bucketing over a stream of samples.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::stream::{FusedStream, Stream};
use serde::{Deserialize, Serialize};

use super::super::bucket::{order, sizes, BucketConfig, BucketKey};
use super::super::stage::Sample;
use super::group::{GroupStart, Grouper};
use super::Checkpoint;
use crate::{Error, Result};

/// The stream of [`super::CheckpointExt::bucket`]: buffers of `buffer_size` consecutive items
/// of one epoch, each sorted by `(key, seeded tie-breaker)`, cut into packs of `pack_size`, the
/// packs and the items within each pack shuffled, then served — the seekable
/// [`super::super::Bucket`]'s order, which it equals over a cursor of the same stage.
///
/// # Checkpoint
///
/// The state is where the current buffer starts (the input's state then) and how many of its
/// items were served. A restore goes back to the buffer's start, and the next poll pulls the
/// whole buffer from the input again, sorts it, and skips the items already served: at most
/// `buffer_size` items are pulled twice.
///
/// An `Err` from the input or the key is returned at once. The checkpoint then stays at the
/// start of the buffer, so a restore tries the buffer (and the error) again.
#[must_use = "streams do nothing unless polled"]
pub struct BucketStream<S: Checkpoint> {
    grouper: Grouper<S>,
    config: BucketConfig,
    key: BucketKey,
    pack_size: usize,
    /// The buffer being served: its start, its items in order, the number served.
    serving: Option<(GroupStart<S::State>, Vec<Sample>, usize)>,
    /// Items of the next buffer already served before a restore.
    skip: u64,
    /// The start of the buffer a key error interrupted.
    failed: Option<GroupStart<S::State>>,
}

/// The checkpoint of a [`BucketStream`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketStreamState<St> {
    /// Where the current buffer starts.
    pub start: GroupStart<St>,
    /// Items of that buffer served.
    pub served: u64,
}

impl<S> BucketStream<S>
where
    S: Checkpoint<Item = Result<Sample>> + Unpin,
{
    /// Buckets `input` by `key`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if `buffer_size` or `pack_size` is 0 or does not fit `usize`.
    pub fn new(input: S, config: BucketConfig, key: BucketKey) -> Result<Self> {
        let (buffer_size, pack_size) = sizes(&config)?;
        Ok(Self {
            grouper: Grouper::new(input, buffer_size),
            config,
            key,
            pack_size,
            serving: None,
            skip: 0,
            failed: None,
        })
    }

    /// The input stream.
    pub fn get_ref(&self) -> &S {
        self.grouper.input()
    }

    /// Pulls and orders the next buffer; `Ready(Some(Ok(())))` once `serving` holds one.
    fn poll_buffer(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<()>>> {
        let group = match self.grouper.poll_group(cx) {
            Poll::Ready(Some(Ok(group))) => group,
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => return Poll::Pending,
        };
        self.failed = None;
        let Some(first) = group.items.first() else {
            return Poll::Ready(Some(Ok(())));
        };
        let seed = self.config.seed;
        let epoch = first.sample.epoch;
        let buffer = first.ordinal / self.config.buffer_size;
        let samples: Vec<Sample> = group.items.iter().map(|c| c.sample).collect();
        let indices: Vec<u64> = samples.iter().map(|s| s.index).collect();
        let mut keys = Vec::with_capacity(indices.len());
        if let Err(e) = self.key.keys(&indices, &mut keys) {
            self.failed = Some(group.start);
            return Poll::Ready(Some(Err(e)));
        }
        // A group's items are consecutive items of its epoch, from `first.ordinal`.
        let items = order(
            &samples,
            &keys,
            first.ordinal,
            self.pack_size,
            seed,
            epoch,
            buffer,
        );
        let skip = std::mem::take(&mut self.skip);
        let served = usize::try_from(skip)
            .ok()
            .filter(|&s| s <= items.len())
            .ok_or_else(|| Error::ResumeMismatch {
                reason: format!(
                    "bucket: the checkpoint says {skip} items of the buffer at epoch {epoch} \
                     item {} were served, but the input gave it only {} items (the input \
                     differs from the checkpointed one)",
                    first.ordinal,
                    items.len()
                ),
            });
        match served {
            Ok(served) => {
                self.serving = Some((group.start, items, served));
                Poll::Ready(Some(Ok(())))
            }
            Err(e) => {
                self.failed = Some(group.start);
                Poll::Ready(Some(Err(e)))
            }
        }
    }
}

impl<S: Checkpoint + fmt::Debug> fmt::Debug for BucketStream<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BucketStream")
            .field("config", &self.config)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl<S> Stream for BucketStream<S>
where
    S: Checkpoint<Item = Result<Sample>> + Unpin,
{
    type Item = Result<Sample>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Sample>>> {
        let this = self.get_mut();
        loop {
            if let Some((_, items, served)) = &mut this.serving {
                if let Some(&sample) = items.get(*served) {
                    *served += 1;
                    if *served >= items.len() {
                        this.serving = None;
                    }
                    return Poll::Ready(Some(Ok(sample)));
                }
                this.serving = None;
            }
            match this.poll_buffer(cx) {
                Poll::Ready(Some(Ok(()))) => {}
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl<S> FusedStream for BucketStream<S>
where
    S: Checkpoint<Item = Result<Sample>> + Unpin,
{
    fn is_terminated(&self) -> bool {
        self.serving.is_none() && self.grouper.is_terminated()
    }
}

impl<S> Checkpoint for BucketStream<S>
where
    S: Checkpoint<Item = Result<Sample>> + Unpin,
{
    type State = BucketStreamState<S::State>;

    fn checkpoint(&self) -> Self::State {
        if let Some((start, _, served)) = &self.serving {
            return BucketStreamState {
                start: start.clone(),
                served: *served as u64,
            };
        }
        if let Some(start) = &self.failed {
            return BucketStreamState {
                start: start.clone(),
                served: 0,
            };
        }
        BucketStreamState {
            start: self.grouper.start(),
            served: self.skip,
        }
    }

    fn restore(&mut self, state: Self::State) -> Result<()> {
        self.serving = None;
        self.failed = None;
        self.skip = state.served;
        self.grouper.restore(state.start)
    }
}

// Nothing in a `BucketStream` is structurally pinned.
impl<S: Checkpoint + Unpin> Unpin for BucketStream<S> {}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use futures::executor::block_on;
    use futures::StreamExt;

    use super::super::testing::{every_split, sampler};
    use super::super::CheckpointExt;
    use super::*;
    use crate::pipeline::{Stage, StageExt};

    fn key() -> BucketKey {
        BucketKey::new("mod5", |i| Ok(i % 5))
    }

    #[test]
    fn equals_the_seekable_bucket_and_resumes_everywhere() {
        for (n, buffer, pack) in [(23, 8, 3), (23, 5, 5), (16, 4, 2), (7, 20, 2)] {
            let config = BucketConfig::default()
                .buffer_size(buffer)
                .pack_size(pack)
                .seed(3);
            let got = every_split(
                || sampler(n, 2).cursor().bucket(config, key()).unwrap(),
                |s| s,
            );
            let expected: Vec<Sample> = sampler(n, 2)
                .bucket(config, key())
                .unwrap()
                .cursor()
                .into_iter()
                .map(|s| s.unwrap())
                .collect();
            assert_eq!(
                got, expected,
                "{n} items, buffers of {buffer}, packs of {pack}"
            );
        }
    }

    #[test]
    fn a_key_error_keeps_the_checkpoint_at_the_buffer_start() {
        let config = BucketConfig::default().buffer_size(4).pack_size(2);
        let failing = BucketKey::new("fails", |i| {
            if i == 0 {
                Err(Error::IndexOutOfRange { index: i, len: 0 })
            } else {
                Ok(i)
            }
        });
        let mut s = sampler(8, 1).cursor().bucket(config, failing).unwrap();
        let before = s.checkpoint();
        let mut errors = 0;
        while let Some(r) = block_on(s.next()) {
            if r.is_err() {
                errors += 1;
                assert_eq!(s.checkpoint().served, 0);
                break;
            }
        }
        assert_eq!(errors, 1);
        // The failed buffer is the first or the second: the checkpoint is at its start.
        let after = s.checkpoint();
        assert!(after == before || after.start.count.seen == 4, "{after:?}");
    }
}
