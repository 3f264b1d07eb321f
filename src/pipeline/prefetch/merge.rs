//! The consumer side of a [`Prefetch`]: the merge of the workers' queues (strict round-robin or
//! best effort with a bounded lead) and the checkpoint each consumed item leaves.

use std::task::{Context, Poll};

use super::{MergePolicy, Merged, Prefetch, Worker};
use crate::Error;

impl<T> Prefetch<T> {
    pub(super) fn merge_one(&mut self, cx: &mut Context<'_>) -> Poll<Option<Merged<T>>> {
        match self.policy {
            MergePolicy::Strict => self.merge_strict(cx),
            MergePolicy::BestEffort {
                max_lead,
                max_skips_per_round,
            } => self.merge_best_effort(cx, max_lead, max_skips_per_round),
        }
    }

    fn merge_strict(&mut self, cx: &mut Context<'_>) -> Poll<Option<Merged<T>>> {
        let n = self.workers.len();
        for _ in 0..n {
            let w = self.merge_next;
            let active = self.workers.get(w).is_some_and(Worker::active);
            if !active {
                self.merge_next = (w + 1) % n;
                continue;
            }
            return self.take(cx, w).map(Some);
        }
        Poll::Ready(None)
    }

    fn merge_best_effort(
        &mut self,
        cx: &mut Context<'_>,
        max_lead: u64,
        max_skips: u64,
    ) -> Poll<Option<Merged<T>>> {
        let n = self.workers.len();
        if !self.workers.iter().any(Worker::active) {
            return Poll::Ready(None);
        }
        let min = self.min_unconsumed().unwrap_or(0);
        let start = self.merge_next;
        scan_best_effort(
            self,
            n,
            start,
            (min, max_lead, max_skips),
            |p, w| {
                p.workers
                    .get(w)
                    .filter(|wk| wk.active())
                    .map(|wk| wk.merged)
            },
            |p, w| p.take(cx, w),
        )
        .map(Some)
    }

    /// The least consumed count of the live workers with items left to consume (merged or not);
    /// `None` if there is none.
    pub(super) fn min_unconsumed(&self) -> Option<u64> {
        self.workers
            .iter()
            .zip(&self.state.workers)
            .filter(|(w, ws)| !w.dead && ws.next.is_some())
            .map(|(_, ws)| ws.consumed)
            .min()
    }

    /// Polls worker `w`'s queue; on an item, advances the merge past it.
    fn take(&mut self, cx: &mut Context<'_>, w: usize) -> Poll<Merged<T>> {
        let n = self.workers.len();
        let Some(worker) = self.workers.get_mut(w) else {
            return Poll::Ready(Merged {
                worker: None,
                next_worker: self.merge_next,
                result: Err(died(w)),
            });
        };
        let polled = match &worker.rx {
            Some(rx) => rx.poll_pop(cx),
            // Closed by a stop: the merge does not run after it, but the queue ends here.
            None => Poll::Ready(None),
        };
        let merged = match polled {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Some((k, result))) => {
                debug_assert_eq!(k, worker.merged, "worker items arrive in order");
                // Below u64::MAX: a worker's items have global positions that fit in a u64, and
                // `restore` refuses a consumed count of u64::MAX for a worker with items left.
                worker.merged = worker.merged.saturating_add(1);
                Merged {
                    worker: Some((w, worker.merged)),
                    next_worker: (w + 1) % n,
                    result,
                }
            }
            Poll::Ready(None) => {
                worker.dead = true;
                Merged {
                    worker: None,
                    next_worker: (w + 1) % n,
                    result: Err(died(w)),
                }
            }
        };
        self.merge_next = merged.next_worker;
        Poll::Ready(merged)
    }

    /// Ends the stream after a failed item under [`OnError::Stop`]: nothing more is merged or
    /// returned, and closing the queues stops the workers. The checkpoint does not move.
    pub(super) fn stop(&mut self) {
        self.merge_done = true;
        // Dropped outside any lock: a batch's destructor may be arbitrary user code.
        let ready = std::mem::take(&mut self.ready);
        drop(ready);
        for w in &mut self.workers {
            w.rx = None;
        }
    }

    pub(super) fn consume(&mut self, m: &Merged<T>) {
        if let Some((w, consumed)) = m.worker {
            let next = self.split.next(w as u64, consumed);
            if let Some(ws) = self.state.workers.get_mut(w) {
                ws.consumed = consumed;
                ws.next = next;
            }
        }
        self.state.next_worker = m.next_worker as u64;
        if let Some(min) = self.min_unconsumed() {
            let max = self
                .workers
                .iter()
                .zip(&self.state.workers)
                .filter(|(w, _)| !w.dead)
                .map(|(_, ws)| ws.consumed)
                .max()
                .unwrap_or(min);
            self.max_observed_lead = self.max_observed_lead.max(max.saturating_sub(min));
        }
    }

    pub(super) fn remaining(&self) -> Option<u64> {
        if self.merge_done && self.workers.iter().all(|w| w.rx.is_none()) {
            return Some(self.ready.len() as u64);
        }
        let mut sum = self.ready.len() as u64;
        for w in &self.workers {
            let count = w.count?;
            sum = sum.saturating_add(count.saturating_sub(w.merged));
        }
        Some(sum)
    }
}

/// One scan of a best-effort merge, for the seekable [`Prefetch`] and the stream prefetch alike:
/// visits the `n` workers from `start` in turn and takes an item from the first one that has
/// one ready (`take(cx, w)`), but never from a worker that is not active (`merged(cx, w)` is
/// `None`: nothing left to take from it) or whose merged count is `max_lead` or more ahead of
/// `min`, the least consumed count of the workers with items left; after `max_skips + 1`
/// eligible workers found empty it stops and waits (`Pending`; every worker polled wakes the
/// task when its item arrives).
///
/// It bounds the consumed lead: consumed ≤ merged for every worker, so when worker w is merged
/// from, w's consumed count can reach at most min + max_lead, and that minimum only grows
/// (consumed counts only grow, and a worker leaves the set only once it has nothing left to
/// consume).
///
/// It cannot deadlock as long as the caller keeps this promise: whenever nothing merged waits
/// for the consumer, some worker with the least consumed count `min` is active (its item will
/// come). Then that worker has merged − min = 0 < max_lead: it is eligible; and every eligible
/// worker the scan polls is active, so it will push an item and wake the task. (The seekable
/// prefetch keeps it because every worker with items left is active; the stream prefetch
/// because it deals its jobs round-robin, so the worker of its oldest job in flight has the
/// least consumed count.)
pub(crate) fn scan_best_effort<C, R>(
    cx: &mut C,
    n: usize,
    start: usize,
    (min, max_lead, max_skips): (u64, u64, u64),
    merged: impl Fn(&C, usize) -> Option<u64>,
    mut take: impl FnMut(&mut C, usize) -> Poll<R>,
) -> Poll<R> {
    let mut skips = 0u64;
    for i in 0..n {
        let w = (start + i) % n;
        let Some(merged) = merged(cx, w) else {
            continue;
        };
        if merged.saturating_sub(min) >= max_lead {
            continue;
        }
        match take(cx, w) {
            Poll::Ready(r) => return Poll::Ready(r),
            Poll::Pending => {
                skips += 1;
                if skips > max_skips {
                    break;
                }
            }
        }
    }
    Poll::Pending
}

fn died(w: usize) -> Error {
    let _ = w;
    Error::WorkerGone {
        what: "a prefetch worker",
    }
}
