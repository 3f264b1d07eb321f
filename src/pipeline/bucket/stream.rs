//! The stream form of [`Bucket`]: length bucketing over a [`Checkpoint`] stream of samples, by
//! pulling each buffer from the input and ordering it as the seekable form does.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::stream::{FusedStream, Stream};
use serde::{Deserialize, Serialize};

use super::super::checkpoint::Checkpoint;
use super::super::group::{GroupStart, Grouper};
use super::super::stage::Sample;
use super::{order, sizes, Bucket, BucketConfig, BucketKey};
use crate::{Error, Result};

/// The checkpoint of a [`Bucket`] over a stream (`BucketStreamState` before #31; the same
/// JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketState<St> {
    /// Where the current buffer starts.
    pub start: GroupStart<St>,
    /// Items of that buffer served.
    pub served: u64,
}

/// What the stream form of a [`Bucket`] holds besides its input: the grouper that pulls its
/// buffers, the buffer being served, and where a restored or failed buffer starts.
#[derive(Debug, Clone)]
pub(super) struct Serving<St> {
    grouper: Grouper<St>,
    /// The buffer being served: its start, its items in order, the number served.
    serving: Option<(GroupStart<St>, Vec<Sample>, usize)>,
    /// Items of the next buffer already served before a restore.
    skip: u64,
    /// The start of the buffer a key error interrupted.
    failed: Option<GroupStart<St>>,
}

impl<St: Clone> Serving<St> {
    pub(super) fn new(buffer_size: usize) -> Self {
        Self {
            grouper: Grouper::new(buffer_size),
            serving: None,
            skip: 0,
            failed: None,
        }
    }
}

impl<S> Bucket<S, S::State>
where
    S: Checkpoint<Item = Result<Sample>> + Unpin,
{
    /// Buckets the stream `input` by `key` (`CheckpointExt::bucket`).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if `buffer_size` or `pack_size` is 0 or does not fit `usize`.
    pub(crate) fn over_stream(input: S, config: BucketConfig, key: BucketKey) -> Result<Self> {
        let (buffer_size, pack_size) = sizes(&config)?;
        Ok(Self {
            upstream: input,
            config,
            key,
            buffer_size,
            pack_size,
            cache: None,
            shared: Default::default(),
            stream: Box::new(Serving::new(buffer_size)),
        })
    }

    /// Pulls and orders the next buffer; `Ready(Some(Ok(())))` once `serving` holds one.
    fn poll_buffer(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<()>>> {
        let stream = &mut *self.stream;
        let group = match stream.grouper.poll_group(&mut self.upstream, cx) {
            Poll::Ready(Some(Ok(group))) => group,
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => return Poll::Pending,
        };
        stream.failed = None;
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
            stream.failed = Some(group.start);
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
        let skip = std::mem::take(&mut stream.skip);
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
                stream.serving = Some((group.start, items, served));
                Poll::Ready(Some(Ok(())))
            }
            Err(e) => {
                stream.failed = Some(group.start);
                Poll::Ready(Some(Err(e)))
            }
        }
    }
}

impl<S> Stream for Bucket<S, S::State>
where
    S: Checkpoint<Item = Result<Sample>> + Unpin,
{
    type Item = Result<Sample>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Sample>>> {
        let this = self.get_mut();
        loop {
            if let Some((_, items, served)) = &mut this.stream.serving {
                if let Some(&sample) = items.get(*served) {
                    *served += 1;
                    if *served >= items.len() {
                        this.stream.serving = None;
                    }
                    return Poll::Ready(Some(Ok(sample)));
                }
                this.stream.serving = None;
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

impl<S> FusedStream for Bucket<S, S::State>
where
    S: Checkpoint<Item = Result<Sample>> + Unpin,
{
    fn is_terminated(&self) -> bool {
        self.stream.serving.is_none() && self.stream.grouper.is_terminated()
    }
}

impl<S> Checkpoint for Bucket<S, S::State>
where
    S: Checkpoint<Item = Result<Sample>> + Unpin,
{
    type State = BucketState<S::State>;

    fn checkpoint(&self) -> Self::State {
        let stream = &self.stream;
        if let Some((start, _, served)) = &stream.serving {
            return BucketState {
                start: start.clone(),
                served: *served as u64,
            };
        }
        if let Some(start) = &stream.failed {
            return BucketState {
                start: start.clone(),
                served: 0,
            };
        }
        BucketState {
            start: stream.grouper.start(&self.upstream),
            served: stream.skip,
        }
    }

    fn restore(&mut self, state: Self::State) -> Result<()> {
        let stream = &mut *self.stream;
        stream.serving = None;
        stream.failed = None;
        stream.skip = state.served;
        stream.grouper.restore(&mut self.upstream, state.start)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use futures::executor::block_on;
    use futures::StreamExt;

    use super::super::super::checkpoint::testing::{every_split, sampler};
    use super::super::super::checkpoint_ext::CheckpointExt;
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
