//! The index-side stage contract: a deterministic, seekable sequence of items per epoch, and the
//! [`Cursor`] that iterates (and streams) it with a serialisable state.
//!
//! Every index-side stage (sampler, shard, bucket, batch) is a pure function of
//! `(epoch, position)`: the same stage configuration gives the same item at the same place on any
//! machine. That is what makes the whole chain's state a cursor, what makes seeking cheap, and
//! what lets each prefetch worker run its own copy of the chain without coordination.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::stream::{FusedStream, Stream};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// One sampled record index, as it flows through the index-side stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Sample {
    /// The sampler epoch the sample belongs to.
    pub epoch: u64,
    /// The sampler position within that epoch.
    pub position: u64,
    /// The record index.
    pub index: u64,
    /// True for an item repeated by [`super::ShardConfig::pad_to_equal`] to even out shard lengths:
    /// evaluation should drop it.
    pub padded: bool,
}

/// A place in a stage's item sequence: the `position`-th item of `epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Position {
    /// The epoch.
    pub epoch: u64,
    /// The position within the epoch.
    pub position: u64,
}

/// A deterministic, seekable index-side stage.
///
/// Every epoch has [`Stage::epoch_len`] items; [`Stage::get`] is a pure function of its
/// arguments (the `&mut self` only lets a stage cache work, such as a bucket's sorted buffer).
pub trait Stage: Clone + Send + 'static {
    /// What the stage yields.
    type Item: Clone + Send + 'static;

    /// Number of epochs; `None` means the stage never ends.
    fn epochs(&self) -> Option<u64>;

    /// Number of items in every epoch (but the leading [`Stage::irregular_epochs`]).
    fn epoch_len(&self) -> u64;

    /// Number of leading epochs whose lengths may differ from [`Stage::epoch_len`]: the
    /// leftover epochs a rank runs first after an elastic resume (see
    /// [`super::ElasticChain`]). 0 for every other stage.
    fn irregular_epochs(&self) -> u64 {
        0
    }

    /// Number of items in epoch `epoch`: [`Stage::epoch_len`], except for the leading
    /// [`Stage::irregular_epochs`].
    fn epoch_len_at(&self, epoch: u64) -> u64 {
        let _ = epoch;
        self.epoch_len()
    }

    /// The item at `position` of `epoch`.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] if `epoch` or `position` is past the end; whatever a key
    /// function returns for stages that call one.
    fn get(&mut self, epoch: u64, position: u64) -> Result<Self::Item>;

    /// Appends the items at positions `start, start + step, …` (`count` of them) of `epoch` to
    /// `out`: the same items as `count` calls of [`Stage::get`], which is what the default does.
    /// Stages that can compute many items faster than one at a time (the shuffled sampler's
    /// permutation, computed for a whole batch with no branch per item) override it; a batch
    /// asks its upstream for all its samples with one call.
    ///
    /// # Errors
    /// As [`Stage::get`] for the first position that fails; `out` may then hold some items.
    fn get_strided(
        &mut self,
        epoch: u64,
        start: u64,
        step: u64,
        count: usize,
        out: &mut Vec<Self::Item>,
    ) -> Result<()> {
        out.reserve(count);
        let mut position = start;
        for k in 0..count {
            out.push(self.get(epoch, position)?);
            if k + 1 < count {
                position = position.checked_add(step).ok_or(Error::IndexOutOfRange {
                    index: u64::MAX,
                    len: self.epoch_len_at(epoch),
                })?;
            }
        }
        Ok(())
    }

    /// Appends a description of the configuration of this stage and everything upstream of it.
    /// Checkpoints record it so a resume against another configuration is refused.
    fn describe(&self, out: &mut String);

    /// Total number of items over all epochs, `None` if infinite.
    fn total_len(&self) -> Option<u64> {
        if self.irregular_epochs() > 0 {
            let lead = (0..self.irregular_epochs())
                .fold(0u64, |acc, k| acc.saturating_add(self.epoch_len_at(k)));
            let rest = match self.epochs() {
                Some(e) => e
                    .saturating_sub(self.irregular_epochs())
                    .saturating_mul(self.epoch_len()),
                None if self.epoch_len() == 0 => 0,
                None => return None,
            };
            return Some(lead.saturating_add(rest));
        }
        match self.epochs() {
            Some(e) => Some(e.saturating_mul(self.epoch_len())),
            None if self.epoch_len() == 0 => Some(0),
            None => None,
        }
    }

    /// Iterates (or streams) the stage from its first item.
    fn cursor(self) -> Cursor<Self>
    where
        Self: Sized,
    {
        Cursor::new(self)
    }
}

/// The description of a stage's configuration, as recorded in checkpoints.
pub fn describe<S: Stage>(stage: &S) -> String {
    let mut s = String::new();
    stage.describe(&mut s);
    s
}

/// Where each global position of a stage falls: the items of every epoch numbered in order,
/// `g = 0, 1, …`, leading irregular epochs first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Cumulative ends of the leading irregular epochs.
    lead_ends: Arc<[u64]>,
    /// Length of every later epoch.
    epoch_len: u64,
    /// Total number of items, `None` if infinite.
    total: Option<u64>,
}

impl Layout {
    /// The layout of `stage`.
    pub(crate) fn of<S: Stage>(stage: &S) -> Self {
        let mut acc = 0u64;
        let lead_ends = (0..stage.irregular_epochs())
            .map(|k| {
                acc = acc.saturating_add(stage.epoch_len_at(k));
                acc
            })
            .collect();
        Self {
            lead_ends,
            epoch_len: stage.epoch_len(),
            total: stage.total_len(),
        }
    }

    /// Total number of items, `None` if infinite.
    pub(crate) fn total(&self) -> Option<u64> {
        self.total
    }

    fn lead_total(&self) -> u64 {
        self.lead_ends.last().copied().unwrap_or(0)
    }

    /// The epoch and position of global position `g` (`g` may be the end of the stage: the
    /// first position after its last item).
    pub(crate) fn position(&self, g: u64) -> Position {
        let lead_total = self.lead_total();
        if g < lead_total {
            let k = self.lead_ends.partition_point(|&end| end <= g);
            let start = k
                .checked_sub(1)
                .and_then(|i| self.lead_ends.get(i))
                .copied()
                .unwrap_or(0);
            return Position {
                epoch: k as u64,
                position: g - start,
            };
        }
        let lead = self.lead_ends.len() as u64;
        let rest = g - lead_total;
        if self.epoch_len == 0 {
            return Position {
                epoch: lead,
                position: 0,
            };
        }
        Position {
            epoch: lead.saturating_add(rest / self.epoch_len),
            position: rest % self.epoch_len,
        }
    }

    /// The global position of `pos`, `None` if it names no place of the stage (an epoch past
    /// the end, a position past its epoch, or past `u64`). The end of the stage is a place.
    pub(crate) fn global(&self, pos: Position) -> Option<u64> {
        let lead = self.lead_ends.len() as u64;
        let g = if pos.epoch < lead {
            let k = usize::try_from(pos.epoch).ok()?;
            let end = *self.lead_ends.get(k)?;
            let start = k
                .checked_sub(1)
                .and_then(|i| self.lead_ends.get(i))
                .copied()
                .unwrap_or(0);
            let g = start.checked_add(pos.position)?;
            (g < end || (g == end && pos.position == 0)).then_some(g)?
        } else {
            if pos.position >= self.epoch_len && pos.position != 0 {
                return None;
            }
            (pos.epoch - lead)
                .checked_mul(self.epoch_len)?
                .checked_add(pos.position)?
                .checked_add(self.lead_total())?
        };
        self.total.is_none_or(|t| g <= t).then_some(g)
    }
}

/// The serialisable position of a [`Cursor`]: the next item it will yield.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CursorState {
    /// The epoch of the next item.
    pub epoch: u64,
    /// The position of the next item within its epoch.
    pub position: u64,
    /// The configuration of the stage the cursor ran over.
    pub config: String,
}

/// Iterates a [`Stage`] in order: every position of epoch 0, then of epoch 1, and so on.
///
/// A [`Stream`] (always ready: the index side never waits) with a serialisable [`CursorState`];
/// [`Cursor::into_iter`] iterates it synchronously.
#[must_use = "a cursor does nothing unless iterated"]
#[derive(Clone)]
pub struct Cursor<S: Stage> {
    stage: S,
    layout: Layout,
    /// Global position of the next item.
    g: u64,
    /// The items at `g, g + 1, …` (within one epoch), computed together with
    /// [`Stage::get_strided`]: a derived cache, emptied by a seek.
    ahead: std::collections::VecDeque<S::Item>,
}

// Nothing in a cursor is structurally pinned.
impl<S: Stage> Unpin for Cursor<S> {}

/// Items a cursor computes at once (one [`Stage::get_strided`] call).
const CURSOR_BLOCK: u64 = 256;

impl<S: Stage + fmt::Debug> fmt::Debug for Cursor<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cursor")
            .field("stage", &self.stage)
            .field("layout", &self.layout)
            .field("g", &self.g)
            .field("ahead", &self.ahead.len())
            .finish()
    }
}

impl<S: Stage> Cursor<S> {
    /// A cursor at the first item of `stage`.
    pub fn new(stage: S) -> Self {
        Self {
            layout: Layout::of(&stage),
            stage,
            g: 0,
            ahead: std::collections::VecDeque::new(),
        }
    }

    /// A cursor at `(epoch, position)` of `stage`. O(1): no item before it is computed.
    ///
    /// # Errors
    /// [`Error::ResumeMismatch`] if `state` was taken over another configuration or names a
    /// position the stage does not have.
    pub fn resume(stage: S, state: &CursorState) -> Result<Self> {
        let mut cursor = Self::new(stage);
        cursor.seek(state)?;
        Ok(cursor)
    }

    /// Moves the cursor to `state`: the next item is the one at `(epoch, position)`. O(1).
    ///
    /// # Errors
    /// As [`Cursor::resume`]; the cursor does not move.
    pub fn seek(&mut self, state: &CursorState) -> Result<()> {
        let stage = &self.stage;
        let config = describe(stage);
        if config != state.config {
            // A checkpoint of zrecord 0.1 names no shuffled permutation: say how to resume it.
            let hint = if super::description::balanced_network_in(&state.config)
                && !super::description::balanced_network_in(&config)
            {
                " (the checkpoint was taken by zrecord 0.1, whose shuffled order differs: \
                 build the sampler with `Sampler::earlier_permutation`, or the mix with \
                 `Mix::earlier_permutation`, to resume it)"
            } else {
                ""
            };
            return Err(Error::ResumeMismatch {
                reason: format!(
                    "stage configuration differs: checkpoint has `{}`, this stage is \
                     `{config}`{hint}",
                    state.config
                ),
            });
        }
        let layout = Layout::of(stage);
        let pos = Position {
            epoch: state.epoch,
            position: state.position,
        };
        let g = layout.global(pos).ok_or_else(|| Error::ResumeMismatch {
            reason: format!(
                "cursor at epoch {} position {} is outside the stage ({} items per epoch)",
                state.epoch,
                state.position,
                stage.epoch_len_at(state.epoch)
            ),
        })?;
        self.layout = layout;
        self.g = g;
        self.ahead.clear();
        Ok(())
    }

    /// The position of the next item; resuming from it continues exactly here.
    pub fn state(&self) -> CursorState {
        let pos = self.layout.position(self.g);
        CursorState {
            epoch: pos.epoch,
            position: pos.position,
            config: describe(&self.stage),
        }
    }

    /// The stage being iterated.
    pub fn stage(&self) -> &S {
        &self.stage
    }

    fn finished(&self) -> bool {
        self.layout.total().is_some_and(|t| self.g >= t)
    }

    fn remaining(&self) -> Option<u64> {
        Some(self.layout.total()?.saturating_sub(self.g))
    }
}

impl<S: Stage> Cursor<S> {
    /// The next item, computed synchronously (the index side never waits).
    pub fn next_item(&mut self) -> Option<Result<S::Item>> {
        if self.finished() {
            return None;
        }
        let item = match self.ahead.pop_front() {
            Some(item) => Ok(item),
            None => self.compute(),
        };
        // Below the total (not finished), or an infinite stage whose positions end with u64.
        match self.g.checked_add(1) {
            Some(g) => self.g = g,
            None => self.layout.total = Some(self.g),
        }
        Some(item)
    }

    /// The item at `g`, computing the next items of its epoch with it (up to
    /// [`CURSOR_BLOCK`]); a block that fails is computed one item at a time instead, so the
    /// error comes with the item that has it.
    fn compute(&mut self) -> Result<S::Item> {
        let pos = self.layout.position(self.g);
        let in_epoch = self
            .stage
            .epoch_len_at(pos.epoch)
            .saturating_sub(pos.position);
        let count = in_epoch
            .min(self.remaining().unwrap_or(u64::MAX))
            .min(CURSOR_BLOCK);
        if count > 1 {
            let mut block = Vec::with_capacity(count as usize);
            let got =
                self.stage
                    .get_strided(pos.epoch, pos.position, 1, count as usize, &mut block);
            if got.is_ok() && block.len() == count as usize {
                self.ahead.extend(block);
                if let Some(item) = self.ahead.pop_front() {
                    return Ok(item);
                }
            }
        }
        self.stage.get(pos.epoch, pos.position)
    }

    fn size(&self) -> (usize, Option<usize>) {
        match self.remaining() {
            Some(r) => {
                let r = usize::try_from(r).unwrap_or(usize::MAX);
                (r, Some(r))
            }
            None => (usize::MAX, None),
        }
    }
}

/// A [`Cursor`] as a blocking [`Iterator`]; see [`Cursor::into_iter`].
#[must_use = "iterators are lazy"]
#[derive(Debug, Clone)]
pub struct CursorIter<S: Stage>(Cursor<S>);

impl<S: Stage> CursorIter<S> {
    /// The cursor, for its [`Cursor::state`].
    pub fn cursor(&self) -> &Cursor<S> {
        &self.0
    }
}

impl<S: Stage> Iterator for CursorIter<S> {
    type Item = Result<S::Item>;

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next_item()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size()
    }
}

/// Iterates the cursor synchronously (a cursor is also a [`Stream`]; this avoids the ambiguity
/// of a type that is both).
impl<S: Stage> IntoIterator for Cursor<S> {
    type Item = Result<S::Item>;
    type IntoIter = CursorIter<S>;

    fn into_iter(self) -> CursorIter<S> {
        CursorIter(self)
    }
}

impl<S: Stage + Unpin> Stream for Cursor<S> {
    type Item = Result<S::Item>;

    fn poll_next(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Poll::Ready(self.get_mut().next_item())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.size()
    }
}

impl<S: Stage + Unpin> FusedStream for Cursor<S> {
    fn is_terminated(&self) -> bool {
        self.finished()
    }
}
