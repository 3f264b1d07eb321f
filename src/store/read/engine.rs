//! zrecord's read backends (io_uring, the pread pool, mmap, auto), the process-wide pools they
//! run on, and the engine a dataset reads with.

use super::backend::{ReadBackend, ZeroCopy};
use super::config::{forced_backend, Backend, ReadConfig};
use super::window::{Window, Windowed};
use crate::error::{Error, Result};
use crate::io::fork::ForkLocal;
use crate::io::job::ReadJob;
use crate::io::pool::WorkerPool;
use crate::io::psync::PsyncPool;
use std::sync::{Arc, Mutex, OnceLock};

/// io_uring: one ring thread per engine keeps many reads of many jobs in flight.
#[cfg(feature = "uring")]
#[derive(Debug)]
struct UringBackend {
    ring: Arc<crate::io::uring::Ring>,
}

#[cfg(feature = "uring")]
impl ReadBackend for UringBackend {
    fn name(&self) -> &str {
        "uring"
    }

    fn read(&self, job: ReadJob) -> Result<ReadJob> {
        Ok(self.ring.run(job)?)
    }
}

/// `preadv` on a pool of threads, with the caller working too.
#[derive(Debug)]
struct PsyncBackend {
    pool: Arc<PsyncPool>,
}

impl ReadBackend for PsyncBackend {
    fn name(&self) -> &str {
        "psync"
    }

    fn read(&self, job: ReadJob) -> Result<ReadJob> {
        Ok(self.pool.run(job)?)
    }
}

/// A zero-copy policy over a backend that reads what cannot be mapped (deflate records are
/// inflated straight from the mapping; `O_DIRECT` jobs and chunks that cannot be mapped go to
/// `io`). [`Backend::Mmap`] is `Always`, [`Backend::Auto`] is `WhenResident`.
#[derive(Debug)]
struct Mapped {
    name: &'static str,
    policy: ZeroCopy,
    io: Arc<dyn ReadBackend>,
}

impl ReadBackend for Mapped {
    fn name(&self) -> &str {
        self.name
    }

    fn read(&self, job: ReadJob) -> Result<ReadJob> {
        self.io.read(job)
    }

    fn zero_copy(&self) -> ZeroCopy {
        self.policy
    }

    fn wants_lookahead(&self) -> bool {
        self.io.wants_lookahead()
    }

    fn lookahead(&self, session: u64, job: &ReadJob) {
        self.io.lookahead(session, job);
    }

    fn end_lookahead(&self, session: u64) {
        self.io.end_lookahead(session);
    }
}

/// The threads of one set of budgets (queue depth, bytes in flight, thread budget), shared by
/// every dataset opened with them. Each part starts on first use and lives as long as the
/// process: a program that opens datasets with k distinct budgets has k sets at most.
#[derive(Debug)]
pub(crate) struct Pools {
    key: PoolKey,
    #[cfg(feature = "uring")]
    ring: OnceLock<Option<Arc<crate::io::uring::Ring>>>,
    psync: OnceLock<std::result::Result<Arc<PsyncPool>, String>>,
    pub(crate) finish: super::finish::Finisher,
    pub(crate) workers: WorkerPool,
    /// The read window of the loaders' announced batches, within the bytes-in-flight budget.
    pub(crate) window: Arc<Window>,
}

/// The budgets a set of pools serves: queue depth, bytes in flight, threads.
type PoolKey = (usize, usize, usize);

/// The budgets of `cfg`.
fn pool_key(cfg: &ReadConfig) -> PoolKey {
    (cfg.queue_depth, cfg.max_bytes_in_flight, cfg.threads)
}

/// Cores the engine may keep busy: `available_parallelism` (cgroups and the affinity mask:
/// under `taskset -c 0` it is 1), at most 8. Asked once.
pub(crate) fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, std::num::NonZeroUsize::get)
            .min(8)
    })
}

impl Pools {
    fn new(queue_depth: usize, bytes: usize, threads: usize) -> Pools {
        let finishers = cores().min(threads);
        Pools {
            key: (queue_depth, bytes, threads),
            #[cfg(feature = "uring")]
            ring: OnceLock::new(),
            psync: OnceLock::new(),
            finish: super::finish::Finisher::new(finishers),
            workers: WorkerPool::new((2 * cores()).clamp(2, threads)),
            window: Arc::new(Window::new(bytes, (threads / 4).clamp(1, 4))),
        }
    }

    /// This process's pools for the budgets `key`: an existing set if a dataset used the same
    /// ones. A child of `fork()` has a registry of its own (the parent's, and its lock, which a
    /// parent thread may have held at the fork, are left alone), so it starts its own threads.
    fn get(key: PoolKey) -> Arc<Pools> {
        static ALL: ForkLocal<Mutex<Vec<Arc<Pools>>>> = ForkLocal::new();
        let mut all = ALL
            .get_or_init(|_| Mutex::new(Vec::new()))
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(p) = all.iter().find(|p| p.key == key) {
            return Arc::clone(p);
        }
        let p = Arc::new(Pools::new(key.0, key.1, key.2));
        all.push(Arc::clone(&p));
        p
    }

    /// The ring, or `None` where io_uring cannot be set up (reported once per process).
    #[cfg(feature = "uring")]
    fn ring(&self) -> Option<Arc<crate::io::uring::Ring>> {
        self.ring
            .get_or_init(|| {
                let budget = crate::io::uring::Budget {
                    ops: self.key.0,
                    bytes: self.key.1,
                };
                match crate::io::uring::Ring::start(budget) {
                    Ok(r) => {
                        tracing::info!(flags = r.flags, "zrecord reads through io_uring");
                        Some(Arc::new(r))
                    }
                    Err(e) => {
                        static WARNED: std::sync::Once = std::sync::Once::new();
                        WARNED.call_once(|| {
                            tracing::warn!(error = %e, "io_uring is unavailable; zrecord reads through the pread pool");
                        });
                        None
                    }
                }
            })
            .clone()
    }

    fn psync(&self) -> Result<Arc<PsyncPool>> {
        let threads = self.key.2.saturating_sub(1).clamp(1, self.key.0.max(1));
        self.psync
            .get_or_init(|| {
                PsyncPool::new(threads)
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .clone()
            .map_err(|reason| Error::ThreadSpawn {
                what: "the pread pool",
                reason,
            })
    }

    /// The backend that reads into memory: io_uring unless `backend` is `Psync` or io_uring is
    /// unavailable, the pread pool otherwise.
    fn io(&self, backend: Backend) -> Result<Arc<dyn ReadBackend>> {
        #[cfg(feature = "uring")]
        if backend != Backend::Psync {
            if let Some(ring) = self.ring() {
                return Ok(Arc::new(UringBackend { ring }));
            }
        }
        #[cfg(not(feature = "uring"))]
        if backend == Backend::Uring {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                tracing::warn!("zrecord was built without the `uring` feature; io_uring reads go through the pread pool");
            });
        }
        let _ = backend;
        Ok(Arc::new(PsyncBackend {
            pool: self.psync()?,
        }))
    }

    /// [`Pools::io`] behind the read window.
    fn windowed(&self, backend: Backend) -> Result<Arc<dyn ReadBackend>> {
        Ok(Arc::new(Windowed {
            io: self.io(backend)?,
            window: Arc::clone(&self.window),
        }))
    }

    /// zrecord's backend `want` on these pools, and the backend it really is (`Psync` for
    /// `Uring` where io_uring is unavailable).
    fn backend(&self, want: Backend) -> Result<(Arc<dyn ReadBackend>, Backend)> {
        let io = self.windowed(want)?;
        let effective = match want {
            Backend::Uring if io.name() != "uring" => Backend::Psync,
            b => b,
        };
        let backend: Arc<dyn ReadBackend> = match effective {
            Backend::Mmap => Arc::new(Mapped {
                name: "mmap",
                policy: ZeroCopy::Always,
                io,
            }),
            Backend::Auto => Arc::new(Mapped {
                name: "auto",
                policy: ZeroCopy::WhenResident,
                io,
            }),
            _ => io,
        };
        Ok((backend, effective))
    }
}

/// One of zrecord's own backends, made again in each process: after `fork()` the child reads
/// through rings and threads of its own, never through its parent's (whose threads it does not
/// have; an io_uring instance is shared across `fork()`, so submitting to the parent's ring
/// would also disturb the parent).
#[derive(Debug)]
struct PerProcess {
    key: PoolKey,
    /// The backend it is (after `ZRECORD_IO` and the io_uring fallback of the first process).
    backend: Backend,
    /// This process's: the backend, or why it could not be made.
    built: ForkLocal<std::result::Result<Arc<dyn ReadBackend>, String>>,
}

impl PerProcess {
    fn current(&self) -> Result<&Arc<dyn ReadBackend>> {
        self.built
            .get_or_init(|_| {
                Pools::get(self.key)
                    .backend(self.backend)
                    .map(|(b, _)| b)
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|reason| Error::ThreadSpawn {
                what: "the read backend of a forked process",
                reason: reason.clone(),
            })
    }
}

impl ReadBackend for PerProcess {
    fn name(&self) -> &str {
        self.backend.name()
    }

    fn read(&self, job: ReadJob) -> Result<ReadJob> {
        self.current()?.read(job)
    }

    fn zero_copy(&self) -> ZeroCopy {
        match self.backend {
            Backend::Mmap => ZeroCopy::Always,
            Backend::Auto => ZeroCopy::WhenResident,
            _ => ZeroCopy::Never,
        }
    }

    fn refetch(&self, path: &std::path::Path) -> bool {
        self.current().is_ok_and(|b| b.refetch(path))
    }

    fn wants_lookahead(&self) -> bool {
        self.current().is_ok_and(|b| b.wants_lookahead())
    }

    fn lookahead(&self, session: u64, job: &ReadJob) {
        if let Ok(b) = self.current() {
            b.lookahead(session, job);
        }
    }

    fn end_lookahead(&self, session: u64) {
        if let Ok(b) = self.current() {
            b.end_lookahead(session);
        }
    }
}

/// What a dataset reads with: its backend, the pools, and the options of its [`ReadConfig`].
#[derive(Debug)]
pub(crate) struct Engine {
    pub(crate) backend: Arc<dyn ReadBackend>,
    /// The zrecord backend in use (`None` for a custom one).
    pub(crate) effective: Option<Backend>,
    /// The budgets of its pools.
    key: PoolKey,
    /// This process's pools (see [`Engine::pools`]).
    pools: ForkLocal<Arc<Pools>>,
    pub(crate) verify_checksums: bool,
    pub(crate) direct_io: bool,
    /// Each field of a batch lies end to end in a buffer of its own
    /// ([`ReadConfig::with_columns`]).
    pub(crate) columns: bool,
    /// The read window's residency probes: announced batches found resident in a row, and
    /// announcements seen (see [`Engine::probe_lookahead`]).
    warm_streak: std::sync::atomic::AtomicU32,
    announced: std::sync::atomic::AtomicU64,
}

impl Engine {
    /// This process's pools for the engine's budgets: a child of `fork()` gets its own on first
    /// use (worker, finishing and window threads of its own; the parent's are not in it).
    pub(crate) fn pools(&self) -> &Arc<Pools> {
        self.pools.get_or_init(|_| Pools::get(self.key))
    }

    /// Whether the read window should probe this announced batch for residency: every batch
    /// while batches turn out cold, then (after a run of warm ones) one in 2, 4, … up to 64,
    /// so warm data costs one atomic add per announced batch. A batch not probed is taken as
    /// warm: when data goes cold after a warm run, up to 63 batches are read without a window
    /// before a probe sees it.
    pub(crate) fn probe_lookahead(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let streak = self.warm_streak.load(Relaxed);
        let n = self.announced.fetch_add(1, Relaxed);
        streak == 0 || n.is_multiple_of(1u64 << streak.min(6))
    }

    /// What a probe found: resident (the warm run grows) or not (probe every batch again).
    pub(crate) fn probed(&self, resident: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        if resident {
            let _ = self
                .warm_streak
                .fetch_update(Relaxed, Relaxed, |s| Some(s.saturating_add(1)));
        } else {
            self.warm_streak.store(0, Relaxed);
        }
    }

    /// The engine for `cfg`: its custom backend, or the zrecord backend it names after
    /// `ZRECORD_IO` (an unknown value is an error), with `Uring` on the pread pool where
    /// io_uring is unavailable.
    pub(crate) fn new(cfg: &ReadConfig) -> Result<Engine> {
        let key = pool_key(cfg);
        let pools = Pools::get(key);
        let (backend, effective) = match &cfg.custom {
            Some(b) => (Arc::clone(b), None),
            None => {
                let want = forced_backend()?.unwrap_or(cfg.backend);
                let (built, effective) = pools.backend(want)?;
                let backend: Arc<dyn ReadBackend> = Arc::new(PerProcess {
                    key,
                    backend: effective,
                    built: ForkLocal::with(Ok(built)),
                });
                (backend, Some(effective))
            }
        };
        Ok(Engine {
            backend,
            effective,
            key,
            pools: ForkLocal::with(pools),
            verify_checksums: cfg.verify_checksums,
            direct_io: cfg.direct_io,
            columns: cfg.columns,
            warm_streak: Default::default(),
            announced: Default::default(),
        })
    }
}

/// The backend a dataset opened with `cfg` reads through (after `ZRECORD_IO`), for wrapping in
/// a backend of your own: a fault injector, a tracer.
pub fn read_backend(cfg: &ReadConfig) -> Result<Arc<dyn ReadBackend>> {
    Ok(Engine::new(cfg)?.backend)
}

/// True if io_uring can be set up in this process (starts a ring thread for the default
/// budgets on first call).
pub fn uring_available() -> bool {
    #[cfg(feature = "uring")]
    {
        Pools::get(pool_key(&ReadConfig::default()))
            .ring()
            .is_some()
    }
    #[cfg(not(feature = "uring"))]
    {
        false
    }
}
