//! Pushing a local collection to an object store: each part of its latest manifest goes to
//! `<url>/parts/<id>` (the dataset push: content-addressed data objects, the part's commit
//! last), then a manifest listing exactly those parts, in the same order, is created with a
//! conditional `PUT`. A part's commit already there is not pushed again, but only if it is the
//! local part's own (its files' content hashes): never on the word of a manifest listing the
//! same id, generation and length.

use std::path::Path;
use std::sync::Arc;

use super::lease::{removing, HeldLease, LeasedManifests};
use super::mirror::{compare, Target};
use super::RemoteManifests;
use crate::error::{Error, Result};
use crate::format::collection::{Manifest, PartMeta};
use crate::format::lease::LeaseKind;
use crate::remote::push::{
    push_with, require_conditional_create, Stack, TransferOptions, TransferReport,
};
use crate::remote::store::Store;
use crate::store::collection::manifests::{LocalManifests, ManifestStore};
use crate::store::snapshot::read_meta;

/// Pushes the latest manifest of the local collection at `root` to `url` (see
/// [`crate::remote::push`], "Collections").
pub(crate) fn push_collection(
    root: &Path,
    url: &str,
    options: &TransferOptions,
) -> Result<TransferReport> {
    options.check()?;
    let ours = LocalManifests::new(root)
        .latest()?
        .ok_or_else(|| Error::NotADataset {
            path: root.to_path_buf(),
            reason: "a collection with no manifest yet (commit parts to it first)".into(),
        })?;
    let store = Store::open(url, &options.store)?;
    if !options.single_writer {
        require_conditional_create(&store, "pushes")?;
    }
    let manifests = RemoteManifests::new(Arc::clone(&store));
    let diverged = |why: String| Error::PublishConflict {
        url: store.url().to_string(),
        reason: format!(
            "the collection there is not a prefix of {} ({why}): a push only appends the parts \
             a collection lacks; push to another URL",
            root.display()
        ),
    };
    let report = TransferReport {
        url: store.url().to_string(),
        generation: ours.number,
        slot: 0,
        transferred: (0, 0),
        skipped: (0, 0),
        already_done: false,
        parts: Some(ours.parts.len() as u64),
    };
    let theirs = manifests.latest()?;
    // The number of the store's manifest if it lists exactly our parts already.
    let same = match compare(&ours, theirs.as_ref()) {
        Target::Same => Some(theirs.map_or(0, |m| m.number)),
        Target::Prefix(_) => None,
        Target::Diverged(why) => return Err(diverged(why)),
    };

    // A lease naming every part before any is pushed, or found there and taken: gc keeps them
    // until the manifest names them (gc.rs). A part a gc is removing (what an earlier push of
    // it left) is not pushed on top of.
    let ids: Vec<String> = ours.parts.iter().map(|p| p.id.clone()).collect();
    let lease = HeldLease::take(&store, LeaseKind::Commit, ids)?;
    let leased = LeasedManifests::new(&manifests, &lease);
    let out = push_leased(root, &store, &ours, &leased, same, report, options);
    // As a commit's: deleted once the manifest exists, or when none can have been created.
    if out.is_ok() || !leased.tried() {
        if let Err(e) = lease.release() {
            tracing::debug!("deleting a push's lease: {e}");
        }
    }
    out
}

/// The parts, then the manifest, of [`push_collection`], under `leased`'s lease.
fn push_leased(
    root: &Path,
    store: &Arc<Store>,
    ours: &Manifest,
    manifests: &LeasedManifests<'_>,
    same: Option<u64>,
    mut report: TransferReport,
    options: &TransferOptions,
) -> Result<TransferReport> {
    let diverged = |why: String| Error::PublishConflict {
        url: store.url().to_string(),
        reason: format!(
            "the collection there is not a prefix of {} ({why}): a push only appends the parts \
             a collection lacks; push to another URL",
            root.display()
        ),
    };
    let being_removed = removing(store)?;
    if let Some(p) = ours.parts.iter().find(|p| being_removed.contains(&p.id)) {
        return Err(Error::PublishConflict {
            url: store.object_url(&format!("parts/{}", p.id)),
            reason: "zrecord gc is removing what an earlier push left there (no manifest named \
                     it); push again once it is done"
                .into(),
        });
    }

    // 1. Every part, those the store's manifest lists already too: the manifests compare parts
    // by id, generation and length only, and ids are directory names ("part-0"), so another
    // collection's part may match. A part's commit under `parts/<id>` must be the local part's
    // own (its files' content hashes): one there already is skipped (an earlier attempt's,
    // or an earlier push's), one cut short uploads what is missing, another dataset's is
    // refused and never committed on top of. The store was probed (or declared single-writer)
    // once for the whole push.
    let each = options.clone().single_writer(true);
    for part in &ours.parts {
        let r = push_part(root, store, part, &each)?;
        report.transferred = add(report.transferred, r.transferred);
        report.skipped = add(report.skipped, r.skipped);
    }
    if let Some(slot) = same {
        report.slot = slot;
        report.already_done = true;
        return Ok(report);
    }

    // 2. The manifest: the local list, exactly, as the store's next number. Another push of
    // the same collection may create it first: its result is this one's.
    loop {
        let theirs = manifests.latest()?;
        let number = match compare(ours, theirs.as_ref()) {
            Target::Same => {
                report.slot = theirs.map_or(0, |m| m.number);
                report.already_done = true;
                return Ok(report);
            }
            Target::Prefix(_) => theirs.as_ref().map_or(0, |m| m.number),
            Target::Diverged(why) => return Err(diverged(why)),
        };
        let next = number
            .checked_add(1)
            .ok_or(Error::TooManyCommits { generation: number })?;
        let manifest = Manifest {
            number: next,
            ..ours.clone()
        };
        if manifests.create_new(next, &manifest.encode(), &|_| {})? {
            report.slot = next;
            return Ok(report);
        }
    }
}

/// Pushes local part `part` of the collection at `root` to `<store>/parts/<id>`: done already
/// if the commit there is this part's (every object found, counted as skipped); refused if it
/// is another dataset's, which is never committed on top of.
fn push_part(
    root: &Path,
    store: &Arc<Store>,
    part: &PartMeta,
    options: &TransferOptions,
) -> Result<TransferReport> {
    let dir = root.join("parts").join(&part.id);
    let (_, meta) = read_meta(&dir)?;
    if meta.generation != part.generation {
        return Err(Error::PartChanged {
            part: part.id.clone(),
            path: dir,
            expected: part.generation,
            found: meta.generation,
        });
    }
    let url = store.object_url(&format!("parts/{}", part.id));
    match push_with(&dir, &url, options, Stack::Never) {
        Ok(r) if r.generation == part.generation => Ok(r),
        Ok(r) => Err(Error::PartChanged {
            part: part.id.clone(),
            path: dir,
            expected: part.generation,
            found: r.generation,
        }),
        // Another dataset's commit there (a push racing this one with the same commit is
        // found to be this one's: not a conflict).
        Err(Error::PublishConflict { reason, .. }) => Err(another_dataset(&url, &reason)),
        Err(e) => Err(e),
    }
}

/// The error for a part id under which the store holds another dataset.
fn another_dataset(url: &str, why: &str) -> Error {
    Error::PublishConflict {
        url: url.to_string(),
        reason: format!(
            "another dataset is pushed there ({why}); a manifest may list it under the same id, \
             generation and length (part ids are directory names): remove it (zrecord gc) if \
             no manifest names it, or push the collection to another URL"
        ),
    }
}

/// Two (objects, bytes) counts added.
pub(super) fn add(a: (u64, u64), b: (u64, u64)) -> (u64, u64) {
    (a.0.saturating_add(b.0), a.1.saturating_add(b.1))
}
