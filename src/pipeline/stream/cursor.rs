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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use super::super::testing::{every_split, sampler};
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
