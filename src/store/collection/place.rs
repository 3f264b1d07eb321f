//! Moving a part under its collection's `parts/`: a rename where the part is on the same file
//! system (atomic: the part is at its old path or at its new one, whole), else a copy into a
//! hidden temporary directory, fsynced file by file, renamed into place, and only then the
//! original removed. Nothing here ever replaces something already at the target.

use crate::error::{Error, Result};
use crate::io::fs;
use std::path::Path;

/// What moving a part into `target` did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Placed {
    /// The part is at `target` now.
    Moved,
    /// Something else is at `target`: nothing moved.
    Taken,
}

/// Moves the dataset directory `src` to `target` (in `parts`, which exists), never replacing
/// what is there. The parent directories involved are fsynced, so the move is durable when
/// this returns.
pub(crate) fn move_part(src: &Path, parts: &Path, target: &Path) -> Result<Placed> {
    match fs::rename_noreplace(src, target) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(Placed::Taken),
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => return copy_part(src, parts, target),
        Err(e) => return Err(Error::io(src, "rename", e)),
    }
    fs::sync_dir(parts)?;
    if let Some(parent) = src.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::sync_dir(parent)?;
    }
    Ok(Placed::Moved)
}

/// The move across file systems: copy into `parts/.incoming-…`, fsync every file and
/// directory, rename into place, then remove the original.
fn copy_part(src: &Path, parts: &Path, target: &Path) -> Result<Placed> {
    let tmp = parts.join(format!(".incoming-{:016x}", super::unique_word()));
    let copied = copy_dir(src, &tmp).and_then(|()| {
        fs::sync_dir(parts)?;
        match fs::rename_noreplace(&tmp, target) {
            Ok(()) => Ok(Placed::Moved),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(Placed::Taken),
            Err(e) => Err(Error::io(&tmp, "rename", e)),
        }
    });
    if !matches!(copied, Ok(Placed::Moved)) {
        let _ = std::fs::remove_dir_all(&tmp);
        return copied;
    }
    fs::sync_dir(parts)?;
    remove_part(src)?;
    if let Some(parent) = src.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::sync_dir(parent)?;
    }
    Ok(Placed::Moved)
}

/// The writer lock of the part dataset at `dir`, held: a part is committed only while no
/// writer has it open ([`Error::WriterBusy`] naming its lock file otherwise), and none can open
/// it until the lock is dropped.
pub(crate) fn hold_writer_lock(dir: &Path) -> Result<Box<dyn crate::io::vfs::VfsLock>> {
    crate::io::vfs::StdFs::shared().lock(&dir.join(crate::store::layout::LOCK))
}

/// The writer lock of the part dataset at `dir` if it is free at once, tried once (`None` if
/// it is taken, or a spawned child holds a copy for a moment): for `gc`, which keeps a part
/// it finds taken, and for a commit placing a part, which tries the next id.
pub(crate) fn writer_lock_if_free(dir: &Path) -> Result<Option<crate::io::lock::FileLock>> {
    let path = dir.join(crate::store::layout::LOCK);
    crate::io::lock::FileLock::try_take_once(&path, crate::io::lock::Target::File)
}

/// Sets the modification time of the part directory `dir` to now: a part moved under `parts/`
/// keeps its files' times, and `gc` counts a part's age from its newest time, so a part written
/// long ago and being committed now is young while its commit runs.
pub(crate) fn touch(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|f| f.set_modified(std::time::SystemTime::now()))
        .map_err(|e| Error::io(dir, "set mtime", e))
}

/// Removes the dataset directory `src` (a part copied into place): its `meta.json` first, so a
/// removal cut short leaves a directory that is no dataset (a retry of the commit takes the
/// copy), never a dataset missing some of its files.
pub(crate) fn remove_part(src: &Path) -> Result<()> {
    let meta = crate::store::layout::meta(src);
    match std::fs::remove_file(&meta) {
        Ok(()) => fs::sync_dir(src)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(meta, "remove", e)),
    }
    std::fs::remove_dir_all(src).map_err(|e| Error::io(src, "remove", e))
}

/// Copies the directory tree `src` to `dst` (which must not exist), fsyncing every file and
/// directory.
fn copy_dir(src: &Path, dst: &Path) -> Result<()> {
    std::fs::create_dir(dst).map_err(|e| Error::io(dst, "create directory", e))?;
    for entry in std::fs::read_dir(src).map_err(|e| Error::io(src, "list", e))? {
        let entry = entry.map_err(|e| Error::io(src, "list", e))?;
        let from = entry.path();
        let to = dst.join(entry.file_name());
        let kind = entry.file_type().map_err(|e| Error::io(&from, "stat", e))?;
        if kind.is_dir() {
            copy_dir(&from, &to)?;
        } else if kind.is_file() {
            std::fs::copy(&from, &to).map_err(|e| Error::io(&from, "copy", e))?;
            std::fs::File::open(&to)
                .and_then(|f| f.sync_all())
                .map_err(|e| Error::io(&to, "fsync", e))?;
        }
    }
    fs::sync_dir(dst)
}
