//! The blocking producer of a prefetch worker thread: one batch gathered from the source and
//! transformed, tried again as the retry policy allows. The one copy both index sides' workers
//! run (a worker that seeks its own share, and a worker fed by the stream prefetch's consumer),
//! and the push of its result; [`super::Window`] is the one copy for several gathers in flight.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

use super::super::batch::IndexBatch;
use super::super::queue::Sender;
use super::super::source::Source;
use super::super::state::Position;
use super::super::stats::Counters;
use super::window::{panicked, wait_to_retry, WorkerName};
use super::{LoaderBatch, RetryPolicy, Transform};
use crate::retry::{retry_blocking, Failure};
use crate::{Error, Result};

/// What a worker thread pushes into its queue: the number of its job (the seekable worker's
/// item count `k`, the stream prefetch's sequence number) and the gathered batch.
pub(crate) type Done<T> = (u64, Result<LoaderBatch<T>>);

/// Pushes the result of job `tag` into a worker's queue, counting it (produced, and the time
/// blocked on a full queue); false once the consumer went away.
pub(crate) fn deliver<T>(
    tx: &Sender<Done<T>>,
    counters: &Counters,
    tag: u64,
    result: Result<LoaderBatch<T>>,
) -> bool {
    if let Ok(b) = &result {
        counters.produced(b.batch.samples.len());
    }
    let pushed = Instant::now();
    if tx.push((tag, result)).is_err() {
        return false;
    }
    counters.blocked(pushed);
    true
}

/// What a worker thread produces with: its name (in panic reports and traces), the source, the
/// transform, the retry policy and the counters it shares with the consumer.
pub(crate) struct Producer<'a, Src: Source, T> {
    pub(crate) name: WorkerName,
    pub(crate) source: &'a Src,
    pub(crate) transform: &'a Transform<Src::Batch, T>,
    pub(crate) retry: RetryPolicy,
    pub(crate) counters: &'a Arc<Counters>,
}

impl<Src: Source, T> Producer<'_, Src, T> {
    /// Produces the batch at `pos`: its index batch from `compute` (called again at a retry if
    /// it failed, never again once it succeeded), gathered and transformed on this thread,
    /// trying a failure again as the retry policy allows and sleeping between tries (a consumer
    /// that went away from `tx` cuts the sleep short and the error is returned at once). A
    /// panic, and an error another try cannot help (`Error::is_permanent`), are not retried.
    pub(crate) fn produce<X>(
        &self,
        tx: &Sender<X>,
        pos: Position,
        compute: &mut dyn FnMut() -> Result<IndexBatch>,
    ) -> Result<LoaderBatch<T>> {
        let mut held: Option<IndexBatch> = None;
        retry_blocking(
            self.retry,
            &mut (&mut held, compute),
            |(held, compute), _| {
                let attempt = catch_unwind(AssertUnwindSafe(|| self.try_once(held, compute)));
                match attempt {
                    Ok(Ok(batch)) => Ok(batch),
                    Ok(Err(e)) => {
                        self.counters.failed_attempt();
                        // Another try cannot help (or was made below): the error, at once.
                        match e.is_permanent() {
                            true => Err(Failure::Final(e)),
                            false => Err(Failure::Retry(e)),
                        }
                    }
                    Err(panic) => Err(Failure::Final(panicked(self.name, pos, panic.as_ref()))),
                }
            },
            |_, error, tries, backoff| {
                wait_to_retry(tx, self.counters, self.name, pos, tries, error, backoff)
            },
        )
    }

    /// One try: the index batch (`held` from a failed try, or computed), gathered and
    /// transformed; on a failure the batch stays in `held` for the next try.
    fn try_once(
        &self,
        held: &mut Option<IndexBatch>,
        compute: &mut dyn FnMut() -> Result<IndexBatch>,
    ) -> Result<LoaderBatch<T>> {
        let batch = match held.take() {
            Some(batch) => batch,
            None => compute()?,
        };
        let indices = batch.indices();
        let gathered = {
            let _span = tracing::trace_span!("zrecord.gather", records = indices.len()).entered();
            let _in_flight = self.counters.gather_started(indices.len());
            self.source.gather(&indices)
        };
        let data = gathered.and_then(|gathered| {
            let start = Instant::now();
            let data = (self.transform)(gathered, &batch)?;
            self.counters.transform_time(start);
            Ok::<_, Error>(data)
        });
        match data {
            Ok(data) => Ok(LoaderBatch { data, batch }),
            Err(e) => {
                *held = Some(batch);
                Err(e)
            }
        }
    }
}
