//! Worker threads for async gathers: everything a gather does that may block (offset-table
//! page faults, waiting for the ring, checksums, inflate, mmap page faults) runs here, never on
//! the caller's async runtime.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, OnceLock};

type Task = Box<dyn FnOnce() + Send + 'static>;

static STARTED: AtomicU64 = AtomicU64::new(0);
static FINISHED: AtomicU64 = AtomicU64::new(0);

/// Counters of the async gathers run by the worker pools.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Gathers handed to a worker pool.
    pub gathers_started: u64,
    /// Gathers whose work is over: answered, abandoned before starting, or run to the end
    /// after their future was dropped.
    pub gathers_finished: u64,
}

/// The worker pools' counters (process-wide).
pub fn stats() -> Stats {
    Stats {
        gathers_started: STARTED.load(Ordering::Acquire),
        gathers_finished: FINISHED.load(Ordering::Acquire),
    }
}

/// A fixed set of worker threads, started on first use, that exit when the pool is dropped.
#[derive(Debug)]
pub struct WorkerPool {
    threads: usize,
    tx: OnceLock<Option<Mutex<Sender<Task>>>>,
}

impl WorkerPool {
    /// A pool of `threads` workers (at least one), not started yet.
    pub fn new(threads: usize) -> WorkerPool {
        WorkerPool {
            threads: threads.max(1),
            tx: OnceLock::new(),
        }
    }

    fn sender(&self) -> Option<&Mutex<Sender<Task>>> {
        self.tx
            .get_or_init(|| {
                let (tx, rx) = mpsc::channel::<Task>();
                let rx = Arc::new(Mutex::new(rx));
                let mut started = 0;
                for i in 0..self.threads {
                    let rx = Arc::clone(&rx);
                    let spawned = std::thread::Builder::new()
                        .name(format!("zrecord-worker-{i}"))
                        .spawn(move || loop {
                            let task = match rx.lock() {
                                Ok(r) => r.recv(),
                                Err(_) => return,
                            };
                            match task {
                                Ok(task) => task(),
                                Err(_) => return,
                            }
                        });
                    if spawned.is_ok() {
                        started += 1;
                    }
                }
                (started > 0).then(|| Mutex::new(tx))
            })
            .as_ref()
    }

    /// Runs `task` on a worker thread. If no worker thread could be started, runs it on a fresh
    /// thread (and if even that fails, on the caller's thread: correct, if not asynchronous).
    pub fn spawn(&self, task: impl FnOnce() + Send + 'static) {
        STARTED.fetch_add(1, Ordering::AcqRel);
        let task: Task = Box::new(move || {
            task();
            FINISHED.fetch_add(1, Ordering::AcqRel);
        });
        let task = match self.sender() {
            Some(tx) => match tx.lock() {
                Ok(tx) => match tx.send(task) {
                    Ok(()) => return,
                    Err(mpsc::SendError(t)) => t,
                },
                Err(_) => task,
            },
            None => task,
        };
        let slot = Arc::new(Mutex::new(Some(task)));
        let theirs = Arc::clone(&slot);
        let spawned = std::thread::Builder::new().spawn(move || {
            if let Some(t) = theirs.lock().ok().and_then(|mut g| g.take()) {
                t();
            }
        });
        if spawned.is_err() {
            if let Some(t) = slot.lock().ok().and_then(|mut g| g.take()) {
                t();
            }
        }
    }
}
