//! The index side of a [`super::Prefetch`] over a stream: the consumer pulls the input's batches (cheap
//! to compute) and deals them to the workers in turn; the checkpoint is the input's state after
//! the consumed prefix, plus the batches consumed ahead of it ([`PrefetchStreamState`]).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use serde::{Deserialize, Serialize};

use super::super::batch::IndexBatch;
use super::super::checkpoint::Checkpoint;
use super::super::source::Source;
use super::consumer::{Core, Counts, IndexSide, Merged, Next};
use super::PrefetchConfig;
use crate::{Error, Result};

/// The checkpoint of a [`super::Prefetch`] over a stream (see
/// [`crate::pipeline::CheckpointExt::prefetch`]).
///
/// Checkpoints written before `consumed_ahead` existed (strict merge only) have the same JSON
/// as a checkpoint with nothing consumed ahead, and load as one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefetchStreamState<St> {
    /// The input's state just after the last batch of the consumed prefix was pulled: every
    /// batch up to it was consumed, the next one was not.
    pub input: St,
    /// The batches after `input` that were consumed already (only a best-effort merge consumes
    /// out of order): their numbers among the batches the input yields from `input` on, 0 the
    /// first, in strictly increasing order. A resumed stream pulls them from its input and
    /// skips them. Usually the first batch is the oldest not consumed and is not listed; a
    /// resumed stream that has not pulled its skipped batches yet may list it. Empty (and not
    /// written) under the strict merge.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consumed_ahead: Vec<u64>,
}

/// [`Source::lookahead`] (`Some(indices)`) and [`Source::end_lookahead`] (`None`) of the source.
type Announce = Arc<dyn Fn(u64, Option<&[u64]>) + Send + Sync>;

/// Lookahead sessions of the stream prefetches (a range of their own, apart from the seekable
/// prefetch's).
static SESSIONS: AtomicU64 = AtomicU64::new(1 << 63);

/// A batch pulled from the input and not yet part of the consumed prefix.
struct InFlight<St> {
    seq: u64,
    /// The worker gathering it; `None` for an error of the input (in `error`), or a batch
    /// skipped because a restored checkpoint had consumed it already.
    worker: Option<usize>,
    error: Option<Error>,
    /// Its result was merged (it waits for the consumer, or was consumed).
    merged: bool,
    /// Consumed (out of order, or skipped): it leaves with the prefix.
    consumed: bool,
    /// The input's state just after the batch was pulled.
    state: St,
}

/// The stream index side's bookkeeping.
pub struct Dealer<St> {
    input_done: bool,
    /// Announces a batch to the source (`Some(indices)`) or ends the session (`None`); `None`
    /// without lookahead.
    announce: Option<Announce>,
    session: u64,
    /// False once `session` is ended (by a stop, a restore or the drop): it is ended once.
    session_open: bool,
    num_workers: usize,
    /// Batches pulled and not out of the consumed prefix, at most.
    capacity: usize,
    next_worker: usize,
    /// Per worker since its start: batches dealt to it.
    dealt: Vec<u64>,
    /// Per worker: its queue ended (it died); it is dealt nothing more, and the merge's lead
    /// no longer waits for it.
    dead: Vec<bool>,
    /// The worker the best-effort scan visits first.
    merge_next: usize,
    in_flight: VecDeque<InFlight<St>>,
    next_seq: u64,
    /// Sequence numbers not pulled yet that a restored checkpoint had consumed, increasing.
    skip: VecDeque<u64>,
    consumed: St,
}

fn gone() -> Error {
    Error::WorkerGone {
        what: "a stream prefetch worker",
    }
}

impl<St> Dealer<St> {
    /// The side over an input at `consumed` (its workers start at the first poll).
    pub(super) fn new<Src: Source>(
        consumed: St,
        source: &Arc<Src>,
        config: &PrefetchConfig,
    ) -> Self {
        let announce: Option<Announce> = (config.lookahead > 0).then(|| {
            let source = Arc::clone(source);
            let announce: Announce =
                Arc::new(move |session: u64, indices: Option<&[u64]>| match indices {
                    Some(indices) => source.lookahead(session, indices),
                    None => source.end_lookahead(session),
                });
            announce
        });
        // Each worker: its queue, plus the gathers of its window beyond the one a blocking
        // worker has; and the consumer's buffer.
        let per_worker = config
            .worker_queue_size
            .saturating_add(config.gathers_in_flight.saturating_sub(1));
        Self {
            input_done: false,
            announce,
            session: SESSIONS.fetch_add(1, Ordering::Relaxed),
            session_open: true,
            num_workers: config.num_workers,
            capacity: config
                .num_workers
                .saturating_mul(per_worker)
                .saturating_add(config.consumer_queue_size),
            next_worker: 0,
            dealt: vec![0; config.num_workers],
            dead: vec![false; config.num_workers],
            merge_next: 0,
            in_flight: VecDeque::new(),
            next_seq: 0,
            skip: VecDeque::new(),
            consumed,
        }
    }

    /// Drops whatever the source started for the batches announced and not gathered.
    fn end_session(&mut self) {
        if !std::mem::replace(&mut self.session_open, false) {
            return;
        }
        if let Some(announce) = &self.announce {
            announce(self.session, None);
        }
    }

    /// Moves the consumed prefix past the consumed batches at the front.
    fn advance(&mut self) {
        while self.in_flight.front().is_some_and(|b| b.consumed) {
            if let Some(done) = self.in_flight.pop_front() {
                self.consumed = done.state;
            }
        }
    }

    /// The checkpoint after the consumed prefix.
    pub(super) fn checkpoint(&self) -> PrefetchStreamState<St>
    where
        St: Clone,
    {
        // The prefix ends before the first batch not consumed: the front, after `advance`.
        let base = self.in_flight.front().map_or(self.next_seq, |b| b.seq);
        let consumed_ahead = self
            .in_flight
            .iter()
            .filter(|b| b.consumed)
            .map(|b| b.seq)
            .chain(self.skip.iter().copied())
            .map(|seq| seq.wrapping_sub(base))
            .collect();
        PrefetchStreamState {
            input: self.consumed.clone(),
            consumed_ahead,
        }
    }

    /// Checks `state` before the input is restored.
    pub(super) fn check(state: &PrefetchStreamState<St>) -> Result<()> {
        let increasing = state
            .consumed_ahead
            .windows(2)
            .all(|w| w.first() < w.get(1));
        if increasing {
            return Ok(());
        }
        Err(Error::ResumeMismatch {
            reason: format!(
                "malformed stream prefetch state: consumed_ahead must strictly increase, not {:?}",
                state.consumed_ahead
            ),
        })
    }

    /// Starts over at `state` (the input restored to it already), with nothing in flight: a
    /// new lookahead session, the workers started again at the next poll.
    pub(super) fn restart(&mut self, state: PrefetchStreamState<St>) {
        self.end_session();
        self.session = SESSIONS.fetch_add(1, Ordering::Relaxed);
        self.session_open = true;
        self.in_flight.clear();
        self.next_worker = 0;
        self.merge_next = 0;
        self.dealt = vec![0; self.num_workers];
        self.dead = vec![false; self.num_workers];
        self.next_seq = 0;
        self.skip = state.consumed_ahead.into();
        self.input_done = false;
        self.consumed = state.input;
    }

    /// The next worker to deal to: round-robin over the workers not dead (the next one in turn
    /// if all are, whose send then fails).
    fn next_alive(&mut self) -> usize {
        let n = self.num_workers.max(1);
        let mut w = self.next_worker % n;
        for _ in 0..n {
            if !self.dead.get(w).copied().unwrap_or(false) {
                break;
            }
            w = (w + 1) % n;
        }
        self.next_worker = (w + 1) % n;
        w
    }

    /// The place of worker `w`'s oldest batch not merged yet.
    fn oldest_of(&self, w: usize) -> Option<usize> {
        self.in_flight
            .iter()
            .position(|b| b.worker == Some(w) && !b.merged)
    }

    fn at_seq(&mut self, seq: u64) -> Option<&mut InFlight<St>> {
        let front = self.in_flight.front()?.seq;
        let at = usize::try_from(seq.wrapping_sub(front)).ok()?;
        self.in_flight.get_mut(at).filter(|b| b.seq == seq)
    }
}

impl<St> Drop for Dealer<St> {
    fn drop(&mut self) {
        self.end_session();
    }
}

impl<S> IndexSide<S> for Dealer<S::State>
where
    S: Checkpoint<Item = Result<IndexBatch>> + Unpin,
{
    /// Pulls input batches and deals them to the workers while there is room.
    fn dispatch<T>(
        &mut self,
        input: &mut S,
        core: &mut Core<T>,
        cx: &mut Context<'_>,
    ) -> Result<()> {
        if core.queues.is_empty() {
            if let Some(spawn) = core.spawn.clone() {
                for w in 0..self.num_workers {
                    core.queues.push(spawn(w)?);
                }
            }
        }
        while !self.input_done && self.in_flight.len() < self.capacity {
            let polled = match Pin::new(&mut *input).poll_next(cx) {
                Poll::Pending => break,
                Poll::Ready(None) => {
                    self.input_done = true;
                    break;
                }
                Poll::Ready(Some(polled)) => polled,
            };
            let seq = self.next_seq;
            let skipped = self.skip.front() == Some(&seq);
            if skipped {
                self.skip.pop_front();
            }
            let (worker, error) = match polled {
                // Consumed before the checkpoint this stream was restored from.
                _ if skipped => (None, None),
                Err(e) => (None, Some(e)),
                Ok(batch) => {
                    if let Some(announce) = &self.announce {
                        announce(self.session, Some(&batch.indices()));
                    }
                    let w = self.next_alive();
                    let sent = core
                        .queues
                        .get(w)
                        .and_then(|q| q.jobs.as_ref())
                        .is_some_and(|jobs| jobs.unbounded_send((seq, batch)).is_ok());
                    if !sent {
                        if let Some(dead) = self.dead.get_mut(w) {
                            *dead = true;
                        }
                    }
                    if sent {
                        if let Some(d) = self.dealt.get_mut(w) {
                            *d = d.saturating_add(1);
                        }
                        (Some(w), None)
                    } else {
                        (None, Some(gone()))
                    }
                }
            };
            self.in_flight.push_back(InFlight {
                seq,
                worker,
                error,
                merged: skipped,
                consumed: skipped,
                state: input.checkpoint(),
            });
            self.next_seq = self.next_seq.wrapping_add(1);
            // A batch consumed before the checkpoint this stream was restored from leaves at
            // once when it is the oldest: skipped batches never fill the room (a resume with
            // less room than the run that wrote the checkpoint would pull only them, then wait
            // for nothing).
            self.advance();
        }
        self.advance();
        Ok(())
    }

    /// The oldest batch not merged: an input error in its place is merged as it is; otherwise
    /// the strict merge takes its worker's result (results are merged in input order), the
    /// best-effort merge scans.
    fn next<T>(&mut self, _: &[Counts], strict: bool) -> Next<T> {
        let Some(oldest) = self.in_flight.iter_mut().find(|b| !b.merged) else {
            return if self.input_done {
                Next::End
            } else {
                // The input was polled and wakes the task when it has a batch.
                Next::Wait
            };
        };
        match oldest.worker {
            None => {
                oldest.merged = true;
                Next::Fail(Merged {
                    worker: None,
                    mark: oldest.seq,
                    result: Err(oldest.error.take().unwrap_or_else(gone)),
                })
            }
            Some(w) if strict => Next::Take(w),
            Some(_) => Next::Scan,
        }
    }

    fn scan_start(&self) -> usize {
        self.merge_next % self.num_workers.max(1)
    }

    fn active(&self, counts: &[Counts], w: usize) -> bool {
        let dealt = self.dealt.get(w).copied().unwrap_or(0);
        counts.get(w).is_some_and(|c| dealt > c.merged)
    }

    /// Of the workers with batches dealt and not consumed, or (while the input goes on and
    /// the worker lives) still to be dealt.
    fn min_unconsumed(&self, counts: &[Counts]) -> Option<u64> {
        counts
            .iter()
            .zip(&self.dealt)
            .zip(&self.dead)
            .filter(|((c, &dealt), &dead)| dealt > c.consumed || (!self.input_done && !dead))
            .map(|((c, _), _)| c.consumed)
            .min()
    }

    fn expected(&self, _: &[Counts], w: usize) -> Option<u64> {
        self.oldest_of(w)
            .and_then(|at| self.in_flight.get(at))
            .map(|b| b.seq)
    }

    fn merged(&mut self, w: usize, tag: u64) -> u64 {
        self.merge_next = w.wrapping_add(1);
        if let Some(b) = self.at_seq(tag) {
            b.merged = true;
        }
        tag
    }

    /// A worker gone before its batches: its oldest batch fails in its place.
    fn closed<T>(&mut self, w: usize) -> Merged<T> {
        self.merge_next = w.wrapping_add(1);
        if let Some(dead) = self.dead.get_mut(w) {
            *dead = true;
        }
        let oldest = self.oldest_of(w).and_then(|at| self.in_flight.get_mut(at));
        let (worker, mark) = match oldest {
            Some(b) => {
                b.merged = true;
                (Some(w), b.seq)
            }
            None => (None, u64::MAX),
        };
        Merged {
            worker,
            mark,
            result: Err(gone()),
        }
    }

    fn consumed(&mut self, _: &[Counts], _: Option<usize>, mark: u64) {
        if let Some(b) = self.at_seq(mark) {
            b.consumed = true;
        }
        self.advance();
    }

    fn stop(&mut self) {
        self.end_session();
    }

    /// Unknown: the input's length is.
    fn size_hint(&self, _: &[Counts]) -> (u64, Option<u64>) {
        (0, None)
    }
}

#[cfg(test)]
mod tests;
