//! [`Root`]: the first stage of a loader's index chain, a [`Sampler`] over one index space or a
//! [`Mix`] of several parts.

use super::mix::Mix;
use super::sampler::Sampler;
use super::stage::{Sample, Stage};
use crate::Result;

/// The root stage of a [`super::IndexChain`]: what [`super::LoaderBuilder::mix`] switches.
#[derive(Debug, Clone)]
pub enum Root {
    /// One sampler over the whole source.
    Sampler(Sampler),
    /// A weighted mix over the source's parts ([`super::Source::part_lens`]).
    Mix(Mix),
}

impl Stage for Root {
    type Item = Sample;

    fn epochs(&self) -> Option<u64> {
        match self {
            Self::Sampler(s) => s.epochs(),
            Self::Mix(m) => m.epochs(),
        }
    }

    fn epoch_len(&self) -> u64 {
        match self {
            Self::Sampler(s) => s.epoch_len(),
            Self::Mix(m) => m.epoch_len(),
        }
    }

    fn get(&mut self, epoch: u64, position: u64) -> Result<Sample> {
        match self {
            Self::Sampler(s) => s.get(epoch, position),
            Self::Mix(m) => m.get(epoch, position),
        }
    }

    fn describe(&self, out: &mut String) {
        match self {
            Self::Sampler(s) => s.describe(out),
            Self::Mix(m) => m.describe(out),
        }
    }
}
