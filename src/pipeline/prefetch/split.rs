//! The work split of a [`super::Prefetch`]: which global items each worker runs, the checkpoint
//! of a fresh split, and a checkpoint checked and restored onto a split (rebased when the worker
//! count changed).

use super::super::stage::{Layout, Stage};
use super::super::state::{Position, PrefetchState, WorkerState};
use crate::{Error, Result};

/// The geometry of the work split.
#[derive(Debug, Clone)]
pub(crate) struct Split {
    num_workers: u64,
    base: u64,
    layout: Layout,
    total: Option<u64>,
}

impl Split {
    /// The split of `stage` over `num_workers` workers from its first item.
    pub(crate) fn of<St: Stage>(stage: &St, num_workers: u64) -> Self {
        let layout = Layout::of(stage);
        Self {
            num_workers,
            base: 0,
            total: layout.total(),
            layout,
        }
    }

    /// Global position of worker 0's first item.
    pub(crate) fn base(&self) -> u64 {
        self.base
    }

    /// Number of workers.
    pub(crate) fn num_workers(&self) -> u64 {
        self.num_workers
    }

    /// Global position of worker `w`'s `k`-th item, `None` past `u64`.
    pub(crate) fn global(&self, w: u64, k: u64) -> Option<u64> {
        k.checked_mul(self.num_workers)?
            .checked_add(w)?
            .checked_add(self.base)
    }

    /// Number of items of worker `w`, `None` if infinite.
    pub(crate) fn count(&self, w: u64) -> Option<u64> {
        let total = self.total?;
        let first = self.base.saturating_add(w);
        Some(if total > first {
            (total - first).div_ceil(self.num_workers)
        } else {
            0
        })
    }

    pub(super) fn position(&self, g: u64) -> Position {
        self.layout.position(g)
    }

    /// Worker `w`'s position after `consumed` items, `None` if it has none left.
    pub(super) fn next(&self, w: u64, consumed: u64) -> Option<Position> {
        if self.count(w).is_some_and(|c| consumed >= c) {
            return None;
        }
        self.global(w, consumed).map(|g| self.position(g))
    }
}

/// The checkpoint of a prefetch over `stage` with `num_workers` workers that consumed nothing.
pub(crate) fn fresh_state<St: Stage>(stage: &St, num_workers: usize) -> PrefetchState {
    let n = num_workers as u64;
    let split = Split::of(stage, n);
    PrefetchState {
        num_workers: n,
        base: 0,
        next_worker: 0,
        workers: (0..n)
            .map(|w| WorkerState {
                consumed: 0,
                next: split.next(w, 0),
            })
            .collect(),
    }
}

/// Checks `s` against the split and returns the per-worker consumed counts and the next worker,
/// rebasing the split when the worker count changed.
///
/// Every number in `s` comes from a checkpoint (JSON a user may have edited or damaged), so each
/// is bounded here, before any arithmetic: the worker list matches `num_workers` (at least 1) and
/// `next_worker` is one of them; no worker consumed more than it has; every worker that has items
/// left has a next global position that fits in a `u64` with its consumed count below
/// `u64::MAX`; and a rebased position is within the stage. Anything else is
/// [`Error::ResumeMismatch`].
pub(crate) fn restore(s: &PrefetchState, split: &mut Split) -> Result<(Vec<u64>, usize)> {
    let mismatch = |reason: String| Error::ResumeMismatch { reason };
    let n = split.num_workers;
    let total = split.total;
    if s.num_workers == 0
        || s.workers.len() as u64 != s.num_workers
        || s.next_worker >= s.num_workers
    {
        return Err(mismatch(format!(
            "malformed prefetch state: {} workers listed, next worker {}, for {} workers",
            s.workers.len(),
            s.next_worker,
            s.num_workers
        )));
    }
    if total.is_some_and(|t| s.base > t) {
        return Err(mismatch(format!(
            "the checkpoint's base is global position {}, past the stage's {} items",
            s.base,
            total.unwrap_or(0)
        )));
    }
    let consumed = if s.num_workers != n {
        let end = s.prefix_end().ok_or_else(|| {
            mismatch(format!(
                "the checkpoint was taken with {} workers and its consumed items are not a \
                 prefix of the global order (a best-effort merge, or a damaged checkpoint); \
                 resume it with {} workers, not {n}",
                s.num_workers, s.num_workers
            ))
        })?;
        if total.is_some_and(|t| end > t) {
            return Err(mismatch(format!(
                "the checkpoint is at global position {end}, past the stage's {} items",
                total.unwrap_or(0)
            )));
        }
        split.base = end;
        vec![0; usize::try_from(n).unwrap_or(0)]
    } else {
        split.base = s.base;
        for (w, ws) in s.workers.iter().enumerate() {
            let w = w as u64;
            if split.count(w).is_some_and(|c| ws.consumed > c) {
                return Err(mismatch(format!(
                    "worker {w} consumed {} items but has only {} in this configuration",
                    ws.consumed,
                    split.count(w).unwrap_or(0)
                )));
            }
            let expected = split.next(w, ws.consumed);
            if ws.next != expected {
                return Err(mismatch(format!(
                    "worker {w}: checkpoint says its next item is {:?}, this configuration puts \
                     it at {expected:?}",
                    ws.next
                )));
            }
        }
        s.workers.iter().map(|w| w.consumed).collect()
    };
    for (w, &k) in consumed.iter().enumerate() {
        let w = w as u64;
        let has_more = split.count(w).is_none_or(|c| k < c);
        if has_more && (k == u64::MAX || split.global(w, k).is_none()) {
            return Err(mismatch(format!(
                "worker {w}'s next item (item {k} from global position {}, every {n}) is past \
                 the last global position a u64 holds",
                split.base
            )));
        }
    }
    let next_worker = if s.num_workers == n {
        usize::try_from(s.next_worker).unwrap_or(0)
    } else {
        0
    };
    Ok((consumed, next_worker))
}
