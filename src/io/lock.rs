//! File locks (`flock`, exclusive or shared) that only the process that took them holds.
//!
//! An `flock` belongs to an open file description, and a child process gets a copy of every
//! descriptor its parent has open, close-on-exec or not, until it calls `exec`. So a lock held
//! at the moment another thread forks or spawns a process is held by that child too: a writer
//! closed in the parent while the child lives leaves the lock taken, and the next writer of the
//! dataset gets a spurious [`Error::WriterBusy`] (or a pull waits) until the child is gone. A
//! child of `fork()` without `exec` (Python's `multiprocessing` and torch's `DataLoader`
//! workers) can keep it for hours; a child spawned to run another program (Rust's `Command`,
//! Python's `subprocess`) keeps it for the moments before its `exec`.
//!
//! Every lock of this crate is taken here:
//! - Each held lock's descriptor is in `fork::ChildCloses`, the descriptors every child of
//!   `fork()` closes at once (in the crate's `pthread_atfork` child handler). The list is held
//!   across a fork, so no lock is taken or released half-way through it. In the child, the
//!   inherited [`FileLock`]s are forgotten when dropped (their descriptor numbers may name the
//!   child's own files by then).
//! - `posix_spawn` and `vfork` run no fork handler: a lock found taken is tried again for a
//!   while ([`SPAWN_GRACE`]), longer than a spawned child usually takes to reach its `exec`. A
//!   child that takes longer (a machine loaded far beyond its cores) still makes the lock look
//!   taken, as any holder does: the caller gets `WriterBusy` and may try again.

use crate::error::{Error, Result};
use std::ffi::CString;
use std::fs::File;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a lock found taken is tried again before it counts as held by someone else: a
/// child spawned by another thread of this process holds it until its `exec`.
pub(crate) const SPAWN_GRACE: Duration = Duration::from_millis(300);

/// What a lock is taken on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// A lock file, created if missing (a dataset's `writer.lock`).
    File,
    /// A directory itself, adding no file to it (a collection's root, for a pull).
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    Directory,
}

/// How a lock is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// By one holder at a time (a writer's lock, `gc`'s hold on a collection's commits).
    Exclusive,
    /// By any number of holders at once, while nobody holds it exclusively (each committer of
    /// a collection).
    Shared,
}

/// The path as a C string, made before the list is held (no allocation under it).
fn c_path(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        Error::io(
            path,
            "open",
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "path contains a NUL byte"),
        )
    })
}

/// Opens `path` as `target` says, close-on-exec: one `open(2)`, which allocates nothing.
fn open(path: &CString, target: Target) -> std::io::Result<File> {
    let (flags, mode) = match target {
        Target::File => (libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC, 0o666),
        Target::Directory => (libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC, 0),
    };
    // Tried again when a signal interrupts it, as `std`'s `open` does.
    let fd = loop {
        // SAFETY: `path` is a NUL-terminated string that outlives the call; `mode` is the
        // variadic `mode_t` argument `open` reads when `O_CREAT` is given.
        let fd = unsafe { libc::open(path.as_ptr(), flags, mode as libc::c_uint) };
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

/// An exclusive `flock` on an open file, held until dropped, by this process only.
#[derive(Debug)]
pub(crate) struct FileLock {
    file: ManuallyDrop<File>,
    /// The fork generation of the process that took it (`fork::generation`): in any other (a
    /// child of `fork()`) its descriptor was closed.
    generation: u64,
}

impl FileLock {
    /// Opens `path` and takes its lock without waiting: `Ok(None)` if someone else holds it
    /// (after [`SPAWN_GRACE`] of tries, the span a spawned child holds copies).
    pub(crate) fn try_take(path: &Path, target: Target) -> Result<Option<FileLock>> {
        Self::take(path, target, Mode::Exclusive, Some(SPAWN_GRACE), || {})
    }

    /// As [`FileLock::try_take`] but tried once: for a caller to whom a lock found taken is an
    /// ordinary answer that costs nothing when wrong (`gc` keeps the part for its next run).
    pub(crate) fn try_take_once(path: &Path, target: Target) -> Result<Option<FileLock>> {
        Self::take(path, target, Mode::Exclusive, Some(Duration::ZERO), || {})
    }

    /// Opens `path` and takes its lock, waiting as long as someone else holds it; `waiting`
    /// runs once if it has to wait.
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    pub(crate) fn take_waiting(
        path: &Path,
        target: Target,
        waiting: impl FnOnce(),
    ) -> Result<FileLock> {
        Self::take_waiting_as(path, target, Mode::Exclusive, waiting)
    }

    /// As [`FileLock::take_waiting`], held as `mode` says.
    pub(crate) fn take_waiting_as(
        path: &Path,
        target: Target,
        mode: Mode,
        waiting: impl FnOnce(),
    ) -> Result<FileLock> {
        Self::take(path, target, mode, None, waiting)?
            .ok_or_else(|| Error::internal("a wait gave up".into()))
    }

    fn take(
        path: &Path,
        target: Target,
        mode: Mode,
        limit: Option<Duration>,
        waiting: impl FnOnce(),
    ) -> Result<Option<FileLock>> {
        let start = Instant::now();
        let c = c_path(path)?;
        // Registers the fork handlers, before the registry is held: registering waits for a
        // fork in progress, whose prepare handler waits for the registry.
        let generation = super::fork::generation();
        let mut waiting = Some(waiting);
        let mut pause = Duration::from_millis(1);
        loop {
            {
                // Opened and locked with the registry held: a fork sees the descriptor either
                // registered (and closes it in the child) or not opened yet. (So a slow open, on
                // a stalled network file system, holds up this process's forks and locks.) No
                // allocation while it is held: the push has room, errors are made after.
                let mut held = super::fork::ChildCloses::hold_with_room();
                let file = match open(&c, target) {
                    Ok(file) => file,
                    Err(e) => {
                        drop(held);
                        return Err(Error::io(path, "open", e));
                    }
                };
                let taken = match mode {
                    Mode::Exclusive => file.try_lock(),
                    Mode::Shared => file.try_lock_shared(),
                };
                match taken {
                    Ok(()) => {
                        held.fds().push(file.as_raw_fd());
                        return Ok(Some(FileLock {
                            file: ManuallyDrop::new(file),
                            generation,
                        }));
                    }
                    Err(std::fs::TryLockError::WouldBlock) => {}
                    Err(std::fs::TryLockError::Error(e)) => {
                        drop(file);
                        drop(held);
                        return Err(Error::io(path, "lock", e));
                    }
                }
                // `file` is closed here, with the registry held.
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
}

impl Drop for FileLock {
    fn drop(&mut self) {
        if self.generation != super::fork::generation() {
            // A child of `fork()`: the handler closed the descriptor, and its number may name
            // another file of this process now.
            return;
        }
        let fd = self.file.as_raw_fd();
        let mut held = super::fork::ChildCloses::hold();
        held.fds().retain(|&f| f != fd);
        // SAFETY: taken once, here, in the process that opened it; never used again. Closed
        // with the registry held, so no fork copies it unregistered.
        unsafe { ManuallyDrop::drop(&mut self.file) };
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
        let l = FileLock::try_take(&p, Target::File).unwrap().unwrap();
        assert!(FileLock::try_take(&p, Target::File).unwrap().is_none());
        drop(l);
        assert!(FileLock::try_take(&p, Target::File).unwrap().is_some());
    }

    /// A directory's own lock: no file is added to it; a missing directory or a path with a NUL
    /// byte is an error naming it.
    #[test]
    fn a_directory_is_locked_itself() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("d");
        std::fs::create_dir(&d).unwrap();
        let l = FileLock::try_take(&d, Target::Directory).unwrap().unwrap();
        assert!(FileLock::try_take_once(&d, Target::Directory)
            .unwrap()
            .is_none());
        drop(l);
        assert!(FileLock::try_take_once(&d, Target::Directory)
            .unwrap()
            .is_some());
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
        let missing = tmp.path().join("missing");
        let e = FileLock::try_take_once(&missing, Target::Directory).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
        let nul = tmp.path().join("a\0b");
        assert!(FileLock::try_take_once(&nul, Target::File).is_err());
    }

    /// Many locks held at once (the list grows with none of them lost), each held until dropped.
    #[test]
    fn many_held_at_once() {
        let tmp = tempfile::tempdir().unwrap();
        let paths: Vec<_> = (0..100).map(|i| tmp.path().join(format!("l{i}"))).collect();
        let held: Vec<_> = paths
            .iter()
            .map(|p| FileLock::try_take(p, Target::File).unwrap().unwrap())
            .collect();
        for p in &paths {
            assert!(FileLock::try_take_once(p, Target::File).unwrap().is_none());
        }
        drop(held);
        for p in &paths {
            assert!(FileLock::try_take_once(p, Target::File).unwrap().is_some());
        }
    }
}
