//! [`FilterItems`]: keeps the `Ok` items of a checkpointable stream that a user predicate
//! accepts.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::stream::{FusedStream, Stream};

use super::checkpoint::Checkpoint;
use crate::Result;

/// The stream of [`super::CheckpointExt::filter_items`]: the `Ok` items for which `f` returns
/// true, and every `Err` item. Items are only dropped, never held, so its state is its input's
/// state: after the last item yielded, the input is either there or past items `f` rejected,
/// which a restore would reject again.
///
/// `f` should be a pure function of the item: it is not part of the checkpoint.
#[must_use = "streams do nothing unless polled"]
pub struct FilterItems<S, F> {
    input: S,
    f: F,
}

impl<S, F> FilterItems<S, F> {
    pub(crate) fn new(input: S, f: F) -> Self {
        Self { input, f }
    }

    /// The input stream.
    pub fn get_ref(&self) -> &S {
        &self.input
    }
}

impl<S: fmt::Debug, F> fmt::Debug for FilterItems<S, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FilterItems")
            .field("input", &self.input)
            .finish_non_exhaustive()
    }
}

impl<S, F, T> Stream for FilterItems<S, F>
where
    S: Stream<Item = Result<T>> + Unpin,
    F: FnMut(&T) -> bool + Unpin,
{
    type Item = Result<T>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<T>>> {
        let this = self.get_mut();
        loop {
            match Pin::new(&mut this.input).poll_next(cx) {
                Poll::Ready(Some(Ok(item))) => {
                    if (this.f)(&item) {
                        return Poll::Ready(Some(Ok(item)));
                    }
                }
                other => return other,
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, self.input.size_hint().1)
    }
}

impl<S, F, T> FusedStream for FilterItems<S, F>
where
    S: FusedStream<Item = Result<T>> + Unpin,
    F: FnMut(&T) -> bool + Unpin,
{
    fn is_terminated(&self) -> bool {
        self.input.is_terminated()
    }
}

impl<S, F, T> Checkpoint for FilterItems<S, F>
where
    S: Checkpoint<Item = Result<T>> + Unpin,
    F: FnMut(&T) -> bool + Unpin,
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
    fn keeps_what_the_predicate_accepts_and_resumes_everywhere() {
        let got = every_split(
            || sampler(12, 2).cursor().filter_items(|s| s.index % 3 != 0),
            |s| s.index,
        );
        assert_eq!(got.len(), 16);
        assert!(got.iter().all(|i| i % 3 != 0));
    }
}
