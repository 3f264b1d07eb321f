//! The remote read backend: a batch's reads become coalesced, concurrent range requests.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};

use super::store::{block_on, Store};
use super::RemoteConfig;
use crate::error::{Error, Result};
use crate::io::job::ReadJob;
use crate::ReadBackend;

/// Process-wide counters of the remote backend.
static REQUESTS: AtomicU64 = AtomicU64::new(0);
static FETCHED: AtomicU64 = AtomicU64::new(0);
static USEFUL: AtomicU64 = AtomicU64::new(0);

/// What the remote backend has done in this process so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct RemoteStats {
    /// Range requests completed.
    pub requests: u64,
    /// Bytes those requests transferred.
    pub bytes_fetched: u64,
    /// Bytes the reads asked for (the rest is what coalescing fetched across gaps).
    pub bytes_requested: u64,
}

/// The remote backend's counters so far, process-wide.
pub fn stats() -> RemoteStats {
    RemoteStats {
        requests: REQUESTS.load(Ordering::Relaxed),
        bytes_fetched: FETCHED.load(Ordering::Relaxed),
        bytes_requested: USEFUL.load(Ordering::Relaxed),
    }
}

/// One range request, and the reads it serves.
#[derive(Debug)]
struct Request {
    key: String,
    start: u64,
    end: u64,
}

/// Where one read's bytes come from: `(request, offset in its body, length)`, in order.
type Segments = Vec<(usize, usize, usize)>;

/// Reads the chunks of one dataset on an object store.
#[derive(Debug)]
pub(crate) struct RemoteBackend {
    store: Arc<Store>,
    config: RemoteConfig,
}

impl RemoteBackend {
    pub(crate) fn new(store: Arc<Store>, config: RemoteConfig) -> Self {
        Self { store, config }
    }

    /// The requests for `job`'s reads: per object, in offset order, reads closer than the
    /// coalescing gap share a request, and no request is larger than the request limit (a read
    /// larger than that is split).
    fn plan(&self, job: &ReadJob) -> Result<(Vec<Request>, Vec<Segments>)> {
        let mut reads = Vec::with_capacity(job.len());
        for op in 0..job.len() {
            let r = job.range(op).ok_or_else(|| Error::Internal {
                reason: format!("read {op} of {} has no range", job.len()),
            })?;
            let key = r.object.ok_or_else(|| Error::Internal {
                reason: format!(
                    "{} is not an object: the remote backend reads only chunks on a store",
                    r.path.display()
                ),
            })?;
            reads.push((key.to_string(), r.offset, r.len as u64, op));
        }
        reads.sort_unstable_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        let gap = self.config.coalesce_gap;
        let max = self.config.max_request.max(1);
        let mut requests: Vec<Request> = Vec::new();
        let mut segments: Vec<Segments> = vec![Vec::new(); job.len()];
        for (key, offset, len, op) in reads {
            let mut at = offset;
            let end = offset.saturating_add(len);
            while at < end {
                let joins = requests.last().is_some_and(|r| {
                    r.key == key
                        && at >= r.start
                        && at <= r.end.saturating_add(gap)
                        && end.min(at.saturating_add(max)).saturating_sub(r.start) <= max
                });
                if !joins {
                    requests.push(Request {
                        key: key.clone(),
                        start: at,
                        end: at,
                    });
                }
                let i = requests.len().saturating_sub(1);
                let Some(r) = requests.last_mut() else {
                    break;
                };
                let piece_end = end.min(r.start.saturating_add(max));
                r.end = r.end.max(piece_end);
                let (from, n) = (at - r.start, piece_end - at);
                if let Some(s) = segments.get_mut(op) {
                    s.push((i, from as usize, n as usize));
                }
                at = piece_end;
            }
        }
        Ok((requests, segments))
    }
}

impl ReadBackend for RemoteBackend {
    fn name(&self) -> &str {
        "remote"
    }

    fn read(&self, mut job: ReadJob) -> Result<ReadJob> {
        let (requests, segments) = self.plan(&job)?;
        let store = Arc::clone(&self.store);
        let in_flight = self.config.requests_in_flight.max(1);
        let bodies: Vec<Bytes> = block_on(async move {
            futures::stream::iter(requests)
                .map(|r| {
                    let store = Arc::clone(&store);
                    async move {
                        let b = store.get_range(&r.key, r.start..r.end).await?;
                        REQUESTS.fetch_add(1, Ordering::Relaxed);
                        FETCHED.fetch_add(b.len() as u64, Ordering::Relaxed);
                        Ok::<_, Error>(b)
                    }
                })
                .buffered(in_flight)
                .try_collect()
                .await
        })??;
        for (op, segs) in segments.iter().enumerate() {
            let slice = |&(req, from, n): &(usize, usize, usize)| {
                bodies
                    .get(req)
                    .and_then(|b| b.get(from..from.checked_add(n)?))
                    .ok_or_else(|| Error::Internal {
                        reason: format!("read {op}: request {req} is shorter than planned"),
                    })
            };
            let filled = match segs.as_slice() {
                [one] => job.fill(op, slice(one)?),
                many => {
                    let mut data = Vec::new();
                    for s in many {
                        data.extend_from_slice(slice(s)?);
                    }
                    job.fill(op, &data)
                }
            };
            filled.map_err(|e| Error::Internal {
                reason: format!("delivering read {op}: {e}"),
            })?;
            let n: usize = segs.iter().map(|s| s.2).sum();
            USEFUL.fetch_add(n as u64, Ordering::Relaxed);
        }
        Ok(job)
    }
}
