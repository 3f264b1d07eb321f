//! Removing what no manifest names from a local collection: each directory under `parts/` that
//! no manifest lists (any manifest, not only the latest: a reader may still be on an older one)
//! and whose newest file is older than a limit, and the leftovers of failed commits (hidden
//! temporaries in `_collection/` and `parts/`) older than it.
//!
//! A part a commit in progress holds (its writer lock, held from the commit's check of the part
//! to its manifest) is kept however old, and the manifests created meanwhile are read before a
//! part is removed. A part under `parts/` that no commit holds yet is protected by the age
//! limit only. (Placing a part sets its directory's modification time to the time it was
//! placed, so the limit counts from there.)

use super::manifests::{parse_manifest_name, LocalManifests, ManifestStore, MANIFEST_DIR};
use crate::error::{Error, Result};
use crate::format::collection::{Manifest, COLLECTION_VERSION};
use crate::format::meta::MetaError;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// What a garbage collection of a collection did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GcReport {
    /// The parts removed (no manifest names them, and they were older than the limit), by id.
    pub removed: Vec<String>,
    /// The parts kept (a manifest names them, or they are younger than the limit), by id.
    pub kept: Vec<String>,
    /// Bytes of the files (objects) removed, parts and leftovers.
    pub bytes_freed: u64,
    /// Leftovers of failed commits removed (temporary manifests, incomplete copies, probes).
    pub leftovers: u64,
    /// Manifests read: every one the collection has.
    pub manifests: usize,
}

/// Every part id some manifest of `store` names, and the number of manifests. A damaged
/// manifest is an error (nothing is removed then: a part it names might be removed).
/// Used by the object-store gc (feature `remote`); the local gc re-reads as it removes.
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
pub(crate) fn referenced(store: &dyn ManifestStore) -> Result<(HashSet<String>, usize)> {
    let numbers = store.list()?;
    let mut ids = HashSet::new();
    for &n in &numbers {
        let m = decode(store, n, &store.read(n)?)?;
        ids.extend(m.parts.into_iter().map(|p| p.id));
    }
    Ok((ids, numbers.len()))
}

/// Reads the manifests of `store` not in `read` yet, adding their numbers to `read` and the
/// part ids they name to `named`. A damaged manifest is an error (nothing more is removed
/// then).
fn read_new_manifests(
    store: &dyn ManifestStore,
    read: &mut HashSet<u64>,
    named: &mut HashSet<String>,
) -> Result<()> {
    for n in store.list()? {
        if read.insert(n) {
            let m = decode(store, n, &store.read(n)?)?;
            named.extend(m.parts.into_iter().map(|p| p.id));
        }
    }
    Ok(())
}

/// Decodes manifest `number`'s bytes, naming it in errors.
pub(crate) fn decode(store: &dyn ManifestStore, number: u64, bytes: &[u8]) -> Result<Manifest> {
    Manifest::decode(bytes).map_err(|e| match e {
        MetaError::Corrupt(reason) => Error::MetaCorrupt {
            path: store.name_of(number),
            reason,
        },
        MetaError::Version(found) => Error::UnsupportedVersion {
            path: store.name_of(number),
            found,
            supported: COLLECTION_VERSION,
        },
    })
}

/// Whether something last modified at `modified` is older than `limit` at `now` (strictly; a
/// time in the future is young).
pub(crate) fn is_older(now: SystemTime, modified: SystemTime, limit: Duration) -> bool {
    now.duration_since(modified).is_ok_and(|age| age > limit)
}

/// Garbage-collects the local collection at `root` (see the module's documentation), ages
/// measured at `now`.
///
/// # Errors
/// [`Error::NotADataset`] if `root` is no collection; a damaged manifest's
/// [`Error::MetaCorrupt`] (nothing is removed then); I/O errors naming the file.
pub(crate) fn gc_dir(root: &Path, older_than: Duration, now: SystemTime) -> Result<GcReport> {
    if !super::is_collection(root) {
        return Err(Error::NotADataset {
            path: root.to_path_buf(),
            reason: format!("not a collection (it holds no {MANIFEST_DIR}/)"),
        });
    }
    let store = LocalManifests::new(root);
    let parts_dir = root.join("parts");
    // The parts first, the manifests next: a part committed meanwhile is named by a manifest
    // read below; one committed after that was placed after the listing, or is young.
    let mut entries = Vec::new();
    match std::fs::read_dir(&parts_dir) {
        Ok(list) => {
            for e in list {
                let e = e.map_err(|e| Error::io(&parts_dir, "list", e))?;
                entries.push(e.file_name().to_string_lossy().into_owned());
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(&parts_dir, "list", e)),
    }
    entries.sort();
    let (mut read, mut named) = (HashSet::new(), HashSet::new());
    read_new_manifests(&store, &mut read, &mut named)?;
    let mut report = GcReport::default();
    for name in entries {
        let dir = parts_dir.join(&name);
        if name.starts_with('.') {
            // An incomplete copy (`.incoming-…`) of a commit that failed.
            let (newest, bytes) = newest_and_bytes(&dir)?;
            if newest.is_some_and(|t| is_older(now, t, older_than)) {
                remove_any(&dir)?;
                report.leftovers = report.leftovers.saturating_add(1);
                report.bytes_freed = report.bytes_freed.saturating_add(bytes);
            }
            continue;
        }
        if named.contains(&name) {
            report.kept.push(name);
            continue;
        }
        let (newest, bytes) = newest_and_bytes(&dir)?;
        if !newest.is_some_and(|t| is_older(now, t, older_than)) {
            report.kept.push(name);
            continue;
        }
        // A symlink (or a file) is removed itself, never what it points to.
        let real_dir = std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir());
        if !real_dir {
            remove_any(&dir)?;
            report.removed.push(name);
            report.bytes_freed = report.bytes_freed.saturating_add(bytes);
            continue;
        }
        // A commit in progress holds the writer lock of each part it takes from before it
        // places it until its manifest is written (and a writer holds it while it writes a
        // part under parts/): such a part is kept, however old its files. Holding the lock
        // also keeps a commit from taking the part while it is removed.
        let Some(_lock) = super::place::writer_lock_if_free(&dir)? else {
            report.kept.push(name);
            continue;
        };
        // A commit that finished after the manifests were read names the part in a newer one.
        read_new_manifests(&store, &mut read, &mut named)?;
        if named.contains(&name) {
            report.kept.push(name);
            continue;
        }
        super::place::remove_part(&dir)?;
        report.removed.push(name);
        report.bytes_freed = report.bytes_freed.saturating_add(bytes);
    }
    report.manifests = read.len();
    // Temporary manifests of committers that died before removing them.
    let mdir = store.dir();
    for e in std::fs::read_dir(mdir).map_err(|e| Error::io(mdir, "list", e))? {
        let e = e.map_err(|e| Error::io(mdir, "list", e))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') || parse_manifest_name(&name).is_some() {
            continue;
        }
        let path = e.path();
        let (newest, bytes) = newest_and_bytes(&path)?;
        if newest.is_some_and(|t| is_older(now, t, older_than)) {
            remove_any(&path)?;
            report.leftovers = report.leftovers.saturating_add(1);
            report.bytes_freed = report.bytes_freed.saturating_add(bytes);
        }
    }
    crate::io::fs::sync_dir(&parts_dir)?;
    crate::io::fs::sync_dir(mdir)?;
    Ok(report)
}

/// The newest modification time of `path` and of everything under it, and the bytes of its
/// files; `None` if it is gone.
fn newest_and_bytes(path: &Path) -> Result<(Option<SystemTime>, u64)> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((None, 0)),
        Err(e) => return Err(Error::io(path, "stat", e)),
    };
    let mut newest = meta.modified().ok();
    let mut bytes = 0u64;
    if meta.is_dir() {
        let mut stack: Vec<PathBuf> = vec![path.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).map_err(|e| Error::io(&dir, "list", e))? {
                let e = e.map_err(|e| Error::io(&dir, "list", e))?;
                let p = e.path();
                let m = std::fs::symlink_metadata(&p).map_err(|e| Error::io(&p, "stat", e))?;
                newest = newest.max(m.modified().ok());
                if m.is_dir() {
                    stack.push(p);
                } else {
                    bytes = bytes.saturating_add(m.len());
                }
            }
        }
    } else {
        bytes = meta.len();
    }
    Ok((newest, bytes))
}

/// Removes the file or directory tree `path`.
fn remove_any(path: &Path) -> Result<()> {
    let dir = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir());
    let r = if dir {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
    match r {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(path, "remove", e)),
    }
}
