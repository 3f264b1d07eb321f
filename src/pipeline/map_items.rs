//! [`MapItems`]: a user function over every `Ok` item of a checkpointable stream.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::stream::{FusedStream, Stream};

use super::checkpoint::Checkpoint;
use crate::Result;

/// The stream of [`super::CheckpointExt::map_items`]: `f` applied to every `Ok` item, `Err`
/// items passed on. One output item per input item, so its state is its input's state.
///
/// `f` should be a pure function of the item: it is not part of the checkpoint, and items
/// after a restore go through it again.
#[must_use = "streams do nothing unless polled"]
pub struct MapItems<S, F> {
    input: S,
    f: F,
}

impl<S, F> MapItems<S, F> {
    pub(crate) fn new(input: S, f: F) -> Self {
        Self { input, f }
    }

    /// The input stream.
    pub fn get_ref(&self) -> &S {
        &self.input
    }
}

impl<S: fmt::Debug, F> fmt::Debug for MapItems<S, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MapItems")
            .field("input", &self.input)
            .finish_non_exhaustive()
    }
}

impl<S, F, T, U> Stream for MapItems<S, F>
where
    S: Stream<Item = Result<T>> + Unpin,
    F: FnMut(T) -> Result<U> + Unpin,
{
    type Item = Result<U>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<U>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.input).poll_next(cx) {
            Poll::Ready(Some(Ok(item))) => Poll::Ready(Some((this.f)(item))),
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.input.size_hint()
    }
}

impl<S, F, T, U> FusedStream for MapItems<S, F>
where
    S: FusedStream<Item = Result<T>> + Unpin,
    F: FnMut(T) -> Result<U> + Unpin,
{
    fn is_terminated(&self) -> bool {
        self.input.is_terminated()
    }
}

impl<S, F, T, U> Checkpoint for MapItems<S, F>
where
    S: Checkpoint<Item = Result<T>> + Unpin,
    F: FnMut(T) -> Result<U> + Unpin,
{
    type State = S::State;

    fn checkpoint(&self) -> S::State {
        self.input.checkpoint()
    }

    fn restore(&mut self, state: S::State) -> Result<()> {
        self.input.restore(state)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use super::super::checkpoint::testing::{every_split, sampler};
    use super::super::checkpoint_ext::CheckpointExt;
    use crate::pipeline::Stage;

    #[test]
    fn maps_every_item_and_resumes_everywhere() {
        let got = every_split(
            || sampler(9, 2).cursor().map_items(|s| Ok(s.index * 10)),
            |x| x,
        );
        assert_eq!(got.len(), 18);
        assert!(got.iter().all(|x| x % 10 == 0));
    }
}
