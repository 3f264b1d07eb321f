//! The read window: the reads of a loader's next batches, started while its workers finish the
//! current ones, so the device's queue does not drain at every batch end.
//!
//! A prefetch worker announces its next batches ([`ReadBackend::lookahead`]); the engine plans
//! their reads exactly as the gather will and hands them here. Within a byte budget (the
//! engine's bytes in flight), helper threads start them:
//!
//! - reads through the page cache are read ahead into it (`posix_fadvise(WILLNEED)` on exactly
//!   the planned ranges): the gather then finds
//!   them resident (the `auto` backend serves the batch zero-copy) or waits on pages already
//!   under I/O, and verifies every record as always;
//! - `O_DIRECT` reads (no page cache) land in aligned buffers the window keeps, by file range;
//!   the gather's read of that range takes them (waiting for a read still in flight, taking
//!   over one no helper has started) and never reads those bytes again.
//!
//! A kept range is named by the file's identity (device, inode, generation, birth time:
//! [`FileId`]), never
//! by its path: a dataset dropped and re-created at the same path, or a chunk id a rebalance
//! freed and a later append reused, is another file, and the window is shared by every dataset
//! of the same budgets. The kept read holds its file open, so while the range is kept no other
//! file can take its inode number. A kept range serves only the bytes its announcing snapshot
//! committed (the op's `need`): the bytes of an append-only chunk below a committed record's
//! end never change, while those past it may (the file was shorter when it was read, or a
//! writer recovering from a crash rewrites an uncommitted tail). A gather that needs more of
//! the range than that reads it itself.
//!
//! What a loader announced and no gather took is dropped when its session ends
//! ([`ReadBackend::end_lookahead`]: the loader was dropped, resumed or seeked); announcements of
//! an ended session are ignored. Memory a read names stays with the backend executing it until
//! the read completes (the helper owns the job while it runs), whatever the window drops.

use super::backend::{ReadBackend, ZeroCopy};
use crate::error::Result;
use crate::io::job::{FileId, Piece, ReadJob, ReadOp};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

/// Alignment of the window's `O_DIRECT` buffers.
const ALIGN: usize = super::plan::DIRECT_ALIGN;

/// An `O_DIRECT` range the window read (or is reading) for a gather: the file's identity,
/// offset, length.
type Key = (FileId, u64, usize);

/// The key of `job`'s op `op`, if it reads an `O_DIRECT` local file.
fn key_of(job: &ReadJob, op: &ReadOp) -> Option<Key> {
    let file = job.files.get(op.file).filter(|f| f.direct)?;
    Some((file.id?, op.offset, job.op_len(op)))
}

/// Reads started ahead, shared by every dataset of one set of budgets.
#[derive(Debug)]
pub(crate) struct Window {
    budget: usize,
    helpers: usize,
    shared: Arc<Shared>,
    started: OnceLock<()>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    /// Helpers wait here for queued reads.
    work: Condvar,
    /// [`Window::settle`] waits here for running reads.
    idle: Condvar,
    /// `state.kept.len()`, readable without the lock (the gathers' fast path).
    kept: AtomicUsize,
    /// Files the kept reads hold open (counted per started job), beyond the descriptor budget:
    /// at most [`super::chunks::max_job_files`].
    files: Arc<AtomicUsize>,
}

#[derive(Debug, Default)]
struct State {
    queue: VecDeque<Arc<Ahead>>,
    /// `O_DIRECT` ranges whose bytes are (or will be) in a started read, for the gather.
    kept: HashMap<Key, Kept>,
    /// Bytes the window holds: queued and running readahead, and kept ranges.
    held: usize,
    /// Reads a helper is executing.
    running: usize,
    /// Sessions that ended: their announcements are ignored.
    ended: HashSet<u64>,
    /// Reads queued so far (for the tests: the window had something to do).
    announced: u64,
}

#[derive(Debug)]
struct Kept {
    ahead: Arc<Ahead>,
    /// The op of `ahead`'s job that reads the range.
    op: usize,
    bytes: usize,
    /// Bytes from the range's start that the announcing snapshot committed (the op's `need`):
    /// all the range may serve.
    need: usize,
    session: u64,
}

/// One started job: a batch part's page-cache readahead, or its `O_DIRECT` reads.
#[derive(Debug)]
struct Ahead {
    session: u64,
    io: Arc<dyn ReadBackend>,
    /// `O_DIRECT` reads, kept for the gather (else readahead, dropped once done).
    keep: bool,
    /// Bytes held while queued or running (readahead only; kept ranges count their own).
    bytes: usize,
    /// The kept ranges it serves.
    keys: Vec<Key>,
    slot: Mutex<Slot>,
    done: Condvar,
    /// The files its job holds open, counted in this counter until it is dropped (kept reads).
    files: Option<(usize, Arc<AtomicUsize>)>,
}

impl Drop for Ahead {
    fn drop(&mut self) {
        if let Some((n, held)) = &self.files {
            held.fetch_sub(*n, Ordering::AcqRel);
        }
    }
}

#[derive(Debug)]
enum Slot {
    Queued(ReadJob),
    Running,
    /// The job, if its reads succeeded and their bytes are kept.
    Done(Option<ReadJob>),
    /// Taken over or dropped before a helper started it.
    Dropped,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Window {
    /// A window of at most `budget` bytes, with `helpers` threads started on first use.
    pub(crate) fn new(budget: usize, helpers: usize) -> Window {
        Window {
            budget,
            helpers: helpers.max(1),
            shared: Arc::new(Shared::default()),
            started: OnceLock::new(),
        }
    }

    /// Bytes held, once no helper is running a read: what announced reads no gather took
    /// still hold.
    #[cfg(feature = "testing")]
    pub(crate) fn settle(&self) -> usize {
        let mut st = lock(&self.shared.state);
        while st.running > 0 || (!st.queue.is_empty() && self.started.get().is_some()) {
            st = self
                .shared
                .idle
                .wait(st)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        st.held
    }

    /// Files kept reads hold open.
    #[cfg(feature = "testing")]
    pub(crate) fn files(&self) -> usize {
        self.shared.files.load(Ordering::Acquire)
    }

    /// Reads queued so far, since the window started.
    #[cfg(feature = "testing")]
    pub(crate) fn announced(&self) -> u64 {
        lock(&self.shared.state).announced
    }

    fn start_helpers(&self) {
        self.started.get_or_init(|| {
            for i in 0..self.helpers {
                let shared = Arc::clone(&self.shared);
                let spawned = std::thread::Builder::new()
                    .name(format!("zrecord-window-{i}"))
                    .spawn(move || helper(&shared));
                if let Err(e) = spawned {
                    tracing::warn!(error = %e, "could not start a read-window thread");
                }
            }
        });
    }

    /// Starts the reads of `job` (planned by the engine, no buffers) for `session`, within the
    /// budget: readahead of its page-cache ranges, kept reads of its `O_DIRECT` ones.
    fn announce(&self, session: u64, io: &Arc<dyn ReadBackend>, job: &ReadJob) {
        let mut st = lock(&self.shared.state);
        if st.ended.contains(&session) {
            return;
        }
        let mut buffered = Vec::new();
        let mut direct = Vec::new();
        for (i, op) in job.ops.iter().enumerate() {
            let Some(file) = job.files.get(op.file) else {
                continue;
            };
            let len = job.op_len(op);
            if !file.direct {
                buffered.push((i, len));
            } else if let Some(key) = key_of(job, op) {
                if !st.kept.contains_key(&key) {
                    direct.push((i, len));
                }
            }
        }
        let mut room = self.budget.saturating_sub(st.held);
        let mut fits = |ops: Vec<(usize, usize)>| -> Vec<usize> {
            let mut out = Vec::new();
            for (i, len) in ops {
                if len > room {
                    break;
                }
                room -= len;
                out.push(i);
            }
            out
        };
        let buffered = fits(buffered);
        // Kept reads hold their files open until a gather takes them: as many files as a job
        // may hold beyond the descriptor budget, at most.
        let free_files = super::chunks::max_job_files()
            .saturating_sub(self.shared.files.load(Ordering::Acquire));
        let direct = {
            let mut out = Vec::new();
            let mut files: HashSet<usize> = HashSet::new();
            for (i, len) in direct {
                let Some(op) = job.ops.get(i) else { continue };
                let new_file = !files.contains(&op.file);
                if len > room || (new_file && files.len() == free_files) {
                    break;
                }
                files.insert(op.file);
                room -= len;
                out.push(i);
            }
            out
        };
        st.announced += (buffered.len() + direct.len()) as u64;
        let mut queued = false;
        if !buffered.is_empty() {
            let (sub, bytes) = subjob(job, &buffered, false);
            st.held += bytes;
            st.queue.push_back(Arc::new(Ahead {
                session,
                io: Arc::clone(io),
                keep: false,
                bytes,
                keys: Vec::new(),
                slot: Mutex::new(Slot::Queued(sub)),
                done: Condvar::new(),
                files: None,
            }));
            queued = true;
        }
        if !direct.is_empty() {
            let (sub, _) = subjob(job, &direct, true);
            // `subjob` keeps only ops whose key exists, so keys and ops line up.
            let keys: Vec<(Key, usize, usize)> = sub
                .ops
                .iter()
                .filter_map(|op| Some((key_of(&sub, op)?, sub.op_len(op), op.need)))
                .collect();
            let files = sub.files.len();
            self.shared.files.fetch_add(files, Ordering::AcqRel);
            let ahead = Arc::new(Ahead {
                session,
                io: Arc::clone(io),
                keep: true,
                bytes: 0,
                keys: keys.iter().map(|(k, _, _)| *k).collect(),
                slot: Mutex::new(Slot::Queued(sub)),
                done: Condvar::new(),
                files: Some((files, Arc::clone(&self.shared.files))),
            });
            for (op, (key, bytes, need)) in keys.into_iter().enumerate() {
                st.held += bytes;
                let kept = Kept {
                    ahead: Arc::clone(&ahead),
                    op,
                    bytes,
                    need,
                    session,
                };
                // The plan merges overlapping `O_DIRECT` spans (a record asked for twice), so
                // no two ops of a job share a range; if they did, one is kept.
                if let Some(twin) = st.kept.insert(key, kept) {
                    st.held = st.held.saturating_sub(twin.bytes);
                }
            }
            self.shared.kept.store(st.kept.len(), Ordering::Release);
            st.queue.push_back(ahead);
            queued = true;
        }
        drop(st);
        if queued {
            self.start_helpers();
            self.shared.work.notify_all();
        }
    }

    /// Drops what `session` announced and no gather took; its later announcements are ignored.
    fn end(&self, session: u64) {
        let mut st = lock(&self.shared.state);
        st.ended.insert(session);
        let st = &mut *st;
        let mut released = 0;
        st.queue.retain(|a| {
            if a.session != session {
                return true;
            }
            *lock(&a.slot) = Slot::Dropped;
            released += a.bytes;
            false
        });
        st.kept.retain(|_, k| {
            if k.session != session {
                return true;
            }
            released += k.bytes;
            false
        });
        st.held = st.held.saturating_sub(released);
        self.shared.kept.store(st.kept.len(), Ordering::Release);
    }

    /// The kept reads of `job`'s ops, taken out of the window: `(op, ahead, its op)`. A read
    /// no helper started yet is taken over (dropped: the gather reads it itself).
    fn take(&self, job: &ReadJob) -> Vec<(usize, Arc<Ahead>, usize)> {
        if self.shared.kept.load(Ordering::Acquire) == 0 {
            return Vec::new();
        }
        let mut st = lock(&self.shared.state);
        let mut hits = Vec::new();
        for (i, op) in job.ops.iter().enumerate() {
            let Some(key) = key_of(job, op) else {
                continue;
            };
            let Some(k) = st.kept.remove(&key) else {
                continue;
            };
            st.held = st.held.saturating_sub(k.bytes);
            let mut slot = lock(&k.ahead.slot);
            if matches!(*slot, Slot::Queued(_) | Slot::Dropped) {
                // Not started: the gather reads these bytes itself; the rest of that job's
                // ranges will be read by their own gathers.
                *slot = Slot::Dropped;
                drop(slot);
                let ahead = Arc::clone(&k.ahead);
                let st = &mut *st;
                st.queue.retain(|a| !Arc::ptr_eq(a, &ahead));
                for key in &ahead.keys {
                    if let Some(other) = st.kept.remove(key) {
                        st.held = st.held.saturating_sub(other.bytes);
                    }
                }
                continue;
            }
            drop(slot);
            // The gather needs bytes past what the announcing snapshot committed (a later
            // commit appended there): the kept read may not have them, or not these.
            if op.need > k.need {
                continue;
            }
            hits.push((i, k.ahead, k.op));
        }
        self.shared.kept.store(st.kept.len(), Ordering::Release);
        hits
    }
}

/// The ops `ops` of `job` as a job of their own (holding only the files they read), each
/// landing whole in one buffer (aligned for `O_DIRECT` if `direct`), with its bytes. Readahead
/// of the page cache needs no buffer.
fn subjob(job: &ReadJob, ops: &[usize], direct: bool) -> (ReadJob, usize) {
    let mut sub = ReadJob::default();
    let mut file_of: HashMap<usize, usize> = HashMap::new();
    let mut at = 0usize;
    for &i in ops {
        let Some(op) = job.ops.get(i) else { continue };
        let Some(f) = job.files.get(op.file) else {
            continue;
        };
        let file = *file_of.entry(op.file).or_insert_with(|| {
            sub.files.push(Arc::clone(f));
            sub.files.len() - 1
        });
        let len = job.op_len(op);
        if direct {
            at = at.next_multiple_of(ALIGN);
        }
        sub.pieces.push(Piece { buf: 0, at, len });
        sub.ops.push(ReadOp {
            file,
            offset: op.offset,
            need: op.need,
            pieces: sub.pieces.len() - 1..sub.pieces.len(),
        });
        at += len;
    }
    if direct {
        // Aligned in a buffer padded by up to one block (the pieces move by the padding).
        let buf = vec![0u8; at + ALIGN];
        let pad = buf.as_ptr().align_offset(ALIGN).min(ALIGN);
        for p in &mut sub.pieces {
            p.at += pad;
        }
        sub.bufs = vec![buf];
    }
    (sub, at)
}

/// A helper thread: runs queued reads, one at a time, for ever.
fn helper(shared: &Shared) {
    loop {
        let ahead = {
            let mut st = lock(&shared.state);
            loop {
                if let Some(a) = st.queue.pop_front() {
                    st.running += 1;
                    break a;
                }
                st = shared
                    .work
                    .wait(st)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
        };
        let job = {
            let mut slot = lock(&ahead.slot);
            match std::mem::replace(&mut *slot, Slot::Running) {
                Slot::Queued(job) => Some(job),
                other => {
                    // Dropped (taken over, or its session ended) before it started.
                    *slot = other;
                    None
                }
            }
        };
        if let Some(job) = job {
            let result = if ahead.keep {
                ahead.io.read(job).ok()
            } else {
                readahead(&job);
                None
            };
            *lock(&ahead.slot) = Slot::Done(result);
            ahead.done.notify_all();
        }
        let mut st = lock(&shared.state);
        st.running -= 1;
        // Readahead holds its bytes until it is over (`end` releases only queued ones); kept
        // ranges hold theirs until a gather takes them or their session ends.
        if !ahead.keep {
            st.held = st.held.saturating_sub(ahead.bytes);
        }
        drop(st);
        shared.idle.notify_all();
    }
}

/// Brings `job`'s ranges into the page cache: `posix_fadvise(WILLNEED)` on exactly the planned
/// ranges (the kernel queues the reads and returns). A read into a scratch buffer instead was
/// slower (docs/ARCHITECTURE.md, "The read window").
fn readahead(job: &ReadJob) {
    for op in &job.ops {
        let len = job.op_len(op);
        if let Some(f) = job.files.get(op.file).and_then(|f| f.local()) {
            crate::io::fs::advise_willneed(f, op.offset, len as u64);
        }
    }
}

impl Ahead {
    /// Copies the committed bytes of this job's op `from` (its first `need`) into `job`'s op
    /// `op`, once its reads are done. False if they failed (the gather reads the range itself).
    fn copy_into(&self, job: &mut ReadJob, op: usize, from: usize) -> bool {
        let mut slot = lock(&self.slot);
        while matches!(*slot, Slot::Running | Slot::Queued(_)) {
            slot = self
                .done
                .wait(slot)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        let Slot::Done(Some(done)) = &*slot else {
            return false;
        };
        let bytes = done.ops.get(from).and_then(|o| {
            let p = done.pieces.get(o.pieces.clone())?.first()?;
            done.bufs.get(p.buf)?.get(p.at..p.at + p.len.min(o.need))
        });
        match bytes {
            Some(b) => job.fill(op, b).is_ok(),
            None => false,
        }
    }
}

/// One of zrecord's I/O backends with a read window in front of it.
#[derive(Debug)]
pub(crate) struct Windowed {
    pub(crate) io: Arc<dyn ReadBackend>,
    pub(crate) window: Arc<Window>,
}

impl ReadBackend for Windowed {
    fn name(&self) -> &str {
        self.io.name()
    }

    fn read(&self, mut job: ReadJob) -> Result<ReadJob> {
        let hits = self.window.take(&job);
        if hits.is_empty() {
            return self.io.read(job);
        }
        let mut missing = vec![true; job.len()];
        for (op, ahead, from) in hits {
            if ahead.copy_into(&mut job, op, from) {
                if let Some(m) = missing.get_mut(op) {
                    *m = false;
                }
            }
        }
        let rest: Vec<ReadOp> = job
            .ops
            .iter()
            .zip(&missing)
            .filter(|(_, &m)| m)
            .map(|(op, _)| op.clone())
            .collect();
        if rest.is_empty() {
            return Ok(job);
        }
        let sub = ReadJob {
            files: job.files.clone(),
            ops: rest,
            pieces: job.pieces.clone(),
            bufs: std::mem::take(&mut job.bufs),
        };
        let done = self.io.read(sub)?;
        job.bufs = done.bufs;
        Ok(job)
    }

    fn zero_copy(&self) -> ZeroCopy {
        self.io.zero_copy()
    }

    fn refetch(&self, path: &std::path::Path) -> bool {
        self.io.refetch(path)
    }

    fn wants_lookahead(&self) -> bool {
        true
    }

    fn lookahead(&self, session: u64, job: &ReadJob) {
        self.window.announce(session, &self.io, job);
    }

    fn end_lookahead(&self, session: u64) {
        self.window.end(session);
    }
}
