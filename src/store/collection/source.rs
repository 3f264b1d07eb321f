//! The provenance record of a part (`_source`, encoded by `format/source.rs`): where a part came
//! from, so that a commit recognises its own earlier copy of a part by where it came from, never
//! by its bytes alone (two directories holding equal records are two parts).
//!
//! A commit writes the record into the source dataset's directory before it places the part
//! (once: a later commit of the same directory reads it back), so it travels with the rename
//! into `parts/<id>/` and is copied with a copy; an object-store commit creates
//! `parts/<id>/_source` from it with a conditional create before it pushes the part. The record
//! names the host and the directory's absolute path, and a nonce drawn when it was written: a
//! new dataset written at the same path (a new directory, without the record) draws another.
//! What is unique is the nonce; what is stable across a retry after a kill is the record
//! itself, kept in the source directory (which a kill leaves in place, or moved whole into
//! `parts/`).

use crate::error::{Error, Result};
use crate::format::source::{PartSource, SOURCE_FILE, SOURCE_FORMAT, SOURCE_VERSION};
use crate::io::fs;
use std::path::{Path, PathBuf};

/// The temporary name a record is written under before it is renamed to [`SOURCE_FILE`].
pub(crate) const SOURCE_TMP: &str = "_source.tmp";

/// This machine's host name (empty if it cannot be read).
pub(crate) fn host() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The absolute path a record names for directory `dir`, whether it exists or not: its
/// parent's canonical path joined with its name (the form a retry computes for a directory a
/// commit moved away).
pub(crate) fn place_of(dir: &Path) -> String {
    let absolute = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let at = match (absolute.parent(), absolute.file_name()) {
        (Some(parent), Some(name)) => parent
            .canonicalize()
            .map_or_else(|_| absolute.clone(), |p| p.join(name)),
        _ => absolute,
    };
    at.display().to_string()
}

/// The record in directory `dir`, if it holds a readable one (a missing or damaged record is
/// no record: the part is then recognised by no one as their earlier copy).
pub(crate) fn read(dir: &Path) -> Option<PartSource> {
    let bytes = std::fs::read(dir.join(SOURCE_FILE)).ok()?;
    PartSource::decode(&bytes).ok()
}

/// The record of the source dataset at `dir`: the one it holds if that names this host and
/// `dir`'s path; otherwise a fresh one (a new nonce). With `write` the fresh record is written
/// into `dir` (temporary name, fsync, rename over a stale one, fsync of `dir`) so that it goes
/// wherever the directory goes; without, a stale record found there (the directory was moved or
/// copied from elsewhere, and is perhaps some collection's part) is left as it is and the fresh
/// record derived from its nonce and `dir`'s path, which is as stable as the record itself.
/// The caller holds the dataset's writer lock.
///
/// # Errors
/// I/O errors naming the file.
pub(crate) fn ensure(dir: &Path, write: bool) -> Result<PartSource> {
    let (host, path) = (host(), place_of(dir));
    let found = read(dir);
    if let Some(rec) = found.as_ref().filter(|r| r.host == host && r.path == path) {
        return Ok(rec.clone());
    }
    if let (false, Some(stale)) = (write, found.as_ref()) {
        let nonce = u64::from_str_radix(&stale.nonce, 16).unwrap_or(0);
        let at = u64::from(crate::checksum::crc32c(path.as_bytes()));
        return Ok(PartSource {
            nonce: format!("{:016x}", crate::hash::hash(&[nonce, at])),
            host,
            path,
            ..stale.clone()
        });
    }
    let rec = PartSource {
        format: SOURCE_FORMAT.to_string(),
        version: SOURCE_VERSION,
        host,
        path,
        nonce: format!("{:016x}", super::unique_word()),
        created_unix_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    };
    if write || found.is_none() {
        write_record(dir, &rec)?;
    }
    Ok(rec)
}

/// Writes `rec` as `dir`'s record, durably.
fn write_record(dir: &Path, rec: &PartSource) -> Result<()> {
    let (tmp, file) = (dir.join(SOURCE_TMP), dir.join(SOURCE_FILE));
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&rec.encode())?;
        f.sync_all()
    };
    write().map_err(|e| Error::io(&tmp, "write", e))?;
    std::fs::rename(&tmp, &file).map_err(|e| Error::io(&file, "rename", e))?;
    fs::sync_dir(dir)
}

/// The one rule by which a commit takes a part it finds under an id for its own earlier copy
/// (locally and on a store): the found part's record is this source's record (host, path and
/// nonce) and its `meta.json` text is the source's (the same commit of the same dataset). A
/// part without a record (placed before records existed, or by a writer that pushed it there
/// itself) is nobody's earlier copy.
pub(crate) fn is_earlier_copy(
    mine: &PartSource,
    my_meta: &[u8],
    found: Option<&PartSource>,
    found_meta: &[u8],
) -> bool {
    found == Some(mine) && my_meta == found_meta
}

/// The part under `parts_dir` that an earlier commit placed from `dir` (a dataset there, whose
/// record names this host and `dir`'s path, and `nonce` if given): the newest such record's, if
/// several (the same path committed again after a new dataset was written there).
///
/// # Errors
/// I/O errors listing `parts_dir`.
pub(crate) fn find_placed(
    parts_dir: &Path,
    dir: &Path,
    nonce: Option<&str>,
) -> Result<Option<String>> {
    let (host, path) = (host(), place_of(dir));
    let mut best: Option<(u64, String)> = None;
    let entries = std::fs::read_dir(parts_dir).map_err(|e| Error::io(parts_dir, "list", e))?;
    for e in entries {
        let e = e.map_err(|e| Error::io(parts_dir, "list", e))?;
        let id = e.file_name().to_string_lossy().into_owned();
        if id.starts_with('.') {
            continue;
        }
        let part: PathBuf = e.path();
        let Some(rec) = read(&part) else { continue };
        let matches = rec.host == host
            && rec.path == path
            && nonce.is_none_or(|n| n == rec.nonce)
            && crate::format::layout::meta(&part).exists();
        let key = (rec.created_unix_ms, id);
        if matches && best.as_ref().is_none_or(|b| key > *b) {
            best = Some(key);
        }
    }
    Ok(best.map(|(_, id)| id))
}
