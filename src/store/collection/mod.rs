//! Collections: many datasets (parts, each written by one task) read as one dataset with global
//! indices, committed together by numbered, create-only manifests.
//!
//! ```text
//! <root>/_collection/00000000000000000001.json   manifest 1 (create-only; the highest wins)
//! <root>/parts/<part-id>/                         each an ordinary dataset
//! ```
//!
//! ```text
//! manifests.rs  the ManifestStore seam (create-new of a numbered manifest, list, read) and the
//!               local directory behind it; an object store is one more implementation
//! committer.rs  commit(): check the parts, move them under parts/, then append them
//! append.rs     create manifest N+1 on top of N, rebase and retry when another committer took
//!               N+1 (for any ManifestStore: the remote committer uses it too)
//! gc.rs         gc(): remove the parts no manifest names once they are older than a limit,
//!               never beside a live commit (the commit lock, below)
//! place.rs      moving a part under parts/ (rename, or copy + fsync + lock across file
//!               systems; the original is removed once a manifest names the copy)
//! immutable.rs  a part a manifest names is never opened for writing
//! source.rs     a part's provenance record (`_source`): where it came from, the one rule by
//!               which a commit (local or remote) takes a part it finds for its own earlier copy
//! open.rs       CollectionDir, the Location whose snapshot is the latest manifest's parts
//! ```
//!
//! The format is in `docs/FORMAT.md`, "Collections"; how a batch over many parts stays one
//! batch through the read engine is in `docs/ARCHITECTURE.md`.

pub(crate) mod append;
mod committer;
pub(crate) mod gc;
pub(crate) mod immutable;
pub(crate) mod manifests;
pub(crate) mod open;
pub(crate) mod options;
pub(crate) mod place;
pub(crate) mod source;

pub use committer::commit;
#[cfg(feature = "remote")]
pub(crate) use committer::{id_of, prepare_root};
pub use gc::GcReport;
pub use open::CollectionDir;
pub use options::{CommitOptions, CommitReport, CommitStep};

use crate::error::Result;
use crate::format::collection::ManifestField;
use crate::format::meta::FieldMeta;
use std::path::Path;

/// The lock file of a local collection's commits, in `_collection/` (no manifest's name, and
/// not hidden: `gc` never takes it for a leftover).
pub(crate) const COMMIT_LOCK: &str = "commit.lock";

/// Takes the commit lock of the local collection at `root` (whose `_collection/` exists),
/// waiting while it is held the other way. Every committer (and a pull, for its whole run) holds
/// it shared from before it places its first part until its manifest is linked or its parts are
/// moved back; `gc` holds it exclusively while it looks for what to remove and removes it. So
/// `gc` never runs beside a live commit: what a commit owns before a manifest names it (its
/// placed parts, copies under `parts/.incoming-…`, temporary manifests) is never removed,
/// whatever the age limit, and a commit never waits longer than one `gc` run. A process killed
/// mid-commit releases the lock with its descriptors: what it left is then a leftover like any
/// other, removed by age.
///
/// A `gc` on the thread of a live commit to the same collection (from its
/// [`CommitOptions::on_step`] callback; the collection recognised by its `_collection/`
/// directory's device and inode, whatever the path) would wait for that commit forever: it is
/// refused. (A callback that waits for a `gc` on another thread waits forever too: a `gc` runs
/// after the commit returns.)
///
/// # Errors
/// [`crate::Error::InvalidConfig`] for that `gc`; I/O errors naming the lock file.
pub(crate) fn commit_lock(root: &Path, mode: crate::io::lock::Mode) -> Result<CommitLock> {
    let key = {
        use std::os::unix::fs::MetadataExt;
        let dir = root.join(manifests::MANIFEST_DIR);
        let m = std::fs::metadata(&dir).map_err(|e| crate::Error::io(&dir, "stat", e))?;
        // The process too: a child forked inside a commit holds no lock of its parent's.
        (m.dev(), m.ino(), std::process::id())
    };
    let committing = COMMITTING.with(|c| c.borrow().contains(&key));
    if committing && mode == crate::io::lock::Mode::Exclusive {
        return Err(crate::Error::InvalidConfig {
            reason: format!(
                "gc of {} was called on the thread of a commit to it (from its on_step \
                 callback): it would wait for that commit forever; run it after the commit \
                 returns (a callback must never wait for a gc)",
                root.display()
            ),
        });
    }
    let path = root.join(manifests::MANIFEST_DIR).join(COMMIT_LOCK);
    let lock = crate::io::lock::FileLock::take_waiting(
        &path,
        mode,
        || tracing::info!(lock = %path.display(), ?mode, "waiting for the collection's commit lock (a gc or a commit holds it)"),
    )?;
    let registered = (mode == crate::io::lock::Mode::Shared).then(|| {
        COMMITTING.with(|c| c.borrow_mut().push(key));
        key
    });
    Ok(CommitLock {
        _lock: lock,
        registered,
    })
}

thread_local! {
    /// The collections (their `_collection/` directory's device and inode) this thread holds
    /// the commit lock of, shared (a commit or a pull in progress), with the holding process.
    static COMMITTING: std::cell::RefCell<Vec<(u64, u64, u32)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// A collection's commit lock, held until dropped.
pub(crate) struct CommitLock {
    _lock: crate::io::lock::FileLock,
    /// The collection this thread registered as committing to, if held shared.
    registered: Option<(u64, u64, u32)>,
}

impl Drop for CommitLock {
    fn drop(&mut self) {
        if let Some(key) = self.registered.take() {
            COMMITTING.with(|c| {
                let mut c = c.borrow_mut();
                if let Some(at) = c.iter().position(|k| *k == key) {
                    c.swap_remove(at);
                }
            });
        }
    }
}

/// Whether `dir` is the root of a local collection (it holds `_collection/`).
pub(crate) fn is_collection(dir: &Path) -> bool {
    dir.join(manifests::MANIFEST_DIR).is_dir()
}

/// The first field (by position) where a part's fields differ from a collection's, and how:
/// `None` if they are equal (name, dtype, shape and codec of every field, in order).
pub(crate) fn schema_difference(
    collection: &[ManifestField],
    part: &[FieldMeta],
) -> Option<(String, String)> {
    let n = collection.len().max(part.len());
    (0..n).find_map(|k| match (collection.get(k), part.get(k)) {
        (Some(c), None) => Some((
            c.name.clone(),
            format!("the part has no field #{k} (it has {} fields)", part.len()),
        )),
        (None, Some(p)) => Some((
            p.name.clone(),
            format!(
                "the collection has no field #{k} (it has {} fields)",
                collection.len()
            ),
        )),
        (Some(c), Some(p)) if c.name != p.name => Some((
            c.name.clone(),
            format!("field #{k} is {:?} in the part", p.name),
        )),
        (Some(c), Some(p)) if c.dtype != p.dtype => Some((
            c.name.clone(),
            format!(
                "dtype {} in the collection, {} in the part",
                c.dtype, p.dtype
            ),
        )),
        (Some(c), Some(p)) if c.shape != p.shape => Some((
            c.name.clone(),
            format!(
                "shape {:?} in the collection, {:?} in the part",
                c.shape, p.shape
            ),
        )),
        (Some(c), Some(p)) if c.codec != p.codec => Some((
            c.name.clone(),
            format!(
                "codec {} in the collection, {} in the part",
                c.codec, p.codec
            ),
        )),
        _ => None,
    })
}

/// The fields a commit checks its parts against: the latest manifest's, or, for the first
/// commit, those of its first part.
///
/// # Errors
/// [`crate::Error::InvalidConfig`] for a first commit without a part.
pub(crate) fn collection_fields(
    root: &Path,
    latest: Option<&[ManifestField]>,
    first_part: Option<&[FieldMeta]>,
) -> crate::Result<Vec<ManifestField>> {
    match (latest, first_part) {
        (Some(fields), _) => Ok(fields.to_vec()),
        (None, Some(part)) => Ok(manifest_fields(part)),
        (None, None) => Err(crate::Error::InvalidConfig {
            reason: format!(
                "{}: the first commit of a collection needs at least one part",
                root.display()
            ),
        }),
    }
}

/// The fields of a collection whose parts have `fields`.
pub(crate) fn manifest_fields(fields: &[FieldMeta]) -> Vec<ManifestField> {
    fields
        .iter()
        .map(|f| ManifestField {
            name: f.name.clone(),
            dtype: f.dtype,
            shape: f.shape.clone(),
            codec: f.codec,
        })
        .collect()
}

/// A word no other process or call is likely to draw: for temporary names and generated part
/// ids.
pub(crate) fn unique_word() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    crate::hash::hash(&[
        nanos,
        u64::from(std::process::id()),
        COUNTER.fetch_add(1, Ordering::Relaxed),
    ])
}
