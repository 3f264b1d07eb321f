//! The op log and the hand-off to the append tasks: full jobs go to their task's bounded queue
//! (backpressure), answers come back in any order, and the logged table ops are applied in call
//! order as their entries arrive, so the tables never depend on which task finishes first.

use super::task::{Done, Job, Msg};
use super::{task_gone, Writer};
use crate::error::{Error, Result};
use futures::channel::oneshot;
use futures::StreamExt;
use std::task::Poll;

/// A change to the offset tables, applied in call order once its values are placed.
#[derive(Clone, Copy, Debug)]
pub(super) enum Op {
    /// Record `index` takes the next entries of job `ticket`: one per field (`field: None`) or
    /// one for `field`.
    Set {
        index: u64,
        field: Option<usize>,
        ticket: u64,
    },
    /// Swap-remove of `index` while the last record is `last`.
    Delete { index: u64, last: u64 },
}

impl Writer {
    /// Moves the open job (if it has values) to the outbox and starts the next task's job.
    pub(super) fn close_open_job(&mut self) {
        if self.open.items.is_empty() {
            return;
        }
        let mut data = self.spare.pop().unwrap_or_default();
        data.clear();
        data.reserve(self.config.write_buffer_bytes + 64);
        let next = Job {
            ticket: self.next_ticket + 1,
            data,
            items: Vec::new(),
            dictionaries: Default::default(),
        };
        let mut job = std::mem::replace(&mut self.open, next);
        job.dictionaries = std::sync::Arc::clone(&self.dictionaries);
        self.outbox.push_back((self.open_task, job));
        self.next_ticket += 1;
        self.open_task = (self.open_task + 1) % self.tasks.len().max(1);
    }

    /// Records a task's answer: its entries wait for their ops; an error poisons the writer.
    fn on_done(&mut self, d: Done) -> Result<()> {
        self.in_flight = self.in_flight.saturating_sub(1);
        if self.spare.len() < self.tasks.len() * (self.config.queue_depth + 2) {
            self.spare.push(d.data);
        }
        let entries = self.poison_on(d.entries)?;
        self.answered.insert(d.ticket, entries.into_iter());
        Ok(())
    }

    /// Takes every answer already there, without waiting.
    fn take_ready_answers(&mut self) -> Result<()> {
        while let Ok(d) = self.done_rx.try_recv() {
            self.on_done(d)?;
        }
        Ok(())
    }

    /// Applies logged ops, in order, as far as their entries have arrived.
    pub(super) fn apply_ready(&mut self) -> Result<()> {
        let r = self.apply_ready_inner();
        self.poison_on(r)
    }

    fn apply_ready_inner(&mut self) -> Result<()> {
        match self.ops.front() {
            None => return Ok(()),
            // The common case while appending: the oldest op still waits for its job.
            Some(Op::Set { ticket, .. }) if !self.answered.contains_key(ticket) => return Ok(()),
            Some(_) => {}
        }
        let core = self.core.clone();
        let mut core = core.lock().unwrap_or_else(|e| e.into_inner());
        let nfields = self.field_metas.len();
        while let Some(&op) = self.ops.front() {
            match op {
                Op::Delete { index, last } => core.apply_delete(index, last)?,
                Op::Set {
                    index,
                    field,
                    ticket,
                } => {
                    let Some(entries) = self.answered.get_mut(&ticket) else {
                        break;
                    };
                    let mut next = || {
                        entries.next().ok_or_else(|| Error::InvalidConfig {
                            reason: format!("append job {ticket} answered too few entries"),
                        })
                    };
                    match field {
                        Some(f) => {
                            let e = next()?;
                            if let Some(wf) = core.fields.get_mut(f) {
                                wf.set(index, e);
                            }
                        }
                        None => {
                            for f in 0..nfields {
                                let e = next()?;
                                if let Some(wf) = core.fields.get_mut(f) {
                                    wf.set(index, e);
                                }
                            }
                        }
                    }
                    if entries.len() == 0 {
                        self.answered.remove(&ticket);
                    }
                }
            }
            self.ops.pop_front();
        }
        Ok(())
    }

    /// Hands outbox jobs to their tasks while their queues have room; `Pending` once one is
    /// full (the caller's waker is registered with that queue).
    fn poll_send_outbox(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Result<()>> {
        while let Some(&(task, _)) = self.outbox.front() {
            let Some(t) = self.tasks.get_mut(task) else {
                return Poll::Ready(Err(Error::InvalidConfig {
                    reason: format!("no append task {task}"),
                }));
            };
            match t.tx.poll_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(_)) => return Poll::Ready(Err(task_gone())),
                Poll::Ready(Ok(())) => {}
            }
            let Some((_, job)) = self.outbox.pop_front() else {
                break;
            };
            if t.tx.start_send(Msg::Job(job)).is_err() {
                return Poll::Ready(Err(task_gone()));
            }
            self.in_flight += 1;
        }
        Poll::Ready(Ok(()))
    }

    /// Waits (asynchronously) until every outbox job is handed to its task, taking answers as
    /// they come. Cancel safe: jobs not handed over stay in the outbox.
    pub(super) async fn send_outbox(&mut self) -> Result<()> {
        let r = futures::future::poll_fn(|cx| self.poll_send_outbox(cx)).await;
        let r = self.poison_on(r);
        r?;
        self.take_ready_answers()?;
        self.apply_ready()
    }

    /// Waits (asynchronously) for every job handed over to be answered and applies every op.
    /// Cancel safe: answers are recorded as they arrive.
    pub(super) async fn finish_jobs(&mut self) -> Result<()> {
        self.close_open_job();
        self.send_outbox().await?;
        while self.in_flight > 0 {
            match self.done_rx.next().await {
                Some(d) => self.on_done(d)?,
                None => return self.poison_on(Err(task_gone())),
            }
        }
        self.apply_ready()?;
        if !self.ops.is_empty() || !self.answered.is_empty() {
            let r = Err(Error::InvalidConfig {
                reason: "append tasks answered fewer or more values than were sent".to_string(),
            });
            return self.poison_on(r);
        }
        Ok(())
    }

    /// Sends `msg(reply)` to every task and waits for every reply.
    pub(super) async fn ask_tasks<T>(
        &mut self,
        msg: impl Fn(oneshot::Sender<Result<T>>) -> Msg,
    ) -> Result<Vec<T>> {
        let r = self.ask_tasks_inner(msg).await;
        self.poison_on(r)
    }

    async fn ask_tasks_inner<T>(
        &mut self,
        msg: impl Fn(oneshot::Sender<Result<T>>) -> Msg,
    ) -> Result<Vec<T>> {
        let mut replies = Vec::with_capacity(self.tasks.len());
        for t in &mut self.tasks {
            let (tx, rx) = oneshot::channel();
            futures::future::poll_fn(|cx| t.tx.poll_ready(cx))
                .await
                .map_err(|_| task_gone())?;
            t.tx.start_send(msg(tx)).map_err(|_| task_gone())?;
            replies.push(rx);
        }
        let mut out = Vec::with_capacity(replies.len());
        let mut first_err = None;
        for rx in replies {
            match rx.await {
                Ok(Ok(v)) => out.push(v),
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(_) => {
                    first_err.get_or_insert_with(task_gone);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }
}
