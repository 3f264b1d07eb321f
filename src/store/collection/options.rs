//! What a commit takes and reports: [`CommitOptions`] (a callback per [`CommitStep`]) and
//! [`CommitReport`], shared by the local committer and the object-store one.

use std::fmt;
use std::sync::Arc;

/// Where a commit is: [`CommitOptions::on_step`] is told after each step (for progress, and for
/// tests that kill a committer between steps).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommitStep {
    /// Every given part was read and checked; nothing moved yet.
    PartsChecked,
    /// Given part number `index` is under `parts/` (moved, or already there), durably.
    PartPlaced {
        /// Its position in the parts given to [`commit`](crate::collection::commit).
        index: usize,
    },
    /// The next manifest is written and fsynced under a temporary name: not visible yet.
    ManifestWritten,
    /// The next manifest is visible under its number (its directory not fsynced yet).
    ManifestLinked,
}

/// Options of [`commit`](crate::collection::commit) and `commit_url`. `Default`: no step
/// callback.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct CommitOptions {
    /// Called after each [`CommitStep`], on the committing thread. Default: none.
    pub on_step: Option<Arc<dyn Fn(CommitStep) + Send + Sync>>,
}

impl CommitOptions {
    /// The default options.
    pub fn new() -> CommitOptions {
        CommitOptions::default()
    }

    /// Calls `f` after each step of the commit.
    pub fn on_step(mut self, f: impl Fn(CommitStep) + Send + Sync + 'static) -> CommitOptions {
        self.on_step = Some(Arc::new(f));
        self
    }
}

impl fmt::Debug for CommitOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommitOptions")
            .field("on_step", &self.on_step.as_ref().map(|_| "Fn(CommitStep)"))
            .finish()
    }
}

/// What [`commit`](crate::collection::commit) (or `commit_url`) did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CommitReport {
    /// The number of the manifest that holds the parts now (the collection's generation).
    pub number: u64,
    /// The ids of the given parts, in the order given (a part moved under another id because
    /// its name was taken has its new id here).
    pub ids: Vec<String>,
    /// The ids this commit added; empty if every part was already in the collection (a retried
    /// commit), and then no manifest was created.
    pub added: Vec<String>,
    /// Parts in the collection now.
    pub parts: usize,
    /// Records in the collection now.
    pub len: u64,
    /// Manifests this commit tried to create (more than one when other committers won).
    pub attempts: u32,
}

/// Calls `options`' step callback, if any.
pub(crate) fn stepper(options: &CommitOptions) -> impl Fn(CommitStep) + '_ {
    move |s| {
        if let Some(f) = &options.on_step {
            f(s);
        }
    }
}
