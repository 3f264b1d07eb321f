//! The bridge from the seekable chain: a [`Cursor`] over any [`Stage`] is a [`Checkpoint`]
//! stream whose state is its [`CursorState`].

use super::super::stage::{Cursor, CursorState, Stage};
use super::Checkpoint;
use crate::Result;

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
