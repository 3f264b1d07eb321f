//! The file-system seam of the writer and of recovery.
//!
//! Every file operation [`crate::Writer`] performs — creating a dataset, opening it (the lock,
//! reading `meta.json`, cleaning orphans, loading the offset tables), appending, committing —
//! goes through a [`Vfs`] and the [`VfsFile`] handles it returns. [`StdFs`] is the real file
//! system: thin wrappers over `std::fs` and [`crate::io::fs`], with the same calls, flags and
//! error contexts the writer used before the seam existed. `zrecord_testing::SimFs` (the
//! `zrecord-testing` crate, `testing/`) is an in-memory file system for tests that tracks
//! durable versus unsynced state and can crash or fail at any operation.
//!
//! The seam is dynamic (`Arc<dyn Vfs>`, `Box<dyn VfsFile>`), chosen once when a writer is opened.
//! A virtual call costs nanoseconds; the hot append path makes one per 4 MiB buffer it writes.
//! Handles take `&self` for every operation (positioned I/O), and both traits require
//! `Send + Sync`, so several append tasks on other threads can share one `Arc<dyn Vfs>` and own
//! one chunk handle each.
//!
//! Readers ([`crate::Dataset`], [`crate::Snapshot`], the read engine) use the real file system
//! directly: their hot paths are mmap and io_uring, which a trait object cannot express without
//! cost, and crash tests check them on a post-crash image materialised on a real file system.

use crate::error::{Error, Result};
use crate::io::fs;
use crate::io::mmap::Mapping;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The committed prefix of a file, read-only: a mapping on the real file system, a copy in the
/// simulated one.
#[derive(Debug)]
pub enum Prefix {
    /// A read-only mapping of the file.
    Mapped(Mapping),
    /// The bytes, copied (a table an object store handed over, the simulated file system).
    Owned(Box<[u8]>),
}

impl Prefix {
    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Prefix::Mapped(m) => m.bytes(),
            Prefix::Owned(b) => b,
        }
    }

    /// Hints the kernel that accesses are random (a mapping only).
    pub fn advise_random(&self) {
        if let Prefix::Mapped(m) = self {
            m.advise_random();
        }
    }
}

/// An open file. Every method is positioned (no cursor), so a handle can be shared.
pub trait VfsFile: Send + Sync + Debug {
    /// The path the file was opened at (for errors).
    fn path(&self) -> &Path;

    /// Writes up to `buf.len()` bytes at `offset`; returns how many were written (may be short).
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<usize>;

    /// Writes all of `buf` at `offset`, retrying short writes; a write of zero bytes is an
    /// error (`WriteZero`).
    fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        let mut done = 0usize;
        while let Some(rest) = buf.get(done..).filter(|r| !r.is_empty()) {
            let n = self.write_at(rest, offset + done as u64)?;
            if n == 0 {
                return Err(Error::io(
                    self.path(),
                    "write",
                    std::io::Error::from(std::io::ErrorKind::WriteZero),
                ));
            }
            done += n;
        }
        Ok(())
    }

    /// Reads exactly `buf.len()` bytes at `offset`.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()>;

    /// The file's size.
    fn len(&self) -> Result<u64>;

    /// True if the file has no bytes.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Truncates or extends the file to `len` bytes.
    fn set_len(&self, len: u64) -> Result<()>;

    /// `fdatasync(2)`: the file's data and size are durable.
    fn sync_data(&self) -> Result<()>;

    /// `fsync(2)`: data, size and metadata are durable.
    fn sync_all(&self) -> Result<()>;

    /// The first `len` bytes, which the caller checked exist and which nobody modifies while
    /// the result lives (a committed prefix).
    fn map_prefix(&self, len: u64) -> Result<Prefix>;

    /// Starts writing `len` bytes at `offset` back to the disk without waiting (a hint for
    /// speed, never a durability point: only `sync_data` is). The default does nothing.
    fn start_writeback(&self, offset: u64, len: u64) {
        let _ = (offset, len);
    }
}

/// A held exclusive lock; dropping it releases the lock.
pub trait VfsLock: Send + Sync + Debug {}

/// The file-system operations of the writer and recovery. Paths are absolute or relative to the
/// process's working directory, as for `std::fs`.
pub trait Vfs: Send + Sync + Debug {
    /// Opens an existing file read-only.
    fn open_read(&self, path: &Path) -> Result<Box<dyn VfsFile>>;
    /// Opens an existing file for reading and writing.
    fn open_rw(&self, path: &Path) -> Result<Box<dyn VfsFile>>;
    /// Creates a new file for reading and writing; fails if the name exists.
    fn create_new(&self, path: &Path) -> Result<Box<dyn VfsFile>>;
    /// Creates a file, or truncates it to zero bytes if it exists, for writing.
    fn create_truncate(&self, path: &Path) -> Result<Box<dyn VfsFile>>;
    /// Reads a whole file.
    fn read(&self, path: &Path) -> Result<Vec<u8>>;
    /// True if the name exists (file or directory).
    fn exists(&self, path: &Path) -> Result<bool>;
    /// The names in a directory, in no particular order.
    fn read_dir(&self, dir: &Path) -> Result<Vec<String>>;
    /// Creates a directory and any missing parents.
    fn create_dir_all(&self, dir: &Path) -> Result<()>;
    /// Removes a file's name.
    fn remove_file(&self, path: &Path) -> Result<()>;
    /// Removes a directory and everything under it.
    fn remove_dir_all(&self, dir: &Path) -> Result<()>;
    /// Renames `from` to `to` atomically, replacing `to` (a file, or an empty directory).
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;
    /// `fsync(2)` of a directory: names created, renamed or removed in it are durable.
    fn sync_dir(&self, dir: &Path) -> Result<()>;
    /// Opens (creating if missing) `path` and takes an exclusive, non-blocking lock on it;
    /// [`Error::WriterBusy`] if someone else holds it.
    fn lock(&self, path: &Path) -> Result<Box<dyn VfsLock>>;
}

/// Replaces `path` atomically with `bytes`: write `tmp`, fsync it, rename over `path`, fsync
/// the directory. After a crash, `path` holds the old or the new content, never a mix.
pub fn replace_atomically(
    vfs: &dyn Vfs,
    dir: &Path,
    tmp: &Path,
    path: &Path,
    bytes: &[u8],
) -> Result<()> {
    let f = vfs.create_truncate(tmp)?;
    f.write_all_at(bytes, 0)?;
    f.sync_all()?;
    drop(f);
    vfs.rename(tmp, path)?;
    vfs.sync_dir(dir)
}

/// The real file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct StdFs;

impl StdFs {
    /// The real file system as a shared trait object.
    pub fn shared() -> Arc<dyn Vfs> {
        Arc::new(StdFs)
    }
}

/// A file of [`StdFs`].
#[derive(Debug)]
pub struct StdFile {
    file: File,
    path: PathBuf,
}

impl StdFile {
    fn boxed(file: File, path: &Path) -> Box<dyn VfsFile> {
        Box::new(StdFile {
            file,
            path: path.to_path_buf(),
        })
    }
}

impl VfsFile for StdFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<usize> {
        use std::os::unix::fs::FileExt;
        self.file
            .write_at(buf, offset)
            .map_err(|e| Error::io(&self.path, "write", e))
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        fs::write_all_at(&self.file, &self.path, buf, offset)
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        fs::read_exact_at(&self.file, &self.path, buf, offset)
    }

    fn len(&self) -> Result<u64> {
        fs::file_len(&self.file, &self.path)
    }

    fn set_len(&self, len: u64) -> Result<()> {
        fs::set_len(&self.file, &self.path, len)
    }

    fn sync_data(&self) -> Result<()> {
        fs::sync_data(&self.file, &self.path)
    }

    fn sync_all(&self) -> Result<()> {
        self.file
            .sync_all()
            .map_err(|e| Error::io(&self.path, "fsync", e))
    }

    fn map_prefix(&self, len: u64) -> Result<Prefix> {
        Mapping::new(&self.file, &self.path, len).map(Prefix::Mapped)
    }

    fn start_writeback(&self, offset: u64, len: u64) {
        fs::start_writeback(&self.file, offset, len);
    }
}

impl VfsLock for super::lock::FileLock {}

impl Vfs for StdFs {
    fn open_read(&self, path: &Path) -> Result<Box<dyn VfsFile>> {
        Ok(StdFile::boxed(fs::open_read(path)?, path))
    }

    fn open_rw(&self, path: &Path) -> Result<Box<dyn VfsFile>> {
        Ok(StdFile::boxed(fs::open_rw(path)?, path))
    }

    fn create_new(&self, path: &Path) -> Result<Box<dyn VfsFile>> {
        Ok(StdFile::boxed(fs::create_new(path)?, path))
    }

    fn create_truncate(&self, path: &Path) -> Result<Box<dyn VfsFile>> {
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| Error::io(path, "create", e))?;
        Ok(StdFile::boxed(f, path))
    }

    fn read(&self, path: &Path) -> Result<Vec<u8>> {
        std::fs::read(path).map_err(|e| Error::io(path, "read", e))
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        std::fs::exists(path).map_err(|e| Error::io(path, "stat", e))
    }

    fn read_dir(&self, dir: &Path) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, "list", e))? {
            let entry = entry.map_err(|e| Error::io(dir, "list", e))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        Ok(names)
    }

    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, "create directory", e))
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        std::fs::remove_file(path).map_err(|e| Error::io(path, "remove", e))
    }

    fn remove_dir_all(&self, dir: &Path) -> Result<()> {
        std::fs::remove_dir_all(dir).map_err(|e| Error::io(dir, "remove directory", e))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        std::fs::rename(from, to).map_err(|e| Error::io(to, "rename", e))
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        fs::sync_dir(dir)
    }

    fn lock(&self, path: &Path) -> Result<Box<dyn VfsLock>> {
        match super::lock::FileLock::try_take(path)? {
            Some(lock) => Ok(Box::new(lock)),
            None => Err(Error::WriterBusy {
                path: path.to_path_buf(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The writer and the seam can move to (and be shared with) other threads: a later
    /// multi-writer version hands chunk handles to append tasks.
    #[test]
    fn seam_types_are_send_and_sync() {
        fn send_sync<T: Send + Sync + ?Sized>() {}
        fn send<T: Send>() {}
        send_sync::<dyn Vfs>();
        send_sync::<dyn VfsFile>();
        send_sync::<dyn VfsLock>();
        send::<crate::Writer>();
    }

    #[test]
    fn std_fs_round_trip() {
        let tmp = tempfile::tempdir().unwrap();
        let vfs = StdFs::shared();
        let p = tmp.path().join("a");
        let f = vfs.create_new(&p).unwrap();
        f.write_all_at(b"hello", 3).unwrap();
        f.sync_data().unwrap();
        assert_eq!(f.len().unwrap(), 8);
        assert_eq!(f.map_prefix(8).unwrap().bytes(), b"\0\0\0hello");
        assert!(vfs.create_new(&p).is_err());
        vfs.rename(&p, &tmp.path().join("b")).unwrap();
        vfs.sync_dir(tmp.path()).unwrap();
        assert_eq!(vfs.read_dir(tmp.path()).unwrap(), vec!["b".to_string()]);
        let l = vfs.lock(&tmp.path().join("lock")).unwrap();
        assert!(matches!(
            vfs.lock(&tmp.path().join("lock")),
            Err(Error::WriterBusy { .. })
        ));
        drop(l);
        vfs.lock(&tmp.path().join("lock")).unwrap();
    }
}
