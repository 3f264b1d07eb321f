//! The index side of a [`super::Prefetch`] over a seekable stage: worker `w` of `N` runs the global
//! items `base + w + k·N` on its own ([`OwnShare`]), so the strict merge is a round-robin over
//! the workers and the checkpoint is each worker's consumed count ([`PrefetchState`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Context;

use futures::channel::oneshot;

use super::super::batch::IndexBatch;
use super::super::queue;
use super::super::source::Source;
use super::super::stage::Stage;
use super::super::state::{PrefetchState, WorkerState};
use super::super::stats::Counters;
use super::consumer::{Core, Counts, IndexSide, Merged, Next, Queue};
use super::worker::OwnShare;
use super::{restore, PrefetchConfig, Split, Transform, WorkerLoop, WorkerName};
use crate::{Error, Result};

/// Lookahead sessions of the seekable prefetches (the stream prefetches have a range of their
/// own).
static SESSIONS: AtomicU64 = AtomicU64::new(1);

/// The seekable index side's bookkeeping.
pub struct Shares {
    split: Split,
    /// Per worker: its queue ended before its items did.
    dead: Vec<bool>,
    /// The strict merge's next worker (and where the best-effort scan starts).
    merge_next: usize,
    /// The checkpoint after the last consumed item.
    pub(super) state: PrefetchState,
    /// Ends the source's lookahead session (once).
    end_lookahead: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl Shares {
    /// Starts the workers over `stage` at `resume` (or its first item): the side, and the
    /// consumer's core with the workers' queues.
    pub(super) fn start<St, Src, T>(
        stage: St,
        source: Arc<Src>,
        transform: Transform<Src::Batch, T>,
        config: PrefetchConfig,
        resume: Option<&PrefetchState>,
    ) -> Result<(Self, Core<T>)>
    where
        St: Stage<Item = IndexBatch>,
        Src: Source,
        T: Send + 'static,
    {
        config.validate()?;
        let n = config.num_workers as u64;
        let mut split = Split::of(&stage, n);
        let (consumed, next_worker) = match resume {
            None => (vec![0; config.num_workers], 0),
            Some(s) => restore(s, &mut split)?,
        };
        let session = SESSIONS.fetch_add(1, Ordering::Relaxed);
        let ender = Arc::clone(&source);
        let end_lookahead: Box<dyn FnOnce() + Send + Sync> =
            Box::new(move || ender.end_lookahead(session));
        let counters = Arc::new(Counters::default());
        let counts = consumed
            .iter()
            .map(|&c| Counts {
                merged: c,
                consumed: c,
            })
            .collect();
        let mut core = Core::new(
            config.merge,
            config.on_error,
            config.consumer_queue_size,
            counts,
            Arc::clone(&counters),
        );
        for (w, &start_k) in consumed.iter().enumerate() {
            let (tx, rx) = queue::bounded(config.worker_queue_size);
            let (exit_tx, exit_rx) = oneshot::channel();
            let jobs = OwnShare {
                stage: stage.clone(),
                source: Arc::clone(&source),
                counters: Arc::clone(&counters),
                lookahead: config.lookahead as u64,
                session,
                ahead: VecDeque::new(),
                split: split.clone(),
                w: w as u64,
                k: start_k,
                issue: Some(start_k),
            };
            let worker = WorkerLoop {
                jobs,
                name: WorkerName {
                    what: "prefetch worker",
                    w: w as u64,
                },
                source: Arc::clone(&source),
                transform: Arc::clone(&transform),
                retry: config.retry,
                gathers_in_flight: config.gathers_in_flight,
                tx,
                exit: exit_tx,
                counters: Arc::clone(&counters),
            };
            worker.spawn(format!("zrecord-prefetch-{w}"), "a prefetch worker")?;
            core.queues.push(Queue {
                rx,
                exit: Some(exit_rx),
                jobs: None,
            });
        }
        let state = PrefetchState {
            num_workers: n,
            base: split.base(),
            next_worker: next_worker as u64,
            workers: consumed
                .iter()
                .enumerate()
                .map(|(w, &c)| WorkerState {
                    consumed: c,
                    next: split.next(w as u64, c),
                })
                .collect(),
        };
        let side = Self {
            dead: vec![false; config.num_workers],
            split,
            merge_next: next_worker,
            state,
            end_lookahead: Some(end_lookahead),
        };
        Ok((side, core))
    }

    /// Whether worker `w` is alive with `done` of its items behind it and more to come.
    fn has_more(&self, w: usize, done: u64) -> bool {
        !self.dead.get(w).copied().unwrap_or(true)
            && self.split.count(w as u64).is_none_or(|c| done < c)
    }

    fn num_workers(&self) -> usize {
        self.dead.len()
    }
}

impl Drop for Shares {
    fn drop(&mut self) {
        if let Some(end) = self.end_lookahead.take() {
            end();
        }
    }
}

impl IndexSide<()> for Shares {
    fn dispatch<T>(&mut self, _: &mut (), _: &mut Core<T>, _: &mut Context<'_>) -> Result<()> {
        Ok(())
    }

    /// Strict: round-robin in worker order from the next worker, the workers with nothing left
    /// skipped; the merged order is then exactly the global order.
    fn next<T>(&mut self, counts: &[Counts], strict: bool) -> Next<T> {
        let n = self.num_workers();
        let active = |w: usize| self.active(counts, w);
        if !strict {
            return if (0..n).any(active) {
                Next::Scan
            } else {
                Next::End
            };
        }
        for _ in 0..n {
            let w = self.merge_next;
            if self.active(counts, w) {
                return Next::Take(w);
            }
            self.merge_next = (w + 1) % n;
        }
        Next::End
    }

    fn scan_start(&self) -> usize {
        self.merge_next
    }

    fn active(&self, counts: &[Counts], w: usize) -> bool {
        counts.get(w).is_some_and(|c| self.has_more(w, c.merged))
    }

    fn min_unconsumed(&self, counts: &[Counts]) -> Option<u64> {
        counts
            .iter()
            .enumerate()
            .filter(|(w, c)| self.has_more(*w, c.consumed))
            .map(|(_, c)| c.consumed)
            .min()
    }

    /// A worker's results are its items in order: the next is its merged count.
    fn expected(&self, counts: &[Counts], w: usize) -> Option<u64> {
        counts.get(w).map(|c| c.merged)
    }

    /// The mark is the merge's next worker after this item, for the checkpoint.
    fn merged(&mut self, w: usize, _: u64) -> u64 {
        self.merge_next = (w + 1) % self.num_workers().max(1);
        self.merge_next as u64
    }

    /// A worker that exited before its items did (it panicked outside a gather, or its item
    /// numbers ran out): its items are not run; the merge goes on with the others.
    fn closed<T>(&mut self, w: usize) -> Merged<T> {
        if let Some(dead) = self.dead.get_mut(w) {
            *dead = true;
        }
        self.merge_next = (w + 1) % self.num_workers().max(1);
        Merged {
            worker: None,
            mark: self.merge_next as u64,
            result: Err(Error::WorkerGone {
                what: "a prefetch worker",
            }),
        }
    }

    fn consumed(&mut self, counts: &[Counts], worker: Option<usize>, mark: u64) {
        if let Some(w) = worker {
            let consumed = counts.get(w).map_or(0, |c| c.consumed);
            let next = self.split.next(w as u64, consumed);
            if let Some(ws) = self.state.workers.get_mut(w) {
                ws.consumed = consumed;
                ws.next = next;
            }
        }
        self.state.next_worker = mark;
    }

    fn stop(&mut self) {
        if let Some(end) = self.end_lookahead.take() {
            end();
        }
    }

    /// Exact over a finite stage; endless (`u64::MAX`, no upper bound) over an endless one.
    fn size_hint(&self, counts: &[Counts]) -> (u64, Option<u64>) {
        let mut sum = 0u64;
        for (w, c) in counts.iter().enumerate() {
            if self.dead.get(w).copied().unwrap_or(true) {
                continue;
            }
            let Some(count) = self.split.count(w as u64) else {
                return (u64::MAX, None);
            };
            sum = sum.saturating_add(count.saturating_sub(c.merged));
        }
        (sum, Some(sum))
    }
}
