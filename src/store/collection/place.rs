//! Moving a part under its collection's `parts/`: a rename where the part is on the same file
//! system (atomic: the part is at its old path or at its new one, whole), else a copy into a
//! hidden temporary directory, fsynced file by file, locked, and renamed into place; the
//! original stays until the commit's manifest names the copy (the committer removes it then),
//! so a commit that fails leaves it where it was. Nothing here ever replaces something already
//! at the target, and a part holding a symbolic link is refused (a link would be moved, or
//! copied, as a link, not as the data it names).

use crate::error::{Error, Result};
use crate::io::fs;
use std::path::Path;

/// What moving a part into `target` did.
#[derive(Debug)]
pub(crate) enum Placed {
    /// The part was renamed to `target` (its lock, held by the caller, went with it).
    Moved,
    /// The part was copied to `target` (another file system); the copy's writer lock is held
    /// here, so no writer, `gc` or other commit takes the copy before its manifest names it.
    /// The original is still at its path.
    Copied(crate::io::lock::FileLock),
    /// Something else is at `target`: nothing moved.
    Taken,
}

/// Moves the dataset directory `src` to `target` (in `parts`, which exists), never replacing
/// what is there. Nothing fallible follows a successful rename here: the caller records the
/// placement (so a failed commit can put it back), then makes it durable with [`sync_placed`].
pub(crate) fn move_part(src: &Path, parts: &Path, target: &Path) -> Result<Placed> {
    match fs::rename_noreplace(src, target) {
        Ok(()) => Ok(Placed::Moved),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(Placed::Taken),
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => copy_part(src, parts, target),
        Err(e) => Err(Error::io(src, "rename", e)),
    }
}

/// Makes a part [`move_part`] placed durable: fsyncs `parts` and, after a rename, the old
/// parent of `src`.
pub(crate) fn sync_placed(src: &Path, parts: &Path, renamed: bool) -> Result<()> {
    fs::sync_dir(parts)?;
    if renamed {
        if let Some(parent) = src.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::sync_dir(parent)?;
        }
    }
    Ok(())
}

/// Moves the part back from `placed` to `src` (a commit that failed before any manifest named
/// it), never replacing what is at `src`. The directories are fsynced.
pub(crate) fn move_back(placed: &Path, src: &Path) -> Result<()> {
    fs::rename_noreplace(placed, src).map_err(|e| Error::io(src, "move the part back to", e))?;
    if let Some(parent) = src.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::sync_dir(parent)?;
    }
    if let Some(parent) = placed.parent() {
        fs::sync_dir(parent)?;
    }
    Ok(())
}

/// The move across file systems: copy into `parts/.incoming-…` (its writer lock created and
/// held first, so the copy is held from its first byte), fsync every file and directory,
/// rename into place (made durable by [`sync_placed`]). The original is left where it is.
fn copy_part(src: &Path, parts: &Path, target: &Path) -> Result<Placed> {
    if std::fs::symlink_metadata(target).is_ok() {
        return Ok(Placed::Taken);
    }
    let tmp = parts.join(format!(".incoming-{:016x}", super::unique_word()));
    std::fs::create_dir(&tmp).map_err(|e| Error::io(&tmp, "create directory", e))?;
    let copied = (|| {
        let lock_path = tmp.join(crate::format::layout::LOCK);
        let lock = crate::io::lock::FileLock::try_take(&lock_path)?.ok_or_else(|| {
            Error::internal(format!(
                "{} is locked by another process",
                lock_path.display()
            ))
        })?;
        copy_dir(src, &tmp)?;
        fs::sync_dir(parts)?;
        match fs::rename_noreplace(&tmp, target) {
            Ok(()) => Ok(Placed::Copied(lock)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(Placed::Taken),
            Err(e) => Err(Error::io(target, "rename the copy to", e)),
        }
    })();
    if !matches!(copied, Ok(Placed::Copied(_))) {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    copied
}

/// The writer lock of the part dataset at `dir`, held: a part is committed only while no
/// writer has it open ([`Error::WriterBusy`] naming its lock file otherwise), and none can open
/// it until the lock is dropped.
pub(crate) fn hold_writer_lock(dir: &Path) -> Result<Box<dyn crate::io::vfs::VfsLock>> {
    crate::io::vfs::StdFs::shared().lock(&dir.join(crate::format::layout::LOCK))
}

/// The writer lock of the part dataset at `dir` if it is free at once (`None` if it is
/// taken): for `gc`, which keeps a part
/// it finds taken, and for a commit placing a part, which tries the next id.
pub(crate) fn writer_lock_if_free(dir: &Path) -> Result<Option<crate::io::lock::FileLock>> {
    let path = dir.join(crate::format::layout::LOCK);
    crate::io::lock::FileLock::try_take(&path)
}

/// Sets the modification time of the part directory `dir` to now: a part moved under `parts/`
/// keeps its files' times, and `gc` counts a part's age from its newest time, so a part a
/// killed commit placed long after it was written is young for the whole limit. (A live
/// commit needs no time: `gc` does not run beside it.) A failure is logged, not returned.
pub(crate) fn touch(dir: &Path) {
    let touched =
        std::fs::File::open(dir).and_then(|f| f.set_modified(std::time::SystemTime::now()));
    if let Err(e) = touched {
        tracing::warn!(dir = %dir.display(), error = %e, "could not set a placed part's modification time");
    }
}

/// Removes the dataset directory `src` (a part copied into place): its `meta.json` first, so a
/// removal cut short leaves a directory that is no dataset (a retry of the commit takes the
/// copy), never a dataset missing some of its files.
pub(crate) fn remove_part(src: &Path) -> Result<()> {
    let meta = crate::format::layout::meta(src);
    match std::fs::remove_file(&meta) {
        Ok(()) => fs::sync_dir(src)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(meta, "remove", e)),
    }
    match std::fs::remove_dir_all(src) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(src, "remove", e)),
    }
}

/// Copies the directory tree `src` into `dst` (which exists), fsyncing every file and
/// directory; a file named `writer.lock` at the top is not copied (the copy has its own, held).
/// Errors name the file that failed: the source for a read, the copy for a write.
fn copy_dir(src: &Path, dst: &Path) -> Result<()> {
    for entry in std::fs::read_dir(src).map_err(|e| Error::io(src, "list", e))? {
        let entry = entry.map_err(|e| Error::io(src, "list", e))?;
        let from = entry.path();
        let to = dst.join(entry.file_name());
        let kind = entry.file_type().map_err(|e| Error::io(&from, "stat", e))?;
        if kind.is_dir() {
            std::fs::create_dir(&to).map_err(|e| Error::io(&to, "create directory", e))?;
            copy_dir(&from, &to)?;
        } else if kind.is_file() {
            if entry.file_name() == crate::format::layout::LOCK && to.exists() {
                continue;
            }
            copy_file(&from, &to)?;
        } else {
            return Err(not_a_plain_file(&from));
        }
    }
    fs::sync_dir(dst)
}

/// The error for an entry of a part that is neither a file nor a directory.
pub(crate) fn not_a_plain_file(path: &Path) -> Error {
    Error::NotADataset {
        path: path.to_path_buf(),
        reason: "a part holds only files and directories; this is a symbolic link or \
                 another special file (copy the data it names into the part instead)"
            .to_string(),
    }
}

/// Copies the file `from` to the new file `to` and fsyncs it.
fn copy_file(from: &Path, to: &Path) -> Result<()> {
    use std::io::{Read, Write};
    let mut input = std::fs::File::open(from).map_err(|e| Error::io(from, "open", e))?;
    let mut output = fs::create_new(to)?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io(from, "read", e)),
        };
        output
            .write_all(buf.get(..n).unwrap_or_default())
            .map_err(|e| Error::io(to, "write", e))?;
    }
    output.sync_all().map_err(|e| Error::io(to, "fsync", e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A copy that cannot be written names the copy, and one that cannot be read the source.
    #[test]
    fn a_failed_copy_names_the_file_that_failed() {
        let tmp = tempfile::tempdir().unwrap();
        let from = tmp.path().join("from");
        std::fs::write(&from, b"bytes").unwrap();
        let to = tmp.path().join("missing-dir").join("to");
        match copy_file(&from, &to).unwrap_err() {
            Error::Io { path, .. } => assert_eq!(path, to),
            other => panic!("{other}"),
        }
        let gone = tmp.path().join("gone");
        match copy_file(&gone, &tmp.path().join("to")).unwrap_err() {
            Error::Io { path, .. } => assert_eq!(path, gone),
            other => panic!("{other}"),
        }
        copy_file(&from, &tmp.path().join("to")).unwrap();
        assert_eq!(std::fs::read(tmp.path().join("to")).unwrap(), b"bytes");
    }
}
