//! A snapshot's chunk files: opened on first read, closed least-recently-used under a
//! process-wide budget derived from `RLIMIT_NOFILE`, and mapped under a budget derived from
//! `vm.max_map_count`, so the number of chunks a process can read is bounded by the format
//! (65,535 per dataset), not by its descriptors. Other files a snapshot reads again and again
//! (the offset-table page files of a dataset on an object store, `store/paged.rs`) count
//! against the same descriptor budget ([`BudgetedFile`]).
//!
//! A handle records the identity (device, inode, generation, birth time) of the file its commit named when
//! the snapshot was loaded. Every later open checks it: a chunk that a rebalance removed, or
//! whose id a later chunk reuses, is an error ([`Error::ChunkGone`]), never another file's bytes.

use crate::error::{Error, Result};
use crate::format::layout;
use crate::format::meta::Meta;
use crate::io::coalesce::Coalesce;
use crate::io::fork::{take_unlocked, ForkLocal};
use crate::io::fs;
use crate::io::job::{FileId, ReadFile};
use crate::io::mmap::SharedMap;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard, PoisonError, Weak};
use std::time::SystemTime;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Which budget a resource counts against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Fd,
    Map,
}

/// What making room took from handles: closed and unmapped only once the ring's lock is
/// released, so other opens do not wait behind `close` and `munmap`.
#[derive(Default)]
struct Taken {
    files: Vec<Arc<ReadFile>>,
    maps: Vec<SharedMap>,
    others: Vec<Arc<std::fs::File>>,
}

/// A file other than a chunk that holds one descriptor counted in the process's descriptor
/// budget, opened on use and closed by the budget when least recently used, like a chunk's:
/// an offset-table page file (`store/paged.rs`). It takes [`reserve_descriptor`] before it
/// opens its file and [`enlist_file`]s itself once it holds it; it gives the reservation back
/// with [`release_descriptor`] when it drops the file itself.
pub(crate) trait BudgetedFile: Send + Sync {
    /// Its reference bit: set on every use, cleared by the budget's sweep.
    fn used(&self) -> &AtomicBool;

    /// Lets go of its descriptor, if it holds one (the budget counts it back): the file is
    /// closed once the last use in progress ends. It must not take the budget's lock.
    fn take(&self) -> Option<Arc<std::fs::File>>;
}

/// What the descriptor budget's ring holds: a chunk, or another budgeted file.
enum Holder {
    Chunk(Weak<ChunkHandle>),
    File(Weak<dyn BudgetedFile>),
}

impl Holder {
    fn alive(&self) -> bool {
        match self {
            Holder::Chunk(w) => w.strong_count() > 0,
            Holder::File(w) => w.strong_count() > 0,
        }
    }
}

/// Counts one descriptor of a [`BudgetedFile`] in the process's budget, first closing
/// least-recently-used chunks and files while the budget is full.
pub(crate) fn reserve_descriptor() {
    fds().reserve(1);
}

/// Gives back one descriptor [`reserve_descriptor`] counted (a file that could not be opened,
/// or one dropped by its owner rather than by the budget).
pub(crate) fn release_descriptor() {
    fds().unreserve(1);
}

/// Puts `file` (holding its descriptor now) in the budget's ring, where it is closed when
/// least recently used.
pub(crate) fn enlist_file(file: Weak<dyn BudgetedFile>) {
    fds().enlist_holder(Holder::File(file));
}

/// A CLOCK approximation of least-recently-used: handles holding a resource sit in a ring; a
/// use sets the handle's reference bit; making room walks the ring, giving a referenced handle
/// a second chance and closing the first unreferenced one.
///
/// A descriptor whose file a later commit unlinked is never closed by the budget: it is the
/// only way left to the file's bytes, and the snapshot holding it still reads them. It leaves
/// the ring and closes when its snapshot is dropped.
struct Budget {
    kind: Kind,
    cap: usize,
    held: AtomicUsize,
    ring: Mutex<VecDeque<Holder>>,
}

impl Budget {
    fn new(kind: Kind, cap: usize) -> Budget {
        Budget {
            kind,
            cap: cap.max(2),
            held: AtomicUsize::new(0),
            ring: Mutex::new(VecDeque::new()),
        }
    }

    /// This process's budget of `kind`, capped at `cap()`, taking over `parent`'s (the budget
    /// of the process this one was forked from): the handles in its ring hold descriptors and
    /// mappings this process inherited, so they stay counted and closable. A ring some thread
    /// of the parent held at the fork stays locked forever: then the count is kept and the
    /// ring starts empty (those handles are closed when dropped, never for room).
    fn of_process(parent: Option<&Budget>, kind: Kind, cap: impl FnOnce() -> usize) -> Budget {
        let Some(parent) = parent else {
            return Budget::new(kind, cap());
        };
        let b = Budget::new(kind, parent.cap);
        b.held
            .store(parent.held.load(Ordering::Acquire), Ordering::Release);
        if let Some(ring) = take_unlocked(&parent.ring) {
            *lock(&b.ring) = ring;
        }
        b
    }

    /// Counts `n` new resources, first closing least-recently-used ones while at the cap.
    fn reserve(&self, n: usize) {
        let mut taken = Taken::default();
        {
            let mut ring = lock(&self.ring);
            let mut steps = 2 * ring.len() + 2;
            while self.held.load(Ordering::Acquire) + n > self.cap && steps > 0 {
                steps -= 1;
                let Some(entry) = ring.pop_front() else { break };
                let w = match entry {
                    Holder::Chunk(w) => w,
                    Holder::File(w) => {
                        let Some(f) = w.upgrade() else { continue };
                        if f.used().swap(false, Ordering::AcqRel) {
                            ring.push_back(Holder::File(w));
                            continue;
                        }
                        if let Some(file) = f.take() {
                            self.unreserve(1);
                            taken.others.push(file);
                        }
                        continue;
                    }
                };
                let Some(h) = w.upgrade() else { continue };
                if h.used(self.kind).swap(false, Ordering::AcqRel) {
                    ring.push_back(Holder::Chunk(w));
                    continue;
                }
                // A cached copy has its object to fall back to: closing it frees its blocks.
                if self.kind == Kind::Fd && h.fallback.is_none() && h.unlinked() {
                    continue;
                }
                // Handles never take the ring's lock while holding their own, so this cannot
                // deadlock.
                h.release(self.kind, self, &mut taken);
            }
            self.held.fetch_add(n, Ordering::AcqRel);
        }
        drop(taken);
    }

    fn unreserve(&self, n: usize) {
        let _ = self
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| {
                Some(h.saturating_sub(n))
            });
    }

    /// Puts `h` in the ring. Entries of dropped handles are swept out once they outnumber the
    /// live ones, so a process that opens and drops snapshots forever keeps a bounded ring.
    fn enlist(&self, h: &Arc<ChunkHandle>) {
        self.enlist_holder(Holder::Chunk(Arc::downgrade(h)));
    }

    fn enlist_holder(&self, h: Holder) {
        let mut ring = lock(&self.ring);
        ring.push_back(h);
        if ring.len() > 2 * self.held.load(Ordering::Acquire) + 64 {
            ring.retain(Holder::alive);
        }
    }
}

/// Descriptors that reads in flight hold beyond the budget (a job keeps its files open until it
/// completes, whatever the budget closes meanwhile): half the budget, shared by every gather in
/// the process. A gather takes the permits for one job's files at once, so two gathers can never
/// each hold part of what the other waits for.
struct JobFiles {
    max: usize,
    free: Mutex<usize>,
    freed: Condvar,
}

/// Permits for the files of one job; given back when dropped.
pub(crate) struct JobPermit {
    n: usize,
    /// The permits of the process that took them.
    of: &'static JobFiles,
}

impl Drop for JobPermit {
    fn drop(&mut self) {
        let mut free = lock(&self.of.free);
        *free += self.n;
        drop(free);
        self.of.freed.notify_all();
    }
}

/// This process's job permits. A child of `fork()` starts with all of them free: the permits
/// its parent's threads held at the fork belong to jobs that do not exist in the child.
fn job_files() -> &'static JobFiles {
    static JOB_FILES: ForkLocal<JobFiles> = ForkLocal::new();
    JOB_FILES.get_or_init(|_| {
        let max = (fds().cap / 2).max(1);
        JobFiles {
            max,
            free: Mutex::new(max),
            freed: Condvar::new(),
        }
    })
}

/// Files one job may name at most.
pub(crate) fn max_job_files() -> usize {
    job_files().max
}

/// Permits for `n` (at most [`max_job_files`]) descriptors held by a job, if they are free
/// now: for reads that may be skipped (a loader's announced batches), never waited for.
pub(crate) fn try_job_permit(n: usize) -> Option<JobPermit> {
    let of = job_files();
    let n = n.clamp(1, of.max);
    let mut free = lock(&of.free);
    if *free < n {
        return None;
    }
    *free -= n;
    Some(JobPermit { n, of })
}

/// Waits until `n` (at most [`max_job_files`]) descriptors may be held by a job.
pub(crate) fn job_permit(n: usize) -> JobPermit {
    let of = job_files();
    let n = n.clamp(1, of.max);
    let mut free = lock(&of.free);
    while *free < n {
        free = of.freed.wait(free).unwrap_or_else(PoisonError::into_inner);
    }
    *free -= n;
    JobPermit { n, of }
}

/// Descriptors: a quarter of the soft `RLIMIT_NOFILE` (the rest is the program's), at least 4,
/// at most 65,536. One budget per process ([`Budget::of_process`]).
fn fds() -> &'static Budget {
    static FDS: ForkLocal<Budget> = ForkLocal::new();
    FDS.get_or_init(|parent| {
        Budget::of_process(parent, Kind::Fd, || {
            fs::descriptor_limit().map_or(65_536, |l| (l / 4).clamp(4, 65_536) as usize)
        })
    })
}

/// Mappings: a quarter of `vm.max_map_count`, at most 16,384. One budget per process.
fn maps() -> &'static Budget {
    static MAPS: ForkLocal<Budget> = ForkLocal::new();
    MAPS.get_or_init(|parent| {
        Budget::of_process(parent, Kind::Map, || {
            fs::mapping_limit().map_or(16_384, |l| (l / 4).clamp(16, 16_384) as usize)
        })
    })
}

/// Descriptors the chunk budget allows, for tests and reports.
#[cfg_attr(
    not(feature = "diagnostics"),
    allow(
        dead_code,
        reason = "used by object-store pushes and by `zrecord::diagnostics`"
    )
)]
pub fn descriptor_budget() -> usize {
    fds().cap
}

#[derive(Debug, Default)]
struct Open {
    file: Option<Arc<ReadFile>>,
    direct: Option<Arc<ReadFile>>,
}

/// One committed chunk of a snapshot: its id, path and committed size, and the descriptors and
/// mapping it holds while the budgets allow.
#[derive(Debug)]
pub(crate) struct ChunkHandle {
    id: u16,
    path: PathBuf,
    size: u64,
    identity: FileId,
    /// The descriptors held, per process (see [`ChunkHandle::open`]).
    open: ForkLocal<Mutex<Open>>,
    /// The mapping held, per process (see [`ChunkHandle::mapped`]).
    map: ForkLocal<Mutex<Option<SharedMap>>>,
    fd_used: AtomicBool,
    map_used: AtomicBool,
    /// `O_DIRECT` was refused here (reported once); direct reads use the page cache.
    direct_refused: AtomicBool,
    /// Mapping failed (reported once); reads go through the I/O backend.
    map_refused: AtomicBool,
    /// For a chunk that is an object ([`ChunkAt::Object`]): the object, which only its
    /// location's backend reads (no
    /// descriptor, no mapping).
    object: Option<Arc<ReadFile>>,
    /// For a cached copy of a chunk on an object store: the object, read instead when the
    /// copy is gone (evicted, or dropped as damaged) by the time the file must be reopened.
    fallback: Option<Arc<ReadFile>>,
    /// For a cached copy: when its use was last recorded, in milliseconds since [`EPOCH`]
    /// plus one (0: never).
    used_at: AtomicU64,
    /// For a cached copy: found evicted; reads go to the object from now on.
    evicted: AtomicBool,
}

/// The clock of [`ChunkHandle::used_at`].
static EPOCH: LazyLock<std::time::Instant> = LazyLock::new(std::time::Instant::now);

/// A cached copy's use is recorded (its modification time, the chunk cache's recency) at most
/// this often per handle.
const USE_INTERVAL_MS: u64 = 1000;

/// Lets go of the descriptors and mappings this process's snapshots hold of cached copies that
/// are no longer linked (the chunk cache evicted them): their blocks are freed, and those
/// chunks are read from their objects.
#[allow(
    dead_code,
    reason = "called by the chunk caches of object-store locations (`remote/cache.rs`)"
)]
pub(crate) fn release_unlinked_copies() {
    for budget in [fds(), maps()] {
        let handles: Vec<Arc<ChunkHandle>> = lock(&budget.ring)
            .iter()
            .filter_map(|h| match h {
                Holder::Chunk(w) => w.upgrade(),
                Holder::File(_) => None,
            })
            .filter(|h| h.fallback.is_some())
            .collect();
        for h in handles {
            h.drop_if_unlinked();
        }
    }
}

impl ChunkHandle {
    fn new(
        c: &crate::format::meta::ChunkMeta,
        path: PathBuf,
        identity: FileId,
        file: Option<Arc<ReadFile>>,
        object: Option<Arc<ReadFile>>,
        fallback: Option<Arc<ReadFile>>,
    ) -> Arc<ChunkHandle> {
        Arc::new(ChunkHandle {
            id: c.id,
            path,
            size: c.size,
            identity,
            open: ForkLocal::with(Mutex::new(Open { file, direct: None })),
            map: ForkLocal::with(Mutex::new(None)),
            fd_used: AtomicBool::new(false),
            map_used: AtomicBool::new(false),
            direct_refused: AtomicBool::new(false),
            map_refused: AtomicBool::new(false),
            object,
            fallback,
            used_at: AtomicU64::new(0),
            evicted: AtomicBool::new(false),
        })
    }

    /// The descriptors this handle holds in this process. A child of `fork()` takes over the
    /// ones its parent held (inherited descriptors of the same files) unless a parent thread
    /// held the lock at the fork: then it opens the chunk again when it reads it.
    fn open(&self) -> &Mutex<Open> {
        self.open
            .get_or_init(|parent| Mutex::new(parent.and_then(take_unlocked).unwrap_or_default()))
    }

    /// The mapping this handle holds in this process, taken over from the parent's like
    /// [`ChunkHandle::open`] (mappings are inherited across `fork()`).
    fn mapped(&self) -> &Mutex<Option<SharedMap>> {
        self.map
            .get_or_init(|parent| Mutex::new(parent.and_then(take_unlocked).flatten()))
    }

    /// For a cached copy: records a use (at most once per [`USE_INTERVAL_MS`]): sets the
    /// file's modification time, the cache's recency, and lets go of the file if the cache
    /// evicted it meanwhile. Nothing for any other chunk.
    fn note_use(&self) {
        if self.fallback.is_none() || self.evicted.load(Ordering::Acquire) {
            return;
        }
        let now = u64::try_from(EPOCH.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .saturating_add(1);
        let last = self.used_at.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < USE_INTERVAL_MS {
            return;
        }
        if self
            .used_at
            .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        if self.drop_if_unlinked() {
            return;
        }
        let held = lock(self.open()).file.clone();
        let stamp = SystemTime::now();
        match held.as_ref().and_then(|f| f.local()) {
            Some(f) => {
                let _ = f.set_modified(stamp);
            }
            None => {
                let _ = std::fs::File::open(&self.path).and_then(|f| f.set_modified(stamp));
            }
        }
    }

    /// For a cached copy whose held file is no longer linked: closes its descriptors and
    /// mapping (their blocks are freed once no batch holds a slice of the mapping) and reads
    /// the object from now on. True if it did.
    fn drop_if_unlinked(&self) -> bool {
        if self.fallback.is_none() {
            return false;
        }
        let has_fd = {
            let o = lock(self.open());
            o.file.is_some() || o.direct.is_some()
        };
        let gone = match has_fd {
            true => self.unlinked(),
            // No descriptor (the budget closed it): the path, checked against the identity.
            false => match FileId::at(&self.path) {
                Ok(id) => id != self.identity,
                Err(e) => e.kind() == std::io::ErrorKind::NotFound,
            },
        };
        if !gone {
            return false;
        }
        self.let_go();
        true
    }

    /// For a cached copy: closes its descriptors and mapping and reads the object from now on.
    fn let_go(&self) {
        self.evicted.store(true, Ordering::Release);
        let mut taken = Taken::default();
        self.release(Kind::Fd, fds(), &mut taken);
        self.release(Kind::Map, maps(), &mut taken);
        drop(taken);
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// True if the chunk is read from an object (not a local file, or a cached copy in place).
    pub(crate) fn is_object(&self) -> bool {
        self.object.is_some() || (self.fallback.is_some() && self.evicted.load(Ordering::Acquire))
    }

    /// Committed size in bytes.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    fn used(&self, kind: Kind) -> &AtomicBool {
        match kind {
            Kind::Fd => &self.fd_used,
            Kind::Map => &self.map_used,
        }
    }

    /// Lets go of this handle's resources of `kind` into `taken` (called by the budget making
    /// room).
    fn release(&self, kind: Kind, budget: &Budget, taken: &mut Taken) {
        match kind {
            Kind::Fd => {
                let mut o = lock(self.open());
                let files: Vec<Arc<ReadFile>> =
                    o.file.take().into_iter().chain(o.direct.take()).collect();
                drop(o);
                budget.unreserve(files.len());
                taken.files.extend(files);
            }
            Kind::Map => {
                if let Some(m) = lock(self.mapped()).take() {
                    budget.unreserve(1);
                    taken.maps.push(m);
                }
            }
        }
    }

    /// True if a descriptor this handle holds names a file no directory links to any more (a
    /// later commit removed it): closing it would lose the file.
    fn unlinked(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        let o = lock(self.open());
        o.file
            .iter()
            .chain(o.direct.iter())
            .next()
            .and_then(|f| f.local()?.metadata().ok())
            .is_some_and(|m| m.nlink() == 0)
    }

    fn gone(&self, reason: String) -> Error {
        Error::ChunkGone {
            path: self.path.clone(),
            chunk: self.id,
            reason,
        }
    }

    /// Opens `path` (the chunk's, or a `/proc/self/fd` link to a descriptor it holds) with
    /// `flags` and checks it is still the file the commit named.
    fn open_checked(&self, path: &Path, flags: i32) -> Result<std::fs::File> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags)
            .open(path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound if path == self.path => {
                    self.gone("the file was removed by a later commit".into())
                }
                _ => Error::io(path, "open", e),
            })?;
        let id = FileId::of(&file).map_err(|e| Error::io(&self.path, "stat", e))?;
        if id != self.identity {
            return Err(self.gone(
                "a later commit replaced the file (its id was reused after a rebalance)".into(),
            ));
        }
        fs::advise_random(&file);
        Ok(file)
    }

    /// Stores `file` as this handle's plain (`direct == false`) or `O_DIRECT` descriptor,
    /// counted against the budget (`reserve(1)` was made for it), unless another thread stored
    /// one first: then theirs is returned and the reservation given back.
    fn keep(self: &Arc<Self>, file: Arc<ReadFile>) -> Arc<ReadFile> {
        let mut guard = lock(self.open());
        let o = &mut *guard;
        let (slot, other) = match file.direct {
            true => (&mut o.direct, o.file.is_some()),
            false => (&mut o.file, o.direct.is_some()),
        };
        if let Some(theirs) = slot {
            let theirs = Arc::clone(theirs);
            drop(guard);
            fds().unreserve(1);
            return theirs;
        }
        *slot = Some(Arc::clone(&file));
        drop(guard);
        if !other {
            fds().enlist(self);
        }
        file
    }

    /// The chunk's descriptor, opened (and counted) on first use.
    pub(crate) fn file(self: &Arc<Self>) -> Result<Arc<ReadFile>> {
        if let Some(r) = &self.object {
            return Ok(Arc::clone(r));
        }
        self.note_use();
        if let (true, Some(object)) = (self.evicted.load(Ordering::Acquire), &self.fallback) {
            return Ok(Arc::clone(object));
        }
        self.fd_used.store(true, Ordering::Release);
        if let Some(f) = &lock(self.open()).file {
            return Ok(Arc::clone(f));
        }
        fds().reserve(1);
        match self.open_checked(&self.path, 0) {
            Ok(f) => Ok(self.keep(Arc::new(ReadFile::local_file(
                f,
                self.path.clone(),
                false,
                self.identity,
            )))),
            Err(e) => {
                fds().unreserve(1);
                // A cached copy gone by now (evicted, or dropped as damaged): its object.
                match (&e, &self.fallback) {
                    (Error::ChunkGone { .. }, Some(object)) => Ok(Arc::clone(object)),
                    _ => Err(e),
                }
            }
        }
    }

    /// The chunk opened with `O_DIRECT`, or `None` where that is refused (reported once per
    /// chunk; reads then go through the page cache). A chunk a later commit removed or replaced
    /// is [`Error::ChunkGone`].
    pub(crate) fn direct(self: &Arc<Self>) -> Result<Option<Arc<ReadFile>>> {
        // Chunks of a dataset on an object store (cached copies included) never use O_DIRECT.
        if self.direct_refused.load(Ordering::Acquire)
            || self.object.is_some()
            || self.fallback.is_some()
        {
            return Ok(None);
        }
        self.fd_used.store(true, Ordering::Release);
        if let Some(f) = &lock(self.open()).direct {
            return Ok(Some(Arc::clone(f)));
        }
        // Reopen the very file a held descriptor names, where there is one: the path may name
        // another file by now (a rebalance removed the chunk, and a later one reused its id).
        // Without /proc, the path, checked against the chunk's identity.
        let held = lock(self.open()).file.clone();
        fds().reserve(1);
        let opened = match &held {
            Some(f) => {
                let link = PathBuf::from(format!("/proc/self/fd/{}", f.fd()));
                match self.open_checked(&link, libc::O_DIRECT) {
                    Err(Error::Io { source, .. })
                        if matches!(
                            source.kind(),
                            std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                        ) =>
                    {
                        self.open_checked(&self.path, libc::O_DIRECT)
                    }
                    r => r,
                }
            }
            None => self.open_checked(&self.path, libc::O_DIRECT),
        };
        drop(held);
        match opened {
            Ok(f) => Ok(Some(self.keep(Arc::new(ReadFile::local_file(
                f,
                self.path.clone(),
                true,
                self.identity,
            ))))),
            Err(e @ Error::ChunkGone { .. }) => {
                fds().unreserve(1);
                Err(e)
            }
            Err(e) => {
                fds().unreserve(1);
                if !self.direct_refused.swap(true, Ordering::AcqRel) {
                    tracing::warn!(path = %self.path.display(), error = %e,
                        "O_DIRECT is refused; reading this chunk through the page cache");
                }
                Ok(None)
            }
        }
    }

    /// The mapping of the committed prefix, made on first use; `None` if mapping failed
    /// (reported once per chunk; reads then go through the I/O backend).
    pub(crate) fn map(self: &Arc<Self>) -> Result<Option<SharedMap>> {
        if self.map_refused.load(Ordering::Acquire) || self.object.is_some() {
            return Ok(None);
        }
        self.map_used.store(true, Ordering::Release);
        self.note_use();
        if let Some(m) = &*lock(self.mapped()) {
            return Ok(Some(m.clone()));
        }
        let file = self.file()?;
        // A cached copy gone by now reads from its object: nothing to map.
        let Some(local) = file.local() else {
            return Ok(None);
        };
        maps().reserve(1);
        let mapped = SharedMap::new(local, &self.path, self.size);
        let m = match mapped {
            Ok(m) => m,
            Err(e) => {
                maps().unreserve(1);
                if !self.map_refused.swap(true, Ordering::AcqRel) {
                    tracing::warn!(error = %e, "cannot map chunk; reading it through the I/O backend");
                }
                return Ok(None);
            }
        };
        let mut slot = lock(self.mapped());
        if let Some(theirs) = &*slot {
            let theirs = theirs.clone();
            drop(slot);
            maps().unreserve(1);
            return Ok(Some(theirs));
        }
        *slot = Some(m.clone());
        drop(slot);
        maps().enlist(self);
        Ok(Some(m))
    }
}

impl Drop for ChunkHandle {
    fn drop(&mut self) {
        // (In a child of `fork()`, what it took over from the parent's handle: the descriptor
        // copies and mapping the child inherited.)
        let o = std::mem::take(&mut *lock(self.open()));
        fds().unreserve(usize::from(o.file.is_some()) + usize::from(o.direct.is_some()));
        if lock(self.mapped()).take().is_some() {
            maps().unreserve(1);
        }
    }
}

/// Where one chunk of a commit is read from: a part a [`Location`](crate::Location) hands to
/// [`Snapshot::assemble`](crate::Snapshot::assemble).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChunkAt {
    /// A local file, read by the engine's own backends (mapped, io_uring, the pread pool):
    /// checked to hold the chunk's committed bytes when the snapshot is assembled, its
    /// identity recorded.
    File(PathBuf),
    /// An object only the location's [`read_backend`](crate::Location::read_backend) reads: no
    /// descriptor, no mapping. `path` names it in errors and is the
    /// [`ReadRange::path`](crate::ReadRange::path) of its reads; `key` is their
    /// [`ReadRange::object`](crate::ReadRange::object).
    Object {
        /// What names the object in errors (its URL).
        path: PathBuf,
        /// The object's key, as the location's backend knows it.
        key: String,
    },
    /// A complete local copy of an object (a cache's), read as a local file; the object is read
    /// instead once the copy is gone (evicted, or dropped as damaged) when it must be opened
    /// again, or if it is gone already when the snapshot is assembled.
    Cached {
        /// The local copy.
        copy: PathBuf,
        /// What names the object in errors (its URL).
        path: PathBuf,
        /// The object's key.
        key: String,
    },
}

/// The chunks a commit names, by id.
#[derive(Debug, Default)]
pub(crate) struct ChunkSet {
    by_id: Vec<Option<Arc<ChunkHandle>>>,
    /// How reads of its objects coalesce (`RemoteConfig::object_reads`; default LOCAL).
    pub(crate) object_reads: Coalesce,
}

impl ChunkSet {
    /// The chunks `meta` names in `dir`: each checked to exist with at least its committed
    /// size, its identity recorded, and its descriptor opened while the budget has room (a
    /// descriptor of a file a later rebalance removes is never closed by the budget, so the
    /// snapshot keeps reading it).
    pub(crate) fn load(dir: &Path, meta: &Meta) -> Result<ChunkSet> {
        Self::build(meta, |c| {
            Self::local_handle(c, layout::chunk(dir, c.id), None)
        })
    }

    /// The chunks `meta` names, each where `at(name)` says (`name`: `chunk/<id>.zr`).
    pub(crate) fn assemble(
        meta: &Meta,
        mut at: impl FnMut(&str) -> Result<ChunkAt>,
    ) -> Result<ChunkSet> {
        Self::build(meta, |c| match at(&layout::chunk_name(c.id))? {
            ChunkAt::File(path) => Self::local_handle(c, path, None),
            ChunkAt::Cached { copy, path, key } => {
                let object = Arc::new(ReadFile {
                    file: None,
                    path: path.clone(),
                    direct: false,
                    object: Some(key.clone()),
                    id: None,
                });
                match Self::local_handle(c, copy, Some(object)) {
                    // A cached copy gone between the cache's lookup and this open (another
                    // process evicted it): the object.
                    Err(Error::Io { source, .. })
                        if source.kind() == std::io::ErrorKind::NotFound =>
                    {
                        Ok(Self::object_handle(c, path, key))
                    }
                    r => r,
                }
            }
            ChunkAt::Object { path, key } => Ok(Self::object_handle(c, path, key)),
        })
    }

    /// The handle of chunk `c` as object `key` at URL `path`: no descriptor, no mapping.
    fn object_handle(
        c: &crate::format::meta::ChunkMeta,
        path: PathBuf,
        key: String,
    ) -> Arc<ChunkHandle> {
        let object = ReadFile {
            file: None,
            path: path.clone(),
            direct: false,
            object: Some(key),
            id: None,
        };
        let none = FileId {
            dev: 0,
            ino: 0,
            generation: None,
            born: None,
        };
        ChunkHandle::new(c, path, none, None, Some(Arc::new(object)), None)
    }

    /// The set of `handle(c)` for every chunk `c` of `meta`, by id.
    fn build(
        meta: &Meta,
        mut handle: impl FnMut(&crate::format::meta::ChunkMeta) -> Result<Arc<ChunkHandle>>,
    ) -> Result<ChunkSet> {
        let max_id = meta
            .chunks
            .iter()
            .map(|c| usize::from(c.id) + 1)
            .max()
            .unwrap_or(0);
        let mut by_id: Vec<Option<Arc<ChunkHandle>>> = vec![None; max_id];
        for c in &meta.chunks {
            let h = handle(c)?;
            if let Some(slot) = by_id.get_mut(usize::from(c.id)) {
                *slot = Some(h);
            }
        }
        Ok(ChunkSet {
            by_id,
            object_reads: Coalesce::LOCAL,
        })
    }

    /// The handle of chunk `c` at `path`, checked to exist with at least its committed size,
    /// its identity recorded, and its descriptor opened while the budget has room.
    fn local_handle(
        c: &crate::format::meta::ChunkMeta,
        path: PathBuf,
        fallback: Option<Arc<ReadFile>>,
    ) -> Result<Arc<ChunkHandle>> {
        let room = fds().held.load(Ordering::Acquire) < fds().cap;
        // Without room in the budget, the file is open only while its identity is read.
        let f = fs::open_read(&path)?;
        let len = fs::file_len(&f, &path)?;
        let identity = FileId::of(&f).map_err(|e| Error::io(&path, "stat", e))?;
        let open = if room {
            fs::advise_random(&f);
            Some(f)
        } else {
            None
        };
        if len < c.size {
            return Err(Error::Truncated {
                path,
                expected: c.size,
                actual: len,
            });
        }
        let file = open.map(|f| Arc::new(ReadFile::local_file(f, path.clone(), false, identity)));
        let held = file.is_some();
        let h = ChunkHandle::new(c, path, identity, file, None, fallback);
        if held {
            fds().reserve(1);
            fds().enlist(&h);
        }
        Ok(h)
    }

    /// True if some chunk is an object on a store (not a local file).
    pub(crate) fn any_object(&self) -> bool {
        self.by_id.iter().flatten().any(|h| h.object.is_some())
    }

    /// The chunk with id `id`, if the commit names it.
    pub(crate) fn get(&self, id: u16) -> Option<&Arc<ChunkHandle>> {
        self.by_id.get(usize::from(id)).and_then(Option::as_ref)
    }

    /// The cached copy at `path` was found damaged and dropped by the backend: the handles
    /// reading it let go of their descriptors and mapping, which still show the damaged bytes
    /// after the copy is unlinked, and read the object from now on (through the backend,
    /// which finds the copy refilled). Nothing for a chunk that is not a cached copy.
    pub(crate) fn copy_dropped(&self, path: &Path) {
        for h in self.by_id.iter().flatten() {
            if h.fallback.is_some() && h.path == path {
                h.let_go();
            }
        }
    }

    /// The path of chunk `id` (for error messages), empty if the commit does not name it.
    pub(crate) fn path(&self, id: u16) -> PathBuf {
        self.get(id).map(|c| c.path.clone()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::meta::ChunkMeta;

    fn meta(chunks: &[(u16, u64)]) -> Meta {
        Meta {
            format: "zrecord".into(),
            version: crate::format::FORMAT_VERSION,
            generation: 1,
            len: 0,
            chunk_size_bytes: 1 << 20,
            fields: Vec::new(),
            chunks: chunks
                .iter()
                .map(|&(id, size)| ChunkMeta { id, size })
                .collect(),
            attributes: Default::default(),
        }
    }

    /// A cached copy that another process evicted between the cache's lookup and the
    /// snapshot's open is read from its object, not an error of the open.
    #[test]
    fn a_cached_copy_gone_before_it_opens_is_its_object() {
        let dir = tempfile::tempdir().unwrap();
        let kept = dir.path().join("kept");
        std::fs::write(&kept, [7u8; 10]).unwrap();
        let at = |name: &str| {
            let id = u16::from(name != "chunk/00000.zr");
            let copy = if id == 0 { "kept" } else { "evicted" };
            Ok(ChunkAt::Cached {
                copy: dir.path().join(copy),
                path: PathBuf::from(format!("s3://b/p/data/{id}")),
                key: format!("data/{id}"),
            })
        };
        let set = ChunkSet::assemble(&meta(&[(0, 10), (1, 10)]), at).unwrap();
        let kept = set.get(0).unwrap();
        assert!(kept.object.is_none());
        assert!(kept.file().unwrap().local().is_some());
        let gone = set.get(1).unwrap();
        let file = gone.file().unwrap();
        assert!(file.local().is_none());
        assert_eq!(file.object.as_deref(), Some("data/1"));
        assert_eq!(gone.path(), Path::new("s3://b/p/data/1"));
    }
}
