//! The [`Checkpoint`] trait: a [`Stream`] that reports and restores its position; a [`Cursor`]
//! over any seekable [`Stage`] is one.

use futures::stream::Stream;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::stage::{Cursor, CursorState, Stage};
use crate::Result;

/// A [`Stream`] that can say where it is and go back there: what every stage of the chain is
/// when its input is a stream (a [`Cursor`] over a seekable stage, or a stage of a user's own),
/// and what a user's own stage implements to sit inside a checkpointed chain.
///
/// # Contract
///
/// - [`Checkpoint::checkpoint`] is the position just after the last item the stream yielded
///   (`Ready(Some(_))`), whatever the stream has pulled from its input or buffered since.
/// - After [`Checkpoint::restore`]`(s)`, the next item the stream yields is the one that followed
///   when `s` was taken, and so on: a restored stream yields exactly what the original yielded
///   after the checkpoint. A state may be restored into another instance built the same way (a
///   new process, after the state went through serde).
/// - Determinism across a restore is the input's job: an adapter is exact when its input is.
///   An adapter over a source of items that changes between runs (a reshuffled file, a clock)
///   restores its own place faithfully but cannot make its input replay the same items.
/// - Items buffered when `restore` is called (a bucket's sorted buffer, batches in flight in a
///   prefetch) are dropped; what they stood for is produced again from the restored position.
///   An adapter whose state starts at a buffer (the bucket) pulls that buffer again from its
///   input on the next poll.
/// - `restore` only moves the stream: it does no I/O and never waits. It returns
///   [`crate::Error::ResumeMismatch`] for a state that does not fit the stream (taken over
///   another configuration, or damaged); the stream is then left as it was or at its start,
///   and should not be polled again.
/// - An `Err` item counts as an item for the position, except where an adapter documents
///   otherwise (the bucket and batch adapters keep the checkpoint at the start of the group an
///   error interrupted, so a restore tries that group again).
///
/// # Cancel safety
///
/// Polling is cancel safe: every item pulled from the input lives in the stream itself, not in
/// a future, so dropping a `next()` future before it completes loses nothing, and the
/// checkpoint stays that of the last item actually returned.
///
/// # Unpin
///
/// `restore` takes `&mut self`, so the adapters require `Unpin` inputs (every stream of this
/// crate is `Unpin`). A hand-written stage is `Unpin` unless it holds a `!Unpin` future; keep
/// such a future boxed (`Pin<Box<_>>`).
pub trait Checkpoint: Stream {
    /// The serialisable position of the stream. Adapters' states are small serde structs
    /// holding their input's state.
    type State: Clone + Serialize + DeserializeOwned + Send + 'static;

    /// The position just after the last item yielded.
    fn checkpoint(&self) -> Self::State;

    /// Moves the stream to `state`, dropping whatever it had buffered: the next item yielded
    /// is the one that followed when `state` was taken.
    ///
    /// # Errors
    /// [`crate::Error::ResumeMismatch`] if `state` does not fit this stream.
    fn restore(&mut self, state: Self::State) -> Result<()>;
}

impl<S: Checkpoint + Unpin + ?Sized> Checkpoint for Box<S> {
    type State = S::State;

    fn checkpoint(&self) -> Self::State {
        (**self).checkpoint()
    }

    fn restore(&mut self, state: Self::State) -> Result<()> {
        (**self).restore(state)
    }
}

/// A cursor's checkpoint is its [`CursorState`] (the next `(epoch, position)` and the stage's
/// configuration); restoring seeks in O(1) and refuses a state taken over another
/// configuration.
impl<S: Stage + Unpin> Checkpoint for Cursor<S> {
    type State = CursorState;

    fn checkpoint(&self) -> CursorState {
        self.state()
    }

    fn restore(&mut self, state: CursorState) -> Result<()> {
        self.seek(&state)
    }
}

#[cfg(test)]
pub(crate) mod testing {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
    //! Shared checks of the adapters' unit tests.

    use std::fmt::Debug;

    use futures::executor::block_on;
    use futures::StreamExt;

    use super::Checkpoint;
    use crate::pipeline::sampler::{Sampler, SamplerConfig, SamplerMode};
    use crate::Result;

    /// A shuffled sampler over `n` records, `epochs` epochs.
    pub(crate) fn sampler(n: u64, epochs: u64) -> Sampler {
        Sampler::new(
            n,
            SamplerConfig::default()
                .mode(SamplerMode::Shuffled)
                .seed(7)
                .epochs(Some(epochs)),
        )
        .unwrap()
    }

    /// Every item of `stream`, through `project`.
    pub(crate) fn all<C, T, X>(stream: C, project: impl Fn(T) -> X) -> Vec<X>
    where
        C: Checkpoint<Item = Result<T>> + Unpin,
    {
        block_on(stream.map(|r| project(r.unwrap())).collect())
    }

    /// A checkpoint after every item, through JSON, restored into a fresh stream, yields the
    /// rest of the uninterrupted run; returns that run.
    pub(crate) fn every_split<C, F, T, X>(make: F, project: impl Fn(T) -> X) -> Vec<X>
    where
        C: Checkpoint<Item = Result<T>> + Unpin,
        F: Fn() -> C,
        X: PartialEq + Debug,
    {
        let full = all(make(), &project);
        for k in 0..=full.len() {
            let mut s = make();
            for expected in &full[..k] {
                assert_eq!(&project(block_on(s.next()).unwrap().unwrap()), expected);
            }
            let json = serde_json::to_string(&s.checkpoint()).unwrap();
            // Restored into the stream that was read (dropping its buffers) and into a new one.
            let mut again = make();
            again.restore(serde_json::from_str(&json).unwrap()).unwrap();
            s.restore(serde_json::from_str(&json).unwrap()).unwrap();
            assert_eq!(
                all(again, &project)[..],
                full[k..],
                "fresh stream, split {k}"
            );
            assert_eq!(all(s, &project)[..], full[k..], "same stream, split {k}");
        }
        full
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use super::testing::{every_split, sampler};
    use super::*;
    use crate::Error;

    #[test]
    fn resumes_everywhere_and_refuses_another_configuration() {
        let got = every_split(|| sampler(6, 2).cursor(), |s| s);
        assert_eq!(got.len(), 12);
        let state = sampler(6, 2).cursor().checkpoint();
        let mut other = sampler(7, 2).cursor();
        assert!(matches!(
            other.restore(state),
            Err(Error::ResumeMismatch { .. })
        ));
    }
}
