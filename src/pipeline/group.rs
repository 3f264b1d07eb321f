//! [`Grouper`]: cuts a stream of samples into groups of consecutive items of one epoch (a
//! batch, a bucket buffer), remembering where each group started so a checkpoint taken while a
//! group is incomplete or being served can go back to its start.

use std::pin::Pin;
use std::task::{Context, Poll};

use serde::{Deserialize, Serialize};

use super::checkpoint::Checkpoint;
use super::epoch_count::EpochCount;
use super::stage::Sample;
use crate::Result;

/// A sample with its place in its epoch (see [`EpochCount`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counted {
    /// The sample.
    pub sample: Sample,
    /// Its place in its epoch.
    pub ordinal: u64,
}

/// Where a group starts: the input's state, the item already pulled from the input that opens
/// the group (the first item of a new epoch, read while the previous group was being closed),
/// and the epoch count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupStart<St> {
    /// The input's state.
    pub input: St,
    /// An item pulled from the input and not yet in any group.
    pub pending: Option<Counted>,
    /// The count of the input items in the current epoch.
    pub count: EpochCount,
}

/// A complete group: where it started and its items, all of one epoch, in input order.
#[derive(Debug)]
pub(crate) struct Group<St> {
    pub(crate) start: GroupStart<St>,
    pub(crate) items: Vec<Counted>,
}

#[derive(Debug, Clone)]
struct Fill<St> {
    start: GroupStart<St>,
    items: Vec<Counted>,
}

/// Pulls groups of at most `size` consecutive items of one epoch from an input stream. A group
/// ends at `size` items, at the first item of another epoch (kept pending for the next group),
/// or at the end of the input.
///
/// The grouper holds the place, not the input: the stage that owns it (the stream form of
/// [`super::Bucket`] or [`super::Batcher`]) passes its input to every call. `St` is the input's
/// [`Checkpoint::State`], kept for the start of the group being filled.
#[derive(Debug, Clone)]
pub(crate) struct Grouper<St> {
    size: usize,
    pending: Option<Counted>,
    count: EpochCount,
    fill: Option<Fill<St>>,
    done: bool,
}

impl<St: Clone> Grouper<St> {
    pub(crate) fn new(size: usize) -> Self {
        Self {
            size: size.max(1),
            pending: None,
            count: EpochCount::default(),
            fill: None,
            done: false,
        }
    }

    /// The start of the group being filled, or, between groups, where the next one starts.
    pub(crate) fn start<S>(&self, input: &S) -> GroupStart<St>
    where
        S: Checkpoint<State = St>,
    {
        match &self.fill {
            Some(fill) => fill.start.clone(),
            None => GroupStart {
                input: input.checkpoint(),
                pending: self.pending,
                count: self.count,
            },
        }
    }

    /// Goes back to `start`, dropping the group being filled.
    pub(crate) fn restore<S>(&mut self, input: &mut S, start: GroupStart<St>) -> Result<()>
    where
        S: Checkpoint<State = St>,
    {
        self.fill = None;
        self.done = false;
        input.restore(start.input)?;
        self.pending = start.pending;
        self.count = start.count;
        Ok(())
    }

    /// True once the input ended and every item is in a returned group.
    pub(crate) fn is_terminated(&self) -> bool {
        self.done && self.pending.is_none() && self.fill.is_none()
    }

    /// The next group of `input`. An `Err` from the input is returned at once; the group being
    /// filled stays, and the next poll goes on filling it.
    pub(crate) fn poll_group<S>(
        &mut self,
        input: &mut S,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Group<St>>>>
    where
        S: Checkpoint<Item = Result<Sample>, State = St> + Unpin,
    {
        loop {
            if self.fill.is_none() {
                if self.done && self.pending.is_none() {
                    return Poll::Ready(None);
                }
                let start = self.start(input);
                let mut items = Vec::with_capacity(self.size.min(1 << 16));
                items.extend(self.pending.take());
                self.fill = Some(Fill { start, items });
            }
            let Some(fill) = self.fill.as_mut() else {
                continue;
            };
            if fill.items.len() >= self.size || self.done {
                return Poll::Ready(self.take());
            }
            match Pin::new(&mut *input).poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => self.done = true,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(sample))) => {
                    let item = Counted {
                        ordinal: self.count.next(sample.epoch),
                        sample,
                    };
                    let other_epoch = fill
                        .items
                        .first()
                        .is_some_and(|first| first.sample.epoch != sample.epoch);
                    if other_epoch {
                        self.pending = Some(item);
                        return Poll::Ready(self.take());
                    }
                    fill.items.push(item);
                }
            }
        }
    }

    /// The group being filled, if it holds anything.
    fn take(&mut self) -> Option<Result<Group<St>>> {
        let fill = self.fill.take()?;
        if fill.items.is_empty() {
            return None;
        }
        Some(Ok(Group {
            start: fill.start,
            items: fill.items,
        }))
    }
}
