//! The [`Checkpoint`] trait: a [`Stream`] that reports and restores its position.

use futures::stream::Stream;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::Result;

/// A [`Stream`] that can say where it is and go back there: the one trait every stage of the
/// stream chain implements, and the one a user's own stage implements to sit inside a
/// checkpointed chain.
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
