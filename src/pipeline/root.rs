//! The first stage of a loader's index chain: what numbers the items of an epoch — a
//! [`Sampler`] over one index space, a [`Mix`] of several parts, or what an elastic resume left
//! of an epoch.

use std::sync::Arc;

use super::mix::Mix;
use super::residual::Selection;
use super::sampler::Sampler;
use super::stage::{Sample, Stage};
use crate::{Error, Result};

/// The root of an index chain: the stage whose `(epoch, position)` names every item a loader
/// can deliver, and everything downstream (shard, bucket, batch) rearranges.
#[derive(Debug, Clone)]
pub enum Root {
    /// One source, ordered by a [`Sampler`].
    Sampler(Sampler),
    /// A weighted mix over the source's parts ([`super::Source::part_lens`]); see
    /// [`super::LoaderBuilder::mix`].
    Mix(Mix),
    /// What an elastic resume left of one epoch of another root (see
    /// [`super::ElasticChain`]).
    Residual(Box<ResidualRoot>),
}

impl Stage for Root {
    type Item = Sample;

    fn epochs(&self) -> Option<u64> {
        match self {
            Self::Sampler(s) => s.epochs(),
            Self::Mix(m) => m.epochs(),
            Self::Residual(r) => r.epochs(),
        }
    }

    fn epoch_len(&self) -> u64 {
        match self {
            Self::Sampler(s) => s.epoch_len(),
            Self::Mix(m) => m.epoch_len(),
            Self::Residual(r) => r.epoch_len(),
        }
    }

    fn get(&mut self, epoch: u64, position: u64) -> Result<Sample> {
        match self {
            Self::Sampler(s) => s.get(epoch, position),
            Self::Mix(m) => m.get(epoch, position),
            Self::Residual(r) => r.get(epoch, position),
        }
    }

    fn get_strided(
        &mut self,
        epoch: u64,
        start: u64,
        step: u64,
        count: usize,
        out: &mut Vec<Sample>,
    ) -> Result<()> {
        match self {
            Self::Sampler(s) => s.get_strided(epoch, start, step, count, out),
            Self::Mix(m) => m.get_strided(epoch, start, step, count, out),
            Self::Residual(r) => r.get_strided(epoch, start, step, count, out),
        }
    }

    fn describe(&self, out: &mut String) {
        match self {
            Self::Sampler(s) => s.describe(out),
            Self::Mix(m) => m.describe(out),
            Self::Residual(r) => r.describe(out),
        }
    }
}

/// The residual of one epoch of a root stage as a stage of its own: every epoch of it is that
/// residual, and its items are the root's items (with the root's epoch and position).
#[derive(Debug, Clone)]
pub struct ResidualRoot {
    base: Root,
    epoch: u64,
    selection: Arc<Selection>,
}

impl ResidualRoot {
    pub(crate) fn new(base: Root, epoch: u64, selection: Arc<Selection>) -> Self {
        Self {
            base,
            epoch,
            selection,
        }
    }

    /// The root epoch this is the residual of.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }
}

impl Stage for ResidualRoot {
    type Item = Sample;

    fn epochs(&self) -> Option<u64> {
        None
    }

    fn epoch_len(&self) -> u64 {
        self.selection.len
    }

    fn get(&mut self, _epoch: u64, position: u64) -> Result<Sample> {
        let p = self
            .selection
            .lookup(position)
            .ok_or(Error::IndexOutOfRange {
                index: position,
                len: self.selection.len,
            })?;
        self.base.get(self.epoch, p)
    }

    fn describe(&self, out: &mut String) {
        self.base.describe(out);
        out.push_str(&format!(
            " | residual(epoch={}, len={})",
            self.epoch, self.selection.len
        ));
    }
}
