//! Pulling a collection from an object store into a local directory: each part of the store's
//! latest manifest into `<root>/parts/<id>` (the dataset pull: temporary names, fsync, CRC
//! check, rename; resumable), then the local committer appends the parts the local collection
//! lacks, so its manifest lists exactly the store's parts, in order. Pulls into one directory
//! run one after the other: each holds the collection's pull lock (`_collection/pull.lock`) for its
//! whole run.

use std::path::Path;
use std::sync::Arc;

use super::mirror::{compare, Target};
use super::push::add;
use super::RemoteManifests;
use crate::error::{Error, Result};
use crate::remote::pull::pull_part;
use crate::remote::push::{TransferOptions, TransferReport};
use crate::remote::store::Store;
use crate::store::collection::manifests::{LocalManifests, ManifestStore};
use crate::store::collection::{commit, schema_difference, CommitOptions};
use crate::store::snapshot::read_meta;

/// Pulls the collection at `store` into `root` (see [`crate::remote::pull`], "Collections").
pub(crate) fn pull_collection(
    store: &Arc<Store>,
    root: &Path,
    options: &TransferOptions,
) -> Result<TransferReport> {
    options.check()?;
    if crate::format::layout::meta(root).exists() {
        return Err(Error::InvalidConfig {
            reason: format!(
                "{} holds a dataset and {} is a collection: pull it into a new directory",
                root.display(),
                store.url()
            ),
        });
    }
    let theirs = RemoteManifests::new(Arc::clone(store))
        .latest()?
        .ok_or_else(|| super::probe::no_commit(store))?;
    std::fs::create_dir_all(root).map_err(|e| Error::io(root, "create directory", e))?;
    let local = LocalManifests::new(root);
    crate::store::collection::prepare_root(root, &local)?;
    let _lock = lock_root(root)?;
    // The parts are pulled under parts/ before the local manifest names them: no gc may run
    // meanwhile (the commit lock, held shared as a committer holds it).
    let _commits = crate::store::collection::commit_lock(root, crate::io::lock::Mode::Shared)?;
    let ours = local.latest()?;
    if let Target::Diverged(why) = compare(&theirs, ours.as_ref()) {
        return Err(Error::InvalidConfig {
            reason: format!(
                "{} holds another collection than {} ({why}): a pull only appends the parts a \
                 collection lacks; pull into a new directory",
                root.display(),
                store.url()
            ),
        });
    }
    let mut report = TransferReport {
        url: store.url().to_string(),
        generation: theirs.number,
        slot: theirs.number,
        transferred: (0, 0),
        skipped: (0, 0),
        already_done: true,
        parts: Some(theirs.parts.len() as u64),
    };
    // 1. Every part (each checked file by file, so "already done" means every file checks).
    let mut dirs = Vec::with_capacity(theirs.parts.len());
    for part in &theirs.parts {
        let dir = root.join("parts").join(&part.id);
        let url = store.object_url(&format!("parts/{}", part.id));
        let r = pull_part(&url, &dir, options)?;
        if r.generation != part.generation {
            return Err(Error::PartChanged {
                part: part.id.clone(),
                path: url.into(),
                expected: part.generation,
                found: r.generation,
            });
        }
        // The generation alone does not make it the pinned commit: another dataset pushed
        // under the part's id is at generation 1 too. A reader checks the length and the
        // fields as well; so does the pull, before any local manifest names the part.
        let (_, meta) = read_meta(&dir)?;
        if meta.len != part.len {
            return Err(Error::RemoteCorrupt {
                object: url,
                reason: format!(
                    "part {:?} has {} records at generation {}, the manifest says {}",
                    part.id, meta.len, part.generation, part.len
                ),
            });
        }
        if let Some((field, reason)) = schema_difference(&theirs.fields, &meta.fields) {
            return Err(Error::PartMismatch {
                part: part.id.clone(),
                path: dir,
                field,
                reason,
            });
        }
        report.transferred = add(report.transferred, r.transferred);
        report.skipped = add(report.skipped, r.skipped);
        report.already_done &= r.already_done;
        dirs.push(dir);
    }
    // 2. The local manifest, through the local committer (its part locks, numbering and crash
    // rules): the parts are under parts/ already and stay there.
    let committed = commit(root, &dirs, CommitOptions::default())?;
    report.already_done &= committed.added.is_empty();
    report.generation = committed.number;
    Ok(report)
}

/// The name of a collection's pull lock, beside its manifests: one pull into a directory at a
/// time.
const PULL_LOCK: &str = "pull.lock";

/// Takes the collection's pull lock (`_collection/pull.lock`), waiting while another pull holds
/// it.
fn lock_root(root: &Path) -> Result<crate::io::lock::FileLock> {
    let path = root
        .join(crate::store::collection::manifests::MANIFEST_DIR)
        .join(PULL_LOCK);
    crate::io::lock::FileLock::take_waiting(
        &path,
        crate::io::lock::Mode::Exclusive,
        || tracing::info!(dir = %root.display(), "another pull holds the collection directory; waiting for it"),
    )
}
