//! The remote read backend: a batch's reads, coalesced by the read plan, become concurrent
//! range requests, one per read.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};

use super::cache::Cache;
use super::store::{block_on, spawn_abortable, Store};
use super::RemoteConfig;
use crate::error::{Error, Result};
use crate::io::fork::{take_unlocked, ForkLocal};
use crate::io::job::ReadJob;
use crate::{ReadBackend, ZeroCopy};

/// Process-wide counters of the remote backend.
static REQUESTS: AtomicU64 = AtomicU64::new(0);
static FETCHED: AtomicU64 = AtomicU64::new(0);
static USEFUL: AtomicU64 = AtomicU64::new(0);
static ISSUED: AtomicU64 = AtomicU64::new(0);
static HITS: AtomicU64 = AtomicU64::new(0);
static CANCELED: AtomicU64 = AtomicU64::new(0);
/// Range requests for offset-table pages and the bytes they brought (`remote/pages.rs`).
pub(crate) static TABLE_REQUESTS: AtomicU64 = AtomicU64::new(0);
pub(crate) static TABLE_FETCHED: AtomicU64 = AtomicU64::new(0);

/// What the remote backend has done in this process so far.
#[cfg_attr(
    not(feature = "diagnostics"),
    allow(dead_code, reason = "public through `zrecord::diagnostics`")
)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct RemoteStats {
    /// Range requests completed.
    pub requests: u64,
    /// Bytes those requests transferred.
    pub bytes_fetched: u64,
    /// Bytes the reads asked for (the rest is what coalescing fetched across gaps).
    pub bytes_requested: u64,
    /// Range requests started by lookahead.
    pub lookahead_issued: u64,
    /// Reads served by a request lookahead had started.
    pub lookahead_hits: u64,
    /// Lookahead requests dropped unused (their loader went away, or they went stale).
    pub lookahead_canceled: u64,
    /// Range requests for offset-table pages (tables read on demand), not counted above.
    pub table_requests: u64,
    /// Bytes those requests transferred.
    pub table_bytes_fetched: u64,
}

/// The remote backend's counters so far, process-wide.
#[cfg_attr(
    not(feature = "diagnostics"),
    allow(dead_code, reason = "public through `zrecord::diagnostics`")
)]
pub fn stats() -> RemoteStats {
    RemoteStats {
        requests: REQUESTS.load(Ordering::Relaxed),
        bytes_fetched: FETCHED.load(Ordering::Relaxed),
        bytes_requested: USEFUL.load(Ordering::Relaxed),
        lookahead_issued: ISSUED.load(Ordering::Relaxed),
        lookahead_hits: HITS.load(Ordering::Relaxed),
        lookahead_canceled: CANCELED.load(Ordering::Relaxed),
        table_requests: TABLE_REQUESTS.load(Ordering::Relaxed),
        table_bytes_fetched: TABLE_FETCHED.load(Ordering::Relaxed),
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
    cache: Option<Arc<Cache>>,
    /// zrecord's local backend, for batches that read only local chunks (cached ones).
    local: Option<Arc<dyn ReadBackend>>,
    /// Keys whose cached copy was found damaged: read from the store from now on, even where
    /// a snapshot holds the cached file open. (Per process: a child of `fork()` takes over its
    /// parent's set unless a parent thread held it at the fork.)
    damaged: ForkLocal<Mutex<HashSet<String>>>,
    /// This process's lookahead (see [`RemoteBackend::lookahead_state`]).
    ahead: ForkLocal<Lookahead>,
}

/// The requests lookahead started in one process, and its permits.
#[derive(Debug)]
struct Lookahead {
    /// Requests started ahead of the reads that will ask for them.
    started: Mutex<Ahead>,
    /// Lookahead requests in flight at once: `lookahead_requests`.
    permits: Arc<tokio::sync::Semaphore>,
}

/// Lookahead requests waiting or in flight at most.
const MAX_AHEAD: usize = 4096;

/// A range request started by lookahead: its session, size, start time, and its answer.
#[derive(Debug)]
struct Started {
    session: u64,
    size: u64,
    at: std::time::Instant,
    rx: tokio::sync::oneshot::Receiver<Result<Bytes>>,
    task: tokio::task::AbortHandle,
    /// The request has its permit and is on the wire (not waiting behind later batches').
    begun: Arc<std::sync::atomic::AtomicBool>,
}

/// The lookahead requests in flight or done, by `(key, start, end)`, and their bytes.
#[derive(Debug, Default)]
struct Ahead {
    started: HashMap<(String, u64, u64), Started>,
    bytes: u64,
}

impl Ahead {
    fn remove(&mut self, k: &(String, u64, u64)) -> Option<Started> {
        let s = self.started.remove(k)?;
        self.bytes = self.bytes.saturating_sub(s.size);
        Some(s)
    }

    /// Drops the requests of `session` (all of them for `None`) and those older than a minute.
    fn drop_where(&mut self, session: Option<u64>) {
        let stale = std::time::Duration::from_secs(60);
        let gone: Vec<_> = self
            .started
            .iter()
            .filter(|(_, s)| session.is_none_or(|x| x == s.session) || s.at.elapsed() > stale)
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            if let Some(s) = self.remove(&k) {
                s.task.abort();
                CANCELED.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl RemoteBackend {
    pub(crate) fn new(
        store: Arc<Store>,
        config: RemoteConfig,
        cache: Option<Arc<Cache>>,
        local: Option<Arc<dyn ReadBackend>>,
    ) -> Self {
        Self {
            store,
            config,
            cache,
            local,
            damaged: ForkLocal::new(),
            ahead: ForkLocal::new(),
        }
    }

    /// This process's lookahead: a child of `fork()` starts with none (its parent's requests
    /// run on the parent's runtime, whose threads the child does not have: their answers would
    /// never come) and all permits free.
    fn lookahead_state(&self) -> &Lookahead {
        self.ahead.get_or_init(|_| Lookahead {
            started: Mutex::new(Ahead::default()),
            permits: Arc::new(tokio::sync::Semaphore::new(
                self.config.lookahead_requests.max(1),
            )),
        })
    }

    /// This process's set of damaged cached copies.
    fn damaged(&self) -> &Mutex<HashSet<String>> {
        self.damaged
            .get_or_init(|parent| Mutex::new(parent.and_then(take_unlocked).unwrap_or_default()))
    }

    /// The remote ops of `job` and every op's key (`None`: read locally).
    fn remote_ops(&self, job: &ReadJob) -> (Vec<usize>, Vec<String>) {
        let mut remote = Vec::new();
        let mut keys = Vec::with_capacity(job.len());
        let mut cached: HashMap<String, bool> = HashMap::new();
        for op in 0..job.len() {
            let key = job.range(op).and_then(|r| self.object_of(&r));
            if let Some(k) = &key {
                let is_cached = *cached
                    .entry(k.clone())
                    .or_insert_with(|| self.cache.as_ref().is_some_and(|c| c.lookup(k).is_some()));
                if !is_cached {
                    remote.push(op);
                }
            }
            keys.push(key.unwrap_or_default());
        }
        (remote, keys)
    }

    /// The object key op `r` must be read from the store with, `None` for a local read: a
    /// chunk on the store, or a cached copy found damaged.
    fn object_of(&self, r: &crate::ReadRange<'_>) -> Option<String> {
        if let Some(key) = r.object {
            return Some(key.to_string());
        }
        let key = self.cache.as_ref()?.key_of(r.path)?;
        let damaged = self
            .damaged()
            .lock()
            .map(|d| d.contains(&key))
            .unwrap_or(false);
        damaged.then_some(key)
    }

    /// Reads op `op` of `job` from `file` (a local chunk, or a cached copy of an object).
    fn read_local(job: &mut ReadJob, op: usize, file: &File, path: &Path) -> Result<()> {
        let (offset, need) = match job.range(op) {
            Some(r) => (r.offset, r.need),
            None => return Ok(()),
        };
        let mut buf = vec![0u8; need];
        crate::io::fs::read_exact_at(file, path, &mut buf, offset).map_err(|e| match e {
            Error::Io { source, .. } => Error::ReadFailed {
                path: path.to_path_buf(),
                offset,
                source,
            },
            other => other,
        })?;
        job.fill(op, &buf).map_err(|e| Error::Internal {
            reason: format!("delivering read {op}: {e}"),
        })
    }

    /// The requests for `job`'s reads on objects: one per read, as the plan coalesced them by
    /// the dataset's rule (`RemoteConfig::object_reads`: reads closer than the coalescing gap
    /// share a read, none larger than the request limit). Nothing is merged here. A read
    /// planned by another rule (a cached copy found damaged, read from its object instead) that
    /// is larger than the limit is split.
    fn plan(
        &self,
        job: &ReadJob,
        remote: &[usize],
        keys: &[String],
    ) -> Result<(Vec<Request>, Vec<Segments>)> {
        let max = self.config.max_request.max(1);
        let mut requests: Vec<Request> = Vec::with_capacity(remote.len());
        let mut segments: Vec<Segments> = vec![Vec::new(); job.len()];
        for &op in remote {
            let r = job.range(op).ok_or_else(|| Error::Internal {
                reason: format!("read {op} of {} has no range", job.len()),
            })?;
            let key = keys.get(op).cloned().unwrap_or_default();
            let end = r.offset.saturating_add(r.len as u64);
            let mut at = r.offset;
            while at < end {
                let to = end.min(at.saturating_add(max));
                if let Some(s) = segments.get_mut(op) {
                    s.push((requests.len(), 0, (to - at) as usize));
                }
                requests.push(Request {
                    key: key.clone(),
                    start: at,
                    end: to,
                });
                at = to;
            }
        }
        Ok((requests, segments))
    }
}

impl ReadBackend for RemoteBackend {
    fn name(&self) -> &str {
        "remote"
    }

    fn zero_copy(&self) -> ZeroCopy {
        ZeroCopy::WhenResident
    }

    fn wants_lookahead(&self) -> bool {
        self.config.lookahead_bytes > 0
    }

    fn lookahead(&self, session: u64, job: &ReadJob) {
        let (remote, keys) = self.remote_ops(job);
        if remote.is_empty() {
            return;
        }
        let Ok((requests, _)) = self.plan(job, &remote, &keys) else {
            return;
        };
        let state = self.lookahead_state();
        let Ok(mut ahead) = state.started.lock() else {
            return;
        };
        ahead.drop_where(Some(u64::MAX));
        for r in requests {
            let size = r.end.saturating_sub(r.start);
            let k = (r.key.clone(), r.start, r.end);
            if ahead.started.contains_key(&k)
                || ahead.started.len() >= MAX_AHEAD
                || ahead.bytes.saturating_add(size) > self.config.lookahead_bytes
            {
                continue;
            }
            let (tx, rx) = tokio::sync::oneshot::channel();
            let store = Arc::clone(&self.store);
            let permits = Arc::clone(&state.permits);
            let begun = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let started = Arc::clone(&begun);
            let Some(task) = spawn_abortable(async move {
                let Ok(_permit) = permits.acquire().await else {
                    return;
                };
                started.store(true, Ordering::Release);
                let got = store.get_range(&r.key, r.start..r.end).await;
                if let Ok(b) = &got {
                    REQUESTS.fetch_add(1, Ordering::Relaxed);
                    FETCHED.fetch_add(b.len() as u64, Ordering::Relaxed);
                }
                let _ = tx.send(got);
            }) else {
                return;
            };
            ISSUED.fetch_add(1, Ordering::Relaxed);
            ahead.bytes = ahead.bytes.saturating_add(size);
            ahead.started.insert(
                k,
                Started {
                    session,
                    size,
                    at: std::time::Instant::now(),
                    rx,
                    task,
                    begun,
                },
            );
        }
    }

    fn end_lookahead(&self, session: u64) {
        if let Ok(mut a) = self.lookahead_state().started.lock() {
            a.drop_where(Some(session));
        }
    }

    fn refetch(&self, path: &Path) -> bool {
        let Some(cache) = &self.cache else {
            return false;
        };
        let key = cache.key_of(path).or_else(|| {
            let url = path.to_str()?;
            let prefix = format!("{}/", self.store.url());
            url.strip_prefix(&prefix).map(str::to_string)
        });
        let Some(key) = key else {
            return false;
        };
        cache.invalidate(&key);
        // Whether this drop is new or another gather's, the key is read from the store from
        // now on: a retry (off the mappings) reads other bytes.
        if let Ok(mut d) = self.damaged().lock() {
            d.insert(key);
            return true;
        }
        false
    }

    fn read(&self, mut job: ReadJob) -> Result<ReadJob> {
        // Local chunks (cached when the snapshot opened) and objects cached since are read here;
        // the rest become range requests, and their objects start filling the cache.
        let all_local =
            (0..job.len()).all(|op| job.range(op).is_some_and(|r| self.object_of(&r).is_none()));
        if let (true, Some(local)) = (all_local, &self.local) {
            return local.read(job);
        }
        let mut remote = Vec::new();
        let mut local: HashMap<String, Option<(File, PathBuf)>> = HashMap::new();
        let mut fill = Vec::new();
        let mut keys = Vec::with_capacity(job.len());
        for op in 0..job.len() {
            let Some(r) = job.range(op) else {
                keys.push(String::new());
                continue;
            };
            let object = self.object_of(&r);
            let key = object
                .clone()
                .unwrap_or_else(|| r.path.display().to_string());
            keys.push(key.clone());
            let source = local.entry(key.clone()).or_insert_with(|| match &object {
                None => Some((r.file?.try_clone().ok()?, r.path.to_path_buf())),
                Some(_) => {
                    let cache = self.cache.as_ref()?;
                    let path = cache.lookup(&key)?;
                    let file = File::open(&path).ok()?;
                    cache.used(&key, &file);
                    Some((file, path))
                }
            });
            match source {
                Some(_) => {}
                None if object.is_some() => {
                    remote.push(op);
                    fill.push(key);
                }
                None => {
                    return Err(Error::Internal {
                        reason: format!("{}: neither an object nor an open file", r.path.display()),
                    })
                }
            }
        }
        for (op, key) in keys.iter().enumerate() {
            if let Some(Some((file, path))) = local.get(key) {
                Self::read_local(&mut job, op, file, path)?;
            }
        }
        if let Some(cache) = &self.cache {
            fill.sort_unstable();
            fill.dedup();
            for key in &fill {
                cache.fill(&self.store, key);
            }
        }
        if remote.is_empty() {
            return Ok(job);
        }
        let (requests, segments) = self.plan(&job, &remote, &keys)?;
        let store = Arc::clone(&self.store);
        let in_flight = self.config.requests_in_flight.max(1);
        // Requests lookahead started already: their answers, awaited in place.
        // One still waiting for a permit (behind later batches' lookahead) is taken over:
        // aborted, and issued now by this read.
        let started: Vec<Option<Started>> = match self.lookahead_state().started.lock() {
            Ok(mut a) if !a.started.is_empty() => requests
                .iter()
                .map(|r| {
                    let s = a.remove(&(r.key.clone(), r.start, r.end))?;
                    if s.begun.load(Ordering::Acquire) {
                        return Some(s);
                    }
                    s.task.abort();
                    None
                })
                .collect(),
            _ => requests.iter().map(|_| None).collect(),
        };
        let count = requests.len();
        let done: Vec<(usize, Bytes)> = block_on(async move {
            futures::stream::iter(requests.into_iter().zip(started).enumerate())
                .map(|(i, (r, started))| {
                    let store = Arc::clone(&store);
                    async move {
                        // A started request that failed was tried as its budget allows: its
                        // error is this read's (one budget per request, not two).
                        if let Some(s) = started {
                            if let Ok(got) = s.rx.await {
                                let b = got?;
                                HITS.fetch_add(1, Ordering::Relaxed);
                                return Ok::<_, Error>((i, b));
                            }
                        }
                        let b = store.get_range(&r.key, r.start..r.end).await?;
                        REQUESTS.fetch_add(1, Ordering::Relaxed);
                        FETCHED.fetch_add(b.len() as u64, Ordering::Relaxed);
                        Ok((i, b))
                    }
                })
                .buffer_unordered(in_flight)
                .try_collect()
                .await
        })??;
        let mut bodies = vec![Bytes::new(); count];
        for (i, b) in done {
            if let Some(slot) = bodies.get_mut(i) {
                *slot = b;
            }
        }
        for (op, segs) in segments.iter().enumerate().filter(|(_, s)| !s.is_empty()) {
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
            USEFUL.fetch_add(job.wanted(op) as u64, Ordering::Relaxed);
        }
        Ok(job)
    }
}
