//! File-system calls used by the commit protocol, with errors that name the path.

use crate::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Opens a file read-only.
pub fn open_read(path: &Path) -> Result<File> {
    File::open(path).map_err(|e| Error::io(path, "open", e))
}

/// Opens an existing file for reading and writing.
pub fn open_rw(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| Error::io(path, "open", e))
}

/// Creates a new file for reading and writing; fails if it exists.
pub fn create_new(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| Error::io(path, "create", e))
}

/// The size of an open file.
pub fn file_len(file: &File, path: &Path) -> Result<u64> {
    Ok(file
        .metadata()
        .map_err(|e| Error::io(path, "stat", e))?
        .len())
}

/// Writes all of `buf` at `offset`; a short write is retried until complete or an error.
pub fn write_all_at(file: &File, path: &Path, buf: &[u8], offset: u64) -> Result<()> {
    file.write_all_at(buf, offset)
        .map_err(|e| Error::io(path, "write", e))
}

/// Reads exactly `buf.len()` bytes at `offset`.
pub fn read_exact_at(file: &File, path: &Path, buf: &mut [u8], offset: u64) -> Result<()> {
    file.read_exact_at(buf, offset)
        .map_err(|e| Error::io(path, "read", e))
}

/// `fdatasync(2)`: the file's data (and the size it needs) is durable.
pub fn sync_data(file: &File, path: &Path) -> Result<()> {
    file.sync_data()
        .map_err(|e| Error::io(path, "fdatasync", e))
}

/// `fsync(2)` of a directory: entries created, renamed or removed in it are durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir, "fsync directory", e))
}

/// Renames `from` to `to` only if nothing is at `to` (`renameat2(RENAME_NOREPLACE)`): a file
/// or a directory appears at `to` whole, or the call fails with `AlreadyExists` and nothing
/// moves. Where the file system has no `RENAME_NOREPLACE` (`EINVAL`, `ENOSYS`), a check that
/// `to` is free, then `rename(2)`: not atomic against another process creating `to` meanwhile.
/// Other errors (`EXDEV` across file systems) are returned as they are.
pub fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
    };
    let (cf, ct) = (c(from)?, c(to)?);
    // SAFETY: both pointers are NUL-terminated C strings (`CString`) that live across the
    // call; AT_FDCWD makes the paths relative to the working directory, as `rename(2)` does.
    // The call reads the strings and touches no other memory of ours.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            cf.as_ptr(),
            libc::AT_FDCWD,
            ct.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EINVAL | libc::ENOSYS) => {
            if std::fs::symlink_metadata(to).is_ok() {
                return Err(std::io::Error::from(std::io::ErrorKind::AlreadyExists));
            }
            // Another process that created `to` since the check: taken, as above.
            std::fs::rename(from, to).map_err(|e| match e.raw_os_error() {
                Some(libc::ENOTEMPTY | libc::EEXIST) => {
                    std::io::Error::from(std::io::ErrorKind::AlreadyExists)
                }
                _ => e,
            })
        }
        Some(libc::ENOTEMPTY) => Err(std::io::Error::from(std::io::ErrorKind::AlreadyExists)),
        _ => Err(e),
    }
}

/// Truncates a file to `len` bytes.
pub fn set_len(file: &File, path: &Path, len: u64) -> Result<()> {
    file.set_len(len)
        .map_err(|e| Error::io(path, "truncate", e))
}

/// Drops a file's pages from the page cache (`posix_fadvise(POSIX_FADV_DONTNEED)`), so the
/// next reads come from the device. Dirty pages are written back first (`fdatasync`), since the
/// kernel does not drop dirty pages.
pub fn evict_page_cache(path: &Path) -> Result<()> {
    use std::os::fd::AsRawFd;
    let f = File::open(path).map_err(|e| Error::io(path, "open", e))?;
    f.sync_data().map_err(|e| Error::io(path, "fdatasync", e))?;
    // SAFETY: posix_fadvise only reads its integer arguments; `f` is an open descriptor for the
    // duration of the call.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if r != 0 {
        return Err(Error::io(
            path,
            "posix_fadvise",
            std::io::Error::from_raw_os_error(r),
        ));
    }
    Ok(())
}

/// `posix_fadvise(POSIX_FADV_RANDOM)`: reads through this descriptor get no readahead. Random
/// record reads want exactly their bytes; on a dataset larger than memory, readahead would
/// evict useful pages with neighbours nobody asked for. A hint: failure changes only speed.
pub fn advise_random(file: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: posix_fadvise only reads its integer arguments; `file` is open for the call.
    let _ = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
}

/// `posix_fadvise(POSIX_FADV_SEQUENTIAL)` on the whole file, then `POSIX_FADV_WILLNEED` on
/// `len` bytes at `offset`: a file read front to back (a whole-table scan) gets a large
/// readahead window, and the next block is read while the current one is processed. A hint:
/// failure changes only speed.
pub fn advise_sequential(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(off), Ok(n)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: posix_fadvise only reads its integer arguments; `file` is open for both calls.
    unsafe {
        let _ = libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL);
        let _ = libc::posix_fadvise(file.as_raw_fd(), off, n, libc::POSIX_FADV_WILLNEED);
    }
}

/// `posix_fadvise(POSIX_FADV_WILLNEED)` on `len` bytes at `offset`: the kernel starts reading
/// them into the page cache and returns without waiting (it may block while the device's queue
/// is full). The read window's readahead of a batch's ranges. A hint: failure changes only
/// speed.
pub fn advise_willneed(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(off), Ok(n)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: posix_fadvise only reads its integer arguments; `file` is open for the call.
    let _ = unsafe { libc::posix_fadvise(file.as_raw_fd(), off, n, libc::POSIX_FADV_WILLNEED) };
}

/// Starts writeback of `len` bytes at `offset` (`sync_file_range(SYNC_FILE_RANGE_WRITE)`) without
/// waiting for it: the disk writes a chunk's bytes while later ones are still being appended, so
/// the commit's `fdatasync` finds little left to do. Not a durability point (only `fdatasync`
/// is): a hint, whose failure changes only speed.
pub fn start_writeback(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(off), Ok(n)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: sync_file_range only reads its integer arguments; `file` is open for the call.
    let _ = unsafe { libc::sync_file_range(file.as_raw_fd(), off, n, libc::SYNC_FILE_RANGE_WRITE) };
}

/// The soft limit on open descriptors (`RLIMIT_NOFILE`), or `None` where it cannot be read or is
/// unlimited.
pub fn descriptor_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes one `rlimit` through the pointer, which names a live, properly
    // aligned local.
    let r = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    (r == 0 && lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

/// The kernel's limit on memory mappings per process (`vm.max_map_count`), or `None` where it
/// cannot be read.
pub fn mapping_limit() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()?
        .trim()
        .parse()
        .ok()
}
