//! File locks that only the process that took them holds: POSIX record locks
//! (`fcntl(F_SETLK)` over the whole file), with a table of the locks this process holds.
//!
//! A record lock belongs to a process, not to a descriptor: a child process never holds its
//! parent's locks, whether it was made by `fork()` (Python's `multiprocessing`, torch's
//! `DataLoader` workers) or spawned to run another program (Rust's `Command`, Python's
//! `subprocess`), even while it still has copies of the parent's descriptors. So a writer closed
//! in the parent frees its dataset at once, however long a child lives, and a second writer, in
//! this process or another, is refused at once.
//!
//! Two rules of record locks shape this file (LevelDB, RocksDB and SQLite follow the same):
//! - Locks of one process never conflict with each other, so the process's own holders are
//!   kept apart by a table of the lock files it holds (keyed by device and inode): a second
//!   exclusive holder in the process, or a shared one beside an exclusive one, is refused by
//!   the table without asking the kernel.
//! - Closing *any* descriptor of a file releases every lock the process holds on it. So the
//!   process keeps exactly one descriptor of each lock file it holds, in the table, never opens
//!   another one (the table is looked up by the path's inode first), and closes it with the
//!   table held, so no thread takes the lock again in between.
//!
//! A child of `fork()` starts with a table of its own (empty: it holds no lock), and a
//! [`FileLock`] it inherited does nothing when dropped there.

use std::collections::HashMap;
use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::fork::ForkLocal;
use crate::error::{Error, Result};

/// How a lock is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// By one holder at a time (a writer's lock, `gc`'s hold on a collection's commits).
    Exclusive,
    /// By any number of holders at once, while nobody holds it exclusively (each committer of
    /// a collection).
    Shared,
}

/// A lock file's identity: its device and inode.
type Key = (u64, u64);

/// A lock file this process holds.
#[derive(Debug)]
struct Held {
    /// The one descriptor of the file this process has open: held, never used (its close
    /// releases the lock).
    _file: File,
    /// Shared holders, or 0 for one exclusive holder.
    shared: usize,
    /// Descriptors of the file opened by a path that named another file when it was looked up
    /// (it was replaced in between): closing them would release the lock, so they close with
    /// it.
    spare: Vec<File>,
}

/// The lock files this process holds.
static HELD: ForkLocal<Mutex<HashMap<Key, Held>>> = ForkLocal::new();

/// This process's table, held.
fn table() -> MutexGuard<'static, HashMap<Key, Held>> {
    // A child of `fork()` makes its own (empty: it holds no lock), whatever its parent's
    // threads were doing with theirs at the fork.
    HELD.get_or_init(|_| Mutex::new(HashMap::new()))
        .lock()
        // Nothing panics with the table held but an allocation failure; what it holds is
        // whole either way.
        .unwrap_or_else(PoisonError::into_inner)
}

/// The path as a C string.
fn c_path(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        Error::io(
            path,
            "open",
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "path contains a NUL byte"),
        )
    })
}

/// Opens the lock file `path` (created if missing) for reading and writing, close-on-exec.
fn open(path: &CString) -> std::io::Result<File> {
    let flags = libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC;
    // Tried again when a signal interrupts it, as `std`'s `open` does.
    let fd = loop {
        // SAFETY: `path` is a NUL-terminated string that outlives the call; the mode is the
        // variadic `mode_t` argument `open` reads when `O_CREAT` is given.
        let fd = unsafe { libc::open(path.as_ptr(), flags, 0o666 as libc::c_uint) };
        if fd >= 0 {
            break fd;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    // SAFETY: `fd` was just opened and is owned by nothing else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Takes a record lock on the whole of `file` without waiting: `Ok(false)` if another process
/// holds a conflicting one.
fn set_lock(file: &File, mode: Mode) -> std::io::Result<bool> {
    let kind = match mode {
        Mode::Exclusive => libc::F_WRLCK,
        Mode::Shared => libc::F_RDLCK,
    };
    // SAFETY: `flock` is a plain C struct for which all zeroes is a valid value.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    // `l_start` and `l_len` 0: from the first byte to any end.
    loop {
        // SAFETY: `file` is an open descriptor and `lock` a valid `flock` that outlives the call.
        let r = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &lock) };
        if r == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EACCES | libc::EAGAIN) => return Ok(false),
            Some(libc::EINTR) => {}
            _ => return Err(e),
        }
    }
}

/// A lock on a lock file, exclusive or shared, held until dropped, by this process only.
#[derive(Debug)]
pub(crate) struct FileLock {
    key: Key,
    /// The fork generation of the process that took it (`fork::generation`): in any other (a
    /// child of `fork()`) it is not held.
    generation: u64,
}

impl FileLock {
    /// Opens the lock file `path` (created if missing) and takes its exclusive lock, once:
    /// `Ok(None)` if another holder, in this process or another, has it.
    pub(crate) fn try_take(path: &Path) -> Result<Option<FileLock>> {
        Self::take(path, Mode::Exclusive, Some(Duration::ZERO), || {})
    }

    /// Opens the lock file `path` and takes its lock as `mode` says, waiting as long as
    /// another holder has a conflicting one; `waiting` runs once if it has to wait.
    pub(crate) fn take_waiting(
        path: &Path,
        mode: Mode,
        waiting: impl FnOnce(),
    ) -> Result<FileLock> {
        Self::take(path, mode, None, waiting)?
            .ok_or_else(|| Error::internal("a wait gave up".into()))
    }

    fn take(
        path: &Path,
        mode: Mode,
        limit: Option<Duration>,
        waiting: impl FnOnce(),
    ) -> Result<Option<FileLock>> {
        let start = Instant::now();
        let c = c_path(path)?;
        let generation = super::fork::generation();
        let mut waiting = Some(waiting);
        let mut pause = Duration::from_millis(1);
        loop {
            if let Some(key) = Self::attempt(path, &c, mode)? {
                return Ok(Some(FileLock { key, generation }));
            }
            if limit.is_some_and(|l| start.elapsed() >= l) {
                return Ok(None);
            }
            if let Some(w) = waiting.take() {
                w();
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// One try, with the table held throughout: the lock file's key if taken, `None` if a
    /// holder has it.
    fn attempt(path: &Path, c: &CString, mode: Mode) -> Result<Option<Key>> {
        let mut table = table();
        // Looked up by the path before anything is opened: a second descriptor of a file this
        // process holds must never be opened (its close would release the lock).
        match std::fs::metadata(path) {
            Ok(m) => {
                let key = (m.dev(), m.ino());
                if let Some(held) = table.get_mut(&key) {
                    return Ok(join(held, mode).then_some(key));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(path, "stat", e)),
        }
        let file = open(c).map_err(|e| Error::io(path, "open", e))?;
        let m = file.metadata().map_err(|e| Error::io(path, "stat", e))?;
        let key = (m.dev(), m.ino());
        if let Some(held) = table.get_mut(&key) {
            // The path was replaced by a file this process holds between the lookup and the
            // open: the descriptor stays open as long as the lock.
            held.spare.push(file);
            return Ok(join(held, mode).then_some(key));
        }
        // Not held by this process, so closing `file` (when the lock is not taken) releases
        // nothing of its.
        if !set_lock(&file, mode).map_err(|e| Error::io(path, "lock", e))? {
            return Ok(None);
        }
        let shared = match mode {
            Mode::Exclusive => 0,
            Mode::Shared => 1,
        };
        table.insert(
            key,
            Held {
                _file: file,
                shared,
                spare: Vec::new(),
            },
        );
        Ok(Some(key))
    }
}

/// Another holder of a lock this process holds: a shared one beside shared ones.
fn join(held: &mut Held, mode: Mode) -> bool {
    if mode == Mode::Shared && held.shared > 0 {
        held.shared = held.shared.saturating_add(1);
        return true;
    }
    false
}

impl Drop for FileLock {
    fn drop(&mut self) {
        if self.generation != super::fork::generation() {
            // A child of `fork()`: it never held the lock, and the table is its parent's.
            return;
        }
        let mut table = table();
        let Some(held) = table.get_mut(&self.key) else {
            return;
        };
        if held.shared > 1 {
            held.shared -= 1;
            return;
        }
        // Closed with the table held: the lock is released with the descriptor, and no
        // thread of this process can take it again in between.
        let held = table.remove(&self.key);
        drop(held);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
    use super::*;

    // A child of `fork()` and a spawned process: `tests/writer_lock_children.rs`.

    #[test]
    fn held_once_and_free_after_drop() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("lock");
        let l = FileLock::try_take(&p).unwrap().unwrap();
        assert!(FileLock::try_take(&p).unwrap().is_none());
        drop(l);
        assert!(FileLock::try_take(&p).unwrap().is_some());
        let nul = tmp.path().join("a\0b");
        assert!(FileLock::try_take(&nul).is_err());
        let missing = tmp.path().join("missing").join("lock");
        let e = FileLock::try_take(&missing).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
    }

    /// Shared holders in one process hold together and keep an exclusive one out until the
    /// last is gone; an exclusive holder keeps out both.
    #[test]
    fn shared_and_exclusive_in_one_process() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("lock");
        let wait = || panic!("a shared lock waited beside shared ones");
        let a = FileLock::take_waiting(&p, Mode::Shared, wait).unwrap();
        let b = FileLock::take_waiting(&p, Mode::Shared, wait).unwrap();
        assert!(FileLock::try_take(&p).unwrap().is_none());
        drop(a);
        assert!(FileLock::try_take(&p).unwrap().is_none());
        drop(b);
        let x = FileLock::try_take(&p).unwrap().unwrap();
        let waited = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let t = s.spawn(|| {
                FileLock::take_waiting(&p, Mode::Shared, || {
                    waited.store(true, std::sync::atomic::Ordering::SeqCst);
                })
                .unwrap()
            });
            while !waited.load(std::sync::atomic::Ordering::SeqCst) {
                std::thread::yield_now();
            }
            drop(x);
            drop(t.join().unwrap());
        });
        assert!(FileLock::try_take(&p).unwrap().is_some());
    }

    /// The lock file replaced while held (a new file at its path): the new file is another
    /// lock; the old one stays held until dropped.
    #[test]
    fn a_replaced_lock_file_is_another_lock() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("lock");
        let old = FileLock::try_take(&p).unwrap().unwrap();
        std::fs::rename(&p, tmp.path().join("old")).unwrap();
        let new = FileLock::try_take(&p).unwrap().unwrap();
        assert!(FileLock::try_take(&tmp.path().join("old"))
            .unwrap()
            .is_none());
        drop(old);
        assert!(FileLock::try_take(&tmp.path().join("old"))
            .unwrap()
            .is_some());
        drop(new);
    }

    /// Many locks held at once, each held until dropped.
    #[test]
    fn many_held_at_once() {
        let tmp = tempfile::tempdir().unwrap();
        let paths: Vec<_> = (0..100).map(|i| tmp.path().join(format!("l{i}"))).collect();
        let held: Vec<_> = paths
            .iter()
            .map(|p| FileLock::try_take(p).unwrap().unwrap())
            .collect();
        for p in &paths {
            assert!(FileLock::try_take(p).unwrap().is_none());
        }
        drop(held);
        for p in &paths {
            assert!(FileLock::try_take(p).unwrap().is_some());
        }
    }
}
