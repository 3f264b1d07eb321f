//! A [`super::PrefetchStream`] worker thread: takes the batches the consumer deals it, gathers
//! them (one at a time with the seekable prefetch's [`Producer`], or several in flight in its
//! [`Window`]), transforms, retries, and pushes the results into its bounded queue in its jobs'
//! order.

use std::sync::Arc;
use std::task::{Context, Poll};

use futures::channel::{mpsc, oneshot};
use futures::stream::StreamExt;

use super::super::super::batch::IndexBatch;
use super::super::super::queue::{self, Receiver, Sender};
use super::super::super::source::Source;
use super::super::super::state::Position;
use super::super::super::stats::Counters;
use super::super::{deliver, Done, PrefetchConfig, Producer, Transform, Window, WorkerName};
use crate::{Error, Result};

/// A job: the batch with its sequence number.
pub(super) type Job = (u64, IndexBatch);

/// One worker thread's ends.
pub(super) struct Worker<T> {
    pub(super) jobs: mpsc::UnboundedSender<Job>,
    pub(super) results: Receiver<Done<T>>,
    pub(super) exit: Option<oneshot::Receiver<()>>,
}

pub(super) fn gone() -> Error {
    Error::WorkerGone {
        what: "a stream prefetch worker",
    }
}

pub(super) fn spawn_worker<Src: Source, T: Send + 'static>(
    w: usize,
    source: Arc<Src>,
    transform: Transform<Src::Batch, T>,
    config: PrefetchConfig,
    counters: Arc<Counters>,
) -> Result<Worker<T>> {
    let (jobs_tx, mut jobs) = mpsc::unbounded::<Job>();
    let (tx, rx) = queue::bounded(config.worker_queue_size);
    let (exit_tx, exit_rx) = oneshot::channel::<()>();
    std::thread::Builder::new()
        .name(format!("zrecord-stream-prefetch-{w}"))
        .spawn(move || {
            if config.gathers_in_flight > 1 {
                let name = WorkerName {
                    what: "stream prefetch worker",
                    w: w as u64,
                };
                let window = Window::new(
                    Arc::clone(&source),
                    Arc::clone(&counters),
                    config.retry,
                    config.gathers_in_flight,
                    name,
                );
                run_window(window, &transform, &tx, &counters, &mut jobs);
            } else {
                let producer = Producer {
                    name: WorkerName {
                        what: "stream prefetch worker",
                        w: w as u64,
                    },
                    source: &*source,
                    transform: &transform,
                    retry: config.retry,
                    counters: &counters,
                };
                while let Some((seq, batch)) = next_job(&tx, &mut jobs) {
                    let pos = position(&batch);
                    let mut given = Some(batch);
                    let result = producer.produce(&tx, pos, &mut || {
                        given.take().ok_or_else(|| {
                            Error::internal("a stream prefetch job without its batch".into())
                        })
                    });
                    if !deliver(&tx, &counters, seq, result) {
                        break;
                    }
                }
            }
            // Release the source before announcing the exit.
            drop((source, transform, tx, jobs));
            drop(exit_tx);
        })
        .map_err(|e| Error::ThreadSpawn {
            what: "a stream prefetch worker",
            reason: e.to_string(),
        })?;
    Ok(Worker {
        jobs: jobs_tx,
        results: rx,
        exit: Some(exit_rx),
    })
}

/// Waits for the next job; `None` once the stream is dropped or restored.
fn next_job<X>(tx: &Sender<X>, jobs: &mut mpsc::UnboundedReceiver<Job>) -> Option<Job> {
    futures::executor::block_on(std::future::poll_fn(|cx| {
        if tx.poll_closed(cx).is_ready() {
            return Poll::Ready(None);
        }
        jobs.poll_next_unpin(cx)
    }))
}

/// A worker with several gathers in flight: takes its jobs into the [`Window`] as they come
/// (while it has room, also while it waits for its oldest gather), and delivers their results
/// in its jobs' order.
fn run_window<Src: Source, T>(
    mut window: Window<Src>,
    transform: &Transform<Src::Batch, T>,
    tx: &Sender<Done<T>>,
    counters: &Counters,
    jobs: &mut mpsc::UnboundedReceiver<Job>,
) {
    // Every job comes with its batch: there is nothing to compute.
    let mut no_compute = |_: u64, _: Position| -> Result<IndexBatch> {
        Err(Error::internal(
            "a stream prefetch job without its batch".into(),
        ))
    };
    let mut ended = false;
    loop {
        if window.is_empty() {
            match next_job(tx, jobs) {
                Some((seq, batch)) => {
                    window.push(seq, position(&batch), Some(batch), &mut no_compute);
                }
                None => break,
            }
        }
        let mut more = |cx: &mut Context<'_>, window: &mut Window<Src>| {
            while !ended && !window.is_full() {
                match jobs.poll_next_unpin(cx) {
                    Poll::Ready(Some((seq, batch))) => {
                        window.push(seq, position(&batch), Some(batch), &mut no_compute);
                    }
                    Poll::Ready(None) => ended = true,
                    Poll::Pending => break,
                }
            }
        };
        if !window.poll_head(tx, &mut more) {
            break;
        }
        let Some((seq, result)) = window.finish_head(tx, transform, &mut no_compute) else {
            break;
        };
        if !deliver(tx, counters, seq, result) {
            break;
        }
    }
}

fn position(batch: &IndexBatch) -> Position {
    Position {
        epoch: batch.epoch,
        position: batch.position,
    }
}
