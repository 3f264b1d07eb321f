//! [`StagedChain`]: a loader's user stage ([`super::LoaderBuilder::stage`]) over the cursor of
//! its index chain, its type erased so the builder stays one type: a checkpointable stream of
//! index batches whose state is a JSON value.

use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use futures::stream::Stream;
use serde_json::Value;

use super::batch::IndexBatch;
use super::checkpoint::Checkpoint;
use super::elastic::ElasticChain;
use super::stage::Cursor;
use crate::{Error, Result};

/// A user's stage as a loader runs it: any [`Checkpoint`] stream of index batches, its state
/// written as JSON.
trait ErasedStage: Send {
    fn poll_batch(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<IndexBatch>>>;

    fn state(&self) -> serde_json::Result<Value>;

    /// Restores a state [`ErasedStage::state`] wrote; a value that is not one is
    /// [`Error::ResumeMismatch`].
    fn restore_json(&mut self, state: Value) -> Result<()>;
}

impl<C> ErasedStage for C
where
    C: Checkpoint<Item = Result<IndexBatch>> + Send + Unpin,
{
    fn poll_batch(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<IndexBatch>>> {
        Pin::new(self).poll_next(cx)
    }

    fn state(&self) -> serde_json::Result<Value> {
        serde_json::to_value(self.checkpoint())
    }

    fn restore_json(&mut self, state: Value) -> Result<()> {
        let state = serde_json::from_value(state).map_err(|e| Error::ResumeMismatch {
            reason: format!("the checkpoint's state is not this stage's: {e}"),
        })?;
        self.restore(state)
    }
}

/// What builds the stage over the chain's cursor.
type Build = Arc<dyn Fn(Cursor<ElasticChain>) -> Box<dyn ErasedStage> + Send + Sync>;

/// A user stage as [`super::LoaderBuilder`] keeps it: its name and what builds it.
#[derive(Clone)]
pub(crate) struct UserStage {
    name: Arc<str>,
    build: Build,
}

impl fmt::Debug for UserStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserStage")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl UserStage {
    pub(crate) fn new<C, F>(name: String, f: F) -> Self
    where
        F: Fn(Cursor<ElasticChain>) -> C + Send + Sync + 'static,
        C: Checkpoint<Item = Result<IndexBatch>> + Send + Unpin + 'static,
    {
        let build: Build = Arc::new(move |cursor| Box::new(f(cursor)));
        Self {
            name: name.into(),
            build,
        }
    }

    /// The stage's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Appends the stage to a configuration description: ` | stage(name="…")`, the name
    /// quoted and escaped (Rust's `{:?}`), so any name parses back as one setting.
    pub(crate) fn describe(&self, out: &mut String) {
        out.push_str(&format!(" | stage(name={:?})", &*self.name));
    }

    /// The stage over `cursor`, at its start.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if the stage's state cannot be written as JSON.
    pub(crate) fn build(&self, cursor: Cursor<ElasticChain>) -> Result<StagedChain> {
        let stage = (self.build)(cursor);
        let state = stage.state().map_err(|e| unwritable(&self.name, &e))?;
        Ok(StagedChain {
            name: Arc::clone(&self.name),
            stage: Mutex::new(stage),
            state,
        })
    }
}

fn unwritable(name: &str, e: &serde_json::Error) -> Error {
    Error::InvalidConfig {
        reason: format!("user stage {name:?}: its state cannot be written as JSON: {e}"),
    }
}

/// A user stage over a loader's index chain, as the loader's stream prefetch pulls it: a
/// [`Checkpoint`] stream of index batches whose state is the stage's, as a JSON value.
pub(crate) struct StagedChain {
    name: Arc<str>,
    /// Behind a mutex only so that the chain is `Sync` (a user stage need only be `Send`): it
    /// is reached through `get_mut` alone, never locked.
    stage: Mutex<Box<dyn ErasedStage>>,
    /// The stage's state after the last batch it yielded.
    state: Value,
}

impl fmt::Debug for StagedChain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StagedChain")
            .field("name", &self.name)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl StagedChain {
    fn stage(&mut self) -> &mut dyn ErasedStage {
        // Never locked, so never poisoned; a poisoned mutex holds the stage all the same.
        &mut **self.stage.get_mut().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Stream for StagedChain {
    type Item = Result<IndexBatch>;

    /// The stage's next batch. Its state is written as JSON after every batch (the prefetch
    /// records it with the batch); a state that cannot be is an `Err` in the batch's place.
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let polled = this.stage().poll_batch(cx);
        if let Poll::Ready(Some(_)) = polled {
            match this.stage().state() {
                Ok(state) => this.state = state,
                Err(e) => return Poll::Ready(Some(Err(unwritable(&this.name, &e)))),
            }
        }
        polled
    }
}

impl Checkpoint for StagedChain {
    type State = Value;

    fn checkpoint(&self) -> Value {
        self.state.clone()
    }

    /// # Errors
    /// [`Error::ResumeMismatch`] naming the stage if `state` is not its state, or as the
    /// stage's own restore (its reason prefixed with the stage's name).
    fn restore(&mut self, state: Value) -> Result<()> {
        let name = Arc::clone(&self.name);
        let named = |reason: String| Error::ResumeMismatch {
            reason: format!("user stage {:?}: {reason}", &*name),
        };
        match self.stage().restore_json(state) {
            Ok(()) => {}
            Err(Error::ResumeMismatch { reason }) => return Err(named(reason)),
            Err(other) => return Err(other),
        }
        match self.stage().state() {
            Ok(state) => self.state = state,
            Err(e) => return Err(unwritable(&self.name, &e)),
        }
        Ok(())
    }
}
