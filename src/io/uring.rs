//! The io_uring backend: one ring thread, fed by a bounded channel, that keeps many reads of
//! many jobs in flight under an ops and bytes budget.
//!
//! The thread blocks in `recv` when it has nothing in flight and in `submit_and_wait(1)` when it
//! has; it never spins. Each job is answered once, when its last read has completed. A job
//! whose caller has gone away (its future dropped) is still driven to completion and only then
//! freed: the kernel may be writing into its buffer until its completion is reaped.

use super::job::{eof_error, JobError, Piece, ReadJob};
use io_uring::{opcode, types, IoUring};
use std::collections::{HashMap, VecDeque};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError};

/// The budgets of one ring: reads and bytes in flight at most, across jobs.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Reads in flight at most (a virtio disk here needed ~128 for full throughput). The ring
    /// gets this many submission entries, rounded up to a power of two.
    pub ops: usize,
    /// Bytes in flight at most; one op is always admitted, whatever its size.
    pub bytes: usize,
}

type Reply = SyncSender<Result<ReadJob, JobError>>;

struct Request {
    job: ReadJob,
    reply: Reply,
}

/// A handle on the ring thread.
#[derive(Debug)]
pub struct Ring {
    tx: SyncSender<Request>,
    /// The setup flags the ring ended up with, for the one-time report.
    pub flags: &'static str,
}

impl Ring {
    /// Starts the ring thread, trying setup flags from the most to the least capable: a kernel
    /// that rejects a flag with `EINVAL` gets the ring without it. Fails if io_uring cannot be
    /// used at all (`ENOSYS`, `EPERM` from seccomp or `kernel.io_uring_disabled`, no `READV`).
    pub fn start(budget: Budget) -> std::io::Result<Ring> {
        let (tx, rx) = mpsc::sync_channel::<Request>(64);
        let (ready_tx, ready_rx) = mpsc::sync_channel::<std::io::Result<&'static str>>(1);
        std::thread::Builder::new()
            .name("zrecord-uring".into())
            .spawn(move || {
                // The ring is built on the thread that submits to it (SINGLE_ISSUER requires it).
                match build(entries(budget.ops)) {
                    Ok((ring, flags)) => {
                        let _ = ready_tx.send(Ok(flags));
                        Driver::new(ring, budget).run(&rx);
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            })?;
        let flags = ready_rx
            .recv()
            .map_err(|_| std::io::Error::other("io_uring thread exited during setup"))??;
        Ok(Ring { tx, flags })
    }

    /// Executes every read of `job`, blocking until all have completed.
    pub fn run(&self, job: ReadJob) -> Result<ReadJob, JobError> {
        let (reply, rx) = mpsc::sync_channel(1);
        let gone = |job: &ReadJob| {
            JobError::new(
                job,
                0,
                std::io::Error::other("the io_uring thread has stopped"),
            )
        };
        if let Err(mpsc::SendError(req)) = self.tx.send(Request { job, reply }) {
            return Err(gone(&req.job));
        }
        rx.recv().unwrap_or_else(|_| Err(gone(&ReadJob::default())))
    }
}

/// Submission entries for `ops` reads in flight: a power of two from 8 to 4096.
fn entries(ops: usize) -> u32 {
    ops.clamp(8, 4096).next_power_of_two() as u32
}

fn build(entries: u32) -> std::io::Result<(IoUring, &'static str)> {
    type Make = fn(u32) -> std::io::Result<IoUring>;
    let attempts: [(&'static str, Make); 3] = [
        ("coop_taskrun+single_issuer", |n| {
            IoUring::builder()
                .setup_coop_taskrun()
                .setup_single_issuer()
                .build(n)
        }),
        ("coop_taskrun", |n| {
            IoUring::builder().setup_coop_taskrun().build(n)
        }),
        ("none", IoUring::new),
    ];
    let mut last = std::io::Error::from_raw_os_error(libc::EINVAL);
    for (flags, make) in attempts {
        match make(entries) {
            Ok(ring) => {
                let mut probe = io_uring::Probe::new();
                ring.submitter().register_probe(&mut probe)?;
                if !probe.is_supported(opcode::Readv::CODE)
                    || !probe.is_supported(opcode::Read::CODE)
                {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::Unsupported,
                        "the kernel's io_uring lacks READ/READV",
                    ));
                }
                return Ok((ring, flags));
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// A job on the ring thread. Per-op state exists only where it is needed, so a job of a million
/// reads costs the ring thread nothing per read beyond the job itself: iovec arrays for the
/// multi-piece reads in flight, and progress for reads a short read left partial.
struct Active {
    job: ReadJob,
    reply: Option<Reply>,
    /// The next op never submitted yet.
    next: usize,
    /// Ops to submit again (short reads, `EINTR`/`EAGAIN`).
    retry: Vec<usize>,
    /// The job is in the driver's queue.
    queued: bool,
    /// The iovecs of each multi-piece op in flight, from its first unread byte; dropped only
    /// after the op's completion is reaped.
    iovs: HashMap<usize, Vec<libc::iovec>>,
    /// Bytes landed, for ops a short read left partial.
    progress: HashMap<usize, usize>,
    /// Ops not yet finished (queued, in flight, or waiting to be resubmitted).
    unfinished: usize,
    in_flight: usize,
    error: Option<JobError>,
}

// SAFETY: the raw pointers in `iovs` point into `job.bufs`, which `Active` owns; moving an
// `Active` between threads moves the owner with them.
unsafe impl Send for Active {}

struct Driver {
    ring: IoUring,
    jobs: Vec<Option<Active>>,
    free: Vec<usize>,
    /// Job slots with ops to submit, in arrival order.
    queue: VecDeque<usize>,
    ops_in_flight: usize,
    bytes_in_flight: usize,
    budget: Budget,
}

impl Driver {
    fn new(ring: IoUring, budget: Budget) -> Driver {
        Driver {
            ring,
            budget,
            jobs: Vec::new(),
            free: Vec::new(),
            queue: VecDeque::new(),
            ops_in_flight: 0,
            bytes_in_flight: 0,
        }
    }

    fn run(mut self, rx: &Receiver<Request>) {
        let mut open = true;
        loop {
            if self.ops_in_flight == 0 && self.queue.is_empty() {
                if !open {
                    return;
                }
                // Idle: block until work arrives (or every handle is gone).
                match rx.recv() {
                    Ok(req) => self.admit(req),
                    Err(_) => return,
                }
            }
            while open {
                match rx.try_recv() {
                    Ok(req) => self.admit(req),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => open = false,
                }
            }
            self.fill();
            if self.ops_in_flight == 0 {
                continue;
            }
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
                Err(e) => {
                    // The ring itself failed: nothing in flight can be trusted to complete.
                    // Fail every job; their memory stays owned by this thread, which parks
                    // forever rather than free buffers the kernel may still write.
                    tracing::error!(error = %e, "io_uring submit failed; the ring thread stops");
                    for a in self.jobs.iter_mut().flatten() {
                        if let Some(reply) = a.reply.take() {
                            let _ = reply.send(Err(JobError::new(
                                &a.job,
                                0,
                                std::io::Error::new(e.kind(), e.to_string()),
                            )));
                        }
                    }
                    loop {
                        std::thread::park();
                    }
                }
            }
            self.reap();
        }
    }

    fn admit(&mut self, req: Request) {
        let Request { job, reply } = req;
        if let Err(e) = job.validate() {
            let _ = reply.send(Err(JobError::new(&job, 0, e)));
            return;
        }
        if job.ops.is_empty() {
            let _ = reply.send(Ok(job));
            return;
        }
        let n = job.ops.len();
        let slot = self.free.pop().unwrap_or_else(|| {
            self.jobs.push(None);
            self.jobs.len() - 1
        });
        self.queue.push_back(slot);
        if let Some(s) = self.jobs.get_mut(slot) {
            *s = Some(Active {
                job,
                reply: Some(reply),
                next: 0,
                retry: Vec::new(),
                queued: true,
                iovs: HashMap::new(),
                progress: HashMap::new(),
                unfinished: n,
                in_flight: 0,
                error: None,
            });
        }
    }

    /// Pushes queued ops into the submission queue within the budgets.
    fn fill(&mut self) {
        while self.ops_in_flight < self.budget.ops.max(1)
            && (self.bytes_in_flight < self.budget.bytes || self.ops_in_flight == 0)
        {
            let Some(&slot) = self.queue.front() else {
                return;
            };
            let Some(a) = self.jobs.get_mut(slot).and_then(Option::as_mut) else {
                self.queue.pop_front();
                continue;
            };
            if a.error.is_some() {
                // The job already failed: count its unsubmitted ops as finished without
                // reading them.
                let skipped = a.job.ops.len().saturating_sub(a.next) + a.retry.len();
                a.next = a.job.ops.len();
                a.retry.clear();
                a.unfinished = a.unfinished.saturating_sub(skipped);
                a.queued = false;
                self.queue.pop_front();
                self.finish_if_done(slot);
                continue;
            }
            let op = match a.retry.pop() {
                Some(op) => op,
                None if a.next < a.job.ops.len() => {
                    a.next += 1;
                    a.next - 1
                }
                None => {
                    a.queued = false;
                    self.queue.pop_front();
                    continue;
                }
            };
            let Some((entry, len)) = sqe(a, slot, op) else {
                a.unfinished -= 1;
                self.finish_if_done(slot);
                continue;
            };
            // SAFETY: the entry names memory owned by `self.jobs[slot]` (the job's buffer and,
            // for a READV, the op's iovec array in `iovs`), which is not freed, moved out or
            // resized until the op's completion is reaped (`finish_if_done` runs only when
            // `in_flight == 0`; an op's iovecs are replaced only when it is submitted again,
            // after its completion).
            let pushed = unsafe { self.ring.submission().push(&entry) };
            if pushed.is_err() {
                // The queue is full: submit what is there, then try again.
                a.retry.push(op);
                if let Err(e) = self.ring.submit() {
                    tracing::warn!(error = %e, "io_uring submit failed while draining a full queue");
                }
                if self.ring.submission().is_full() {
                    return;
                }
                continue;
            }
            a.in_flight += 1;
            self.ops_in_flight += 1;
            self.bytes_in_flight += len;
        }
    }

    /// Puts `slot` back in the queue (an op of it must be submitted again).
    fn requeue(&mut self, slot: usize) {
        if let Some(a) = self.jobs.get_mut(slot).and_then(Option::as_mut) {
            if !a.queued {
                a.queued = true;
                self.queue.push_back(slot);
            }
        }
    }

    fn reap(&mut self) {
        let cqes: Vec<(u64, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (data, res) in cqes {
            let slot = (data >> 32) as usize;
            let op = (data & 0xffff_ffff) as usize;
            self.ops_in_flight = self.ops_in_flight.saturating_sub(1);
            let Some(a) = self.jobs.get_mut(slot).and_then(Option::as_mut) else {
                continue;
            };
            a.in_flight -= 1;
            let (need, total) = match a.job.ops.get(op) {
                Some(o) => (o.need, a.job.op_len(o)),
                None => (0, 0),
            };
            let done_before = a.progress.get(&op).copied().unwrap_or(0);
            self.bytes_in_flight = self
                .bytes_in_flight
                .saturating_sub(total - done_before.min(total));
            let finished = if res < 0 {
                let errno = -res;
                if errno == libc::EINTR || errno == libc::EAGAIN {
                    a.retry.push(op);
                    self.requeue(slot);
                    false
                } else {
                    if a.error.is_none() {
                        a.error = Some(JobError::new(
                            &a.job,
                            op,
                            std::io::Error::from_raw_os_error(errno),
                        ));
                    }
                    true
                }
            } else if res == 0 {
                if done_before < need && a.error.is_none() {
                    a.error = Some(JobError::new(&a.job, op, eof_error(done_before, need)));
                }
                true
            } else {
                let done = done_before + res as usize;
                if done >= need {
                    true
                } else {
                    // Short read: resubmit the rest.
                    a.progress.insert(op, done);
                    a.retry.push(op);
                    self.requeue(slot);
                    false
                }
            };
            if finished {
                if let Some(a) = self.jobs.get_mut(slot).and_then(Option::as_mut) {
                    // The kernel is done with the op: its iovecs and progress can go.
                    a.iovs.remove(&op);
                    a.progress.remove(&op);
                    a.unfinished -= 1;
                }
                self.finish_if_done(slot);
            }
        }
    }

    /// Answers and frees a job once none of its ops is queued or in flight.
    fn finish_if_done(&mut self, slot: usize) {
        let done =
            matches!(self.jobs.get(slot), Some(Some(a)) if a.unfinished == 0 && a.in_flight == 0);
        if !done {
            return;
        }
        if let Some(a) = self.jobs.get_mut(slot).and_then(Option::take) {
            self.free.push(slot);
            let result = match a.error {
                Some(e) => Err(e),
                None => Ok(a.job),
            };
            if let Some(reply) = a.reply {
                // The caller may have gone away; the job is freed here either way, after its
                // last completion.
                let _ = reply.send(result);
            }
        }
    }
}

/// Builds the submission entry for the rest of op `op` of job `a` (in slot `slot`): a `READ` for
/// a single remaining piece, a `READV` otherwise (its iovecs kept in `a.iovs` until the op's
/// completion is reaped). Returns the entry and the bytes it asks for.
fn sqe(a: &mut Active, slot: usize, op: usize) -> Option<(io_uring::squeue::Entry, usize)> {
    let o = a.job.ops.get(op)?;
    let file = a.job.files.get(o.file)?;
    let done = a.progress.get(&op).copied().unwrap_or(0);
    // The first piece not yet fully read, and how much of it has landed.
    let pieces = a.job.pieces.get(o.pieces.clone())?;
    let mut skip = done;
    let mut first = pieces.len();
    for (i, p) in pieces.iter().enumerate() {
        if skip < p.len {
            first = i;
            break;
        }
        skip -= p.len;
    }
    let rest = pieces.get(first..)?;
    if rest.is_empty() {
        return None;
    }
    let bases: Vec<*mut u8> = a.job.bufs.iter_mut().map(|b| b.as_mut_ptr()).collect();
    let iov = |p: &Piece, skip: usize| libc::iovec {
        iov_base: bases
            .get(p.buf)
            .map_or(std::ptr::null_mut(), |b| b.wrapping_add(p.at + skip))
            .cast(),
        iov_len: p.len - skip,
    };
    let len: usize = rest.iter().map(|p| p.len).sum::<usize>() - skip;
    let user_data = ((slot as u64) << 32) | op as u64;
    let fd = types::Fd(file.fd());
    let offset = o.offset + done as u64;
    let entry = match rest {
        [p] => {
            let v = iov(p, skip);
            opcode::Read::new(fd, v.iov_base.cast(), v.iov_len as u32)
                .offset(offset)
                .build()
        }
        _ => {
            let iovs: Vec<libc::iovec> = rest
                .iter()
                .enumerate()
                .map(|(i, p)| iov(p, if i == 0 { skip } else { 0 }))
                .collect();
            let (ptr, n) = (iovs.as_ptr(), iovs.len() as u32);
            // Moving the Vec into the map moves its handle, not its heap buffer: `ptr` stays
            // valid until the entry is removed, after the op's completion is reaped.
            a.iovs.insert(op, iovs);
            opcode::Readv::new(fd, ptr, n).offset(offset).build()
        }
    };
    Some((entry.user_data(user_data), len))
}
