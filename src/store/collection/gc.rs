//! Removing what no manifest names from a local collection: each directory under `parts/` that
//! no manifest lists (any manifest, not only the latest: a reader may still be on an older one)
//! and whose newest file is older than a limit, and the leftovers of failed commits (hidden
//! temporaries in `_collection/` and `parts/`) older than it.
//!
//! `gc` holds the collection's commit lock exclusively for its whole run
//! ([`super::commit_lock`]), and every committer holds it shared from before it places its
//! first part until its manifest is linked: so no commit is live while `gc` looks, and what a
//! live commit owns (parts placed or being copied, temporary manifests) is never removed,
//! whatever the limit. A part a writer has open under `parts/` (its writer lock) is kept
//! however old. A part under `parts/` that nobody holds and no manifest names (what a killed
//! committer left, or one placed by hand) is protected by the age limit only. (Placing a part
//! sets its directory's modification time to the time it was placed, so the limit counts from
//! there.) Entries that vanish while `gc` looks (a writer's `meta.json.tmp` renamed over its
//! `meta.json`) are skipped.

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
    let _commits = super::commit_lock(root, crate::io::lock::Mode::Exclusive)?;
    // No commit runs while the lock is held. The parts are listed first and the manifests
    // read next all the same (and read again before each removal), as a build without the
    // lock expects of a gc beside it.
    let mut entries = Vec::new();
    match std::fs::read_dir(&parts_dir) {
        Ok(list) => {
            for e in list {
                match e {
                    Ok(e) => entries.push(e.file_name().to_string_lossy().into_owned()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(Error::io(&parts_dir, "list", e)),
                }
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
            // A copy a dead commit left (`.incoming-…`; a live commit's is not here: `gc`
            // holds the commit lock), or a dataset a writer is creating in place
            // (`.<name>.zrecord-create-<pid>-<hex>`: held by its writer from just after its
            // directory is made, and kept at least CREATE_FLOOR for that moment).
            let limit = match name.contains(crate::format::layout::CREATE_INFIX) {
                true => older_than.max(CREATE_FLOOR),
                false => older_than,
            };
            let (newest, bytes) = newest_and_bytes(&dir)?;
            if !newest.is_some_and(|t| is_older(now, t, limit)) {
                continue;
            }
            let _lock = match hold(&dir)? {
                Hold::Free(lock) => lock,
                Hold::Held | Hold::Gone => continue,
            };
            remove_any(&dir)?;
            report.leftovers = report.leftovers.saturating_add(1);
            report.bytes_freed = report.bytes_freed.saturating_add(bytes);
            continue;
        }
        if named.contains(&name) {
            report.kept.push(name);
            continue;
        }
        let (newest, bytes) = newest_and_bytes(&dir)?;
        let Some(newest) = newest else {
            continue; // Vanished meanwhile.
        };
        if !is_older(now, newest, older_than) {
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
        let _lock = match hold(&dir)? {
            Hold::Free(lock) => lock,
            Hold::Held => {
                report.kept.push(name);
                continue;
            }
            Hold::Gone => continue,
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
        let e = match e {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io(mdir, "list", e)),
        };
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
    // (A collection whose first commit has not made `parts/` yet has nothing there to sync.)
    if parts_dir.is_dir() {
        crate::io::fs::sync_dir(&parts_dir)?;
    }
    crate::io::fs::sync_dir(mdir)?;
    Ok(report)
}

/// How long a dataset being created in place under `parts/` is kept at least, whatever the
/// limit: its writer holds it from just after its directory is made, and this covers that
/// moment (a dead writer's leftover is an empty dataset).
const CREATE_FLOOR: Duration = Duration::from_secs(600);

/// Whether a directory under `parts/` is held by a writer or a commit.
enum Hold {
    /// Nobody holds it: its writer lock, now held by `gc`, keeps anyone from taking it (`None`
    /// for a symlink or a file, which has none).
    Free(Option<crate::io::lock::FileLock>),
    /// A writer or a commit holds it.
    Held,
    /// It vanished meanwhile.
    Gone,
}

/// Takes the writer lock of the directory `dir` if it is free (tried once). A symlink or a file
/// has no lock: it is free.
fn hold(dir: &Path) -> Result<Hold> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Ok(Hold::Free(None)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Hold::Gone),
        Err(e) => return Err(Error::io(dir, "stat", e)),
    }
    match super::place::writer_lock_if_free(dir) {
        Ok(Some(lock)) => Ok(Hold::Free(Some(lock))),
        Ok(None) => Ok(Hold::Held),
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ok(Hold::Gone)
        }
        Err(e) => Err(e),
    }
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
        // Anything that vanishes meanwhile (a writer's temporary renamed, a directory removed)
        // is skipped: it holds no bytes and no time any more.
        let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
        while let Some(dir) = stack.pop() {
            let list = match std::fs::read_dir(&dir) {
                Ok(list) => list,
                Err(e) if gone(&e) => continue,
                Err(e) => return Err(Error::io(&dir, "list", e)),
            };
            for e in list {
                let e = match e {
                    Ok(e) => e,
                    Err(e) if gone(&e) => continue,
                    Err(e) => return Err(Error::io(&dir, "list", e)),
                };
                let p = e.path();
                let m = match std::fs::symlink_metadata(&p) {
                    Ok(m) => m,
                    Err(e) if gone(&e) => continue,
                    Err(e) => return Err(Error::io(&p, "stat", e)),
                };
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
