//! A [`super::PrefetchStream`] worker: the seekable prefetch's worker loop ([`WorkerLoop`]: one
//! gather at a time, or several in flight in its window; transform, retries, the results pushed
//! in its jobs' order) over the batches the consumer deals it ([`Dealt`]).

use std::sync::Arc;
use std::task::{Context, Poll};

use futures::channel::{mpsc, oneshot};
use futures::stream::StreamExt;

use super::super::super::batch::IndexBatch;
use super::super::super::queue::{self, Receiver};
use super::super::super::source::Source;
use super::super::super::state::Position;
use super::super::super::stats::Counters;
use super::super::{Done, Job, Jobs, PrefetchConfig, Transform, WorkerLoop, WorkerName};
use crate::{Error, Result};

/// One worker thread's ends: its jobs (each batch with its sequence number), its results.
pub(super) struct Worker<T> {
    pub(super) jobs: mpsc::UnboundedSender<(u64, IndexBatch)>,
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
    let (jobs_tx, jobs) = mpsc::unbounded::<(u64, IndexBatch)>();
    let (tx, rx) = queue::bounded(config.worker_queue_size);
    let (exit_tx, exit_rx) = oneshot::channel::<()>();
    let worker = WorkerLoop {
        jobs: Dealt { jobs },
        name: WorkerName {
            what: "stream prefetch worker",
            w: w as u64,
        },
        source,
        transform,
        retry: config.retry,
        gathers_in_flight: config.gathers_in_flight,
        tx,
        exit: exit_tx,
        counters,
    };
    worker.spawn(
        format!("zrecord-stream-prefetch-{w}"),
        "a stream prefetch worker",
    )?;
    Ok(Worker {
        jobs: jobs_tx,
        results: rx,
        exit: Some(exit_rx),
    })
}

/// The jobs of a stream prefetch's worker: the batches the consumer deals it, each with its
/// sequence number; none once the stream is dropped or restored.
struct Dealt {
    jobs: mpsc::UnboundedReceiver<(u64, IndexBatch)>,
}

impl Jobs for Dealt {
    fn poll_job(&mut self, cx: &mut Context<'_>) -> Poll<Option<Job>> {
        self.jobs.poll_next_unpin(cx).map(|job| {
            job.map(|(seq, batch)| {
                let pos = Position {
                    epoch: batch.epoch,
                    position: batch.position,
                };
                (seq, pos, Some(batch))
            })
        })
    }

    /// Every job comes with its batch: there is nothing to compute.
    fn compute(&mut self, _: u64, _: Position) -> Result<IndexBatch> {
        Err(Error::internal(
            "a stream prefetch job without its batch".into(),
        ))
    }

    fn delivered(&mut self, _: u64) -> bool {
        true
    }
}
