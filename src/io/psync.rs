//! The fallback backend: `preadv(2)` on a pool of threads, for machines where io_uring cannot
//! be set up (seccomp, `kernel.io_uring_disabled`, old kernels).
//!
//! The calling thread works through the job's ops itself and wakes pool threads to share them
//! when the job is large enough for the wake-ups to pay off; on cold data the pool gives a
//! queue depth of up to `threads + 1`.

use super::job::{eof_error, JobError, Piece, ReadJob};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};

/// Ops per woken helper: below this, a wake-up costs more than the reads it shares.
const OPS_PER_HELPER: usize = 4;

/// A pool of pread threads.
#[derive(Debug)]
pub struct PsyncPool {
    tx: Mutex<Sender<Arc<Shared>>>,
    threads: usize,
}

/// A job being worked on by the caller and some helpers.
///
/// Helpers may hold it after the job is over (a helper woken late finds no op left), so it owns
/// nothing that must be released when `run` returns: the caller keeps the job's files and
/// buffers, and `Shared` has their raw descriptors and addresses, used only while ops remain.
struct Shared {
    /// The job without its files and buffers.
    job: ReadJob,
    /// The descriptors of the caller's files, by file index.
    fds: Vec<std::os::fd::RawFd>,
    /// The job's buffers, taken out of `job` by the caller (which keeps them alive and
    /// untouched until every op has finished).
    bases: Vec<*mut u8>,
    next: AtomicUsize,
    failed: AtomicBool,
    state: Mutex<State>,
    cv: Condvar,
}

// SAFETY: `bases` point into buffers owned by the caller of `PsyncPool::run`, which does not
// touch it and keeps it alive until every op has been finished (counted in `state.done`); the
// ops write disjoint pieces (checked by `ReadJob::validate` plus the planner's construction), so
// sharing the pointer across threads is sound. `fds` are plain integers; the caller keeps the
// files open until every op has finished, and no op runs after that.
unsafe impl Send for Shared {}
// SAFETY: as above; every other field is Sync.
unsafe impl Sync for Shared {}

#[derive(Default)]
struct State {
    done: usize,
    /// The first failed op and its error.
    error: Option<(usize, std::io::Error)>,
}

impl PsyncPool {
    /// Starts `threads` helper threads.
    pub fn new(threads: usize) -> std::io::Result<PsyncPool> {
        let (tx, rx) = mpsc::channel::<Arc<Shared>>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads {
            let rx = Arc::clone(&rx);
            std::thread::Builder::new()
                .name(format!("zrecord-pread-{i}"))
                .spawn(move || helper(&rx))?;
        }
        Ok(PsyncPool {
            tx: Mutex::new(tx),
            threads,
        })
    }

    /// Executes every read of `job`, blocking until all have finished.
    pub fn run(&self, mut job: ReadJob) -> Result<ReadJob, JobError> {
        job.validate().map_err(|e| JobError::new(&job, 0, e))?;
        let n = job.ops.len();
        let mut bufs = std::mem::take(&mut job.bufs);
        // The caller keeps the files: their descriptors close when the job does, not when the
        // last helper lets go of `Shared`.
        let files = std::mem::take(&mut job.files);
        let shared = Arc::new(Shared {
            fds: files.iter().map(|f| f.fd()).collect(),
            job,
            bases: bufs.iter_mut().map(|b| b.as_mut_ptr()).collect(),
            next: AtomicUsize::new(0),
            failed: AtomicBool::new(false),
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
        });
        let helpers = (n / OPS_PER_HELPER).min(self.threads);
        if helpers > 0 {
            if let Ok(tx) = self.tx.lock() {
                for _ in 0..helpers {
                    let _ = tx.send(Arc::clone(&shared));
                }
            }
        }
        work(&shared);
        // Wait until every op is finished: helpers may still be writing into `buf`.
        let mut st = lock(&shared.state);
        while st.done < n {
            st = match shared.cv.wait(st) {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
        }
        let error = st.error.take();
        drop(st);
        let mut job = match Arc::try_unwrap(shared) {
            Ok(s) => s.job,
            // A helper still holds the Arc but has no op left to run (all `n` are done).
            Err(s) => ReadJob {
                files: Vec::new(),
                ops: s.job.ops.clone(),
                pieces: s.job.pieces.clone(),
                bufs: Vec::new(),
            },
        };
        job.files = files;
        job.bufs = bufs;
        match error {
            Some((op, e)) => Err(JobError::new(&job, op, e)),
            None => Ok(job),
        }
    }
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

fn helper(rx: &Mutex<Receiver<Arc<Shared>>>) {
    loop {
        let next = match rx.lock() {
            Ok(r) => r.recv(),
            Err(_) => return,
        };
        match next {
            Ok(shared) => work(&shared),
            Err(_) => return,
        }
    }
}

/// Claims and runs ops until none are left.
fn work(s: &Shared) {
    let n = s.job.ops.len();
    loop {
        let i = s.next.fetch_add(1, Ordering::Relaxed);
        if i >= n {
            return;
        }
        let result = if s.failed.load(Ordering::Relaxed) {
            Ok(())
        } else {
            run_op(s, i)
        };
        let mut st = lock(&s.state);
        if let Err(e) = result {
            s.failed.store(true, Ordering::Relaxed);
            if st.error.is_none() {
                st.error = Some((i, e));
            }
        }
        st.done += 1;
        if st.done == n {
            s.cv.notify_all();
        }
    }
}

/// Reads op `i` completely, retrying short reads and `EINTR`.
fn run_op(s: &Shared, i: usize) -> std::io::Result<()> {
    let (Some(op), Some(&fd)) = (
        s.job.ops.get(i),
        s.job.ops.get(i).and_then(|o| s.fds.get(o.file)),
    ) else {
        return Ok(());
    };
    let pieces: &[Piece] = s.job.pieces.get(op.pieces.clone()).unwrap_or_default();
    let mut iovs: Vec<libc::iovec> = pieces
        .iter()
        .map(|p| libc::iovec {
            // `wrapping_add` computes the address only; `validate` checked it is in bounds.
            iov_base: s
                .bases
                .get(p.buf)
                .map_or(std::ptr::null_mut(), |b| b.wrapping_add(p.at))
                .cast(),
            iov_len: p.len,
        })
        .collect();
    let mut first = 0usize;
    let mut done = 0usize;
    while done < op.need {
        let Some(rest) = iovs.get(first..) else {
            break;
        };
        let count = rest.len().min(1024) as libc::c_int;
        let offset = op.offset + done as u64;
        // SAFETY: every iovec points into the caller's buffer, inside bounds (`ReadJob::validate`)
        // and disjoint from every other op's pieces; the buffer outlives this call (the caller
        // waits for all ops). The descriptor is kept open by the caller's `files` until then.
        let r = unsafe { libc::preadv(fd, rest.as_ptr(), count, offset as libc::off_t) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if r == 0 {
            return Err(eof_error(done, op.need));
        }
        let mut n = r as usize;
        done += n;
        // Advance the scatter list past the bytes that landed.
        while n > 0 {
            let Some(v) = iovs.get_mut(first) else { break };
            if n >= v.iov_len {
                n -= v.iov_len;
                first += 1;
            } else {
                v.iov_base = v.iov_base.cast::<u8>().wrapping_add(n).cast();
                v.iov_len -= n;
                n = 0;
            }
        }
    }
    Ok(())
}
