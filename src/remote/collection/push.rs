//! Pushing a local collection to an object store: each part of its latest manifest goes to
//! `<url>/parts/<id>` (the dataset push: content-addressed data objects, the part's commit
//! last), then a manifest listing exactly those parts, in the same order, is created with a
//! conditional `PUT`. Parts the store's latest manifest lists already are not pushed again.

use std::path::Path;
use std::sync::Arc;

use super::mirror::{compare, Target};
use super::RemoteManifests;
use crate::error::{Error, Result};
use crate::format::collection::{Manifest, PartMeta};
use crate::remote::manifest::{latest, slot_key, Manifest as Commit};
use crate::remote::push::{push, require_conditional_create, TransferOptions, TransferReport};
use crate::remote::store::{block_on, Store};
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
    let mut report = TransferReport {
        url: store.url().to_string(),
        generation: ours.number,
        slot: 0,
        transferred: (0, 0),
        skipped: (0, 0),
        already_done: false,
        parts: Some(ours.parts.len() as u64),
    };
    let theirs = manifests.latest()?;
    let listed = match compare(&ours, theirs.as_ref()) {
        Target::Same => {
            report.slot = theirs.map_or(0, |m| m.number);
            report.already_done = true;
            return Ok(report);
        }
        Target::Prefix(n) => n,
        Target::Diverged(why) => return Err(diverged(why)),
    };

    // 1. The parts the store's manifest does not list yet (one pushed by an earlier attempt
    // of this push is found committed and skipped; one cut short uploads what is missing).
    // The store was probed (or declared single-writer) once for the whole push.
    let each = options.clone().single_writer(true);
    for part in ours.parts.get(listed..).unwrap_or_default() {
        let r = push_part(root, &store, part, &each)?;
        report.transferred = add(report.transferred, r.transferred);
        report.skipped = add(report.skipped, r.skipped);
    }

    // 2. The manifest: the local list, exactly, as the store's next number. Another push of
    // the same collection may create it first: its result is this one's.
    loop {
        let theirs = manifests.latest()?;
        let number = match compare(&ours, theirs.as_ref()) {
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

/// Pushes local part `part` of the collection at `root` to `<store>/parts/<id>`, unless that
/// commit is there already; refuses another dataset there.
fn push_part(
    root: &Path,
    store: &Arc<Store>,
    part: &PartMeta,
    options: &TransferOptions,
) -> Result<TransferReport> {
    let dir = root.join("parts").join(&part.id);
    let (text, meta) = read_meta(&dir)?;
    if meta.generation != part.generation {
        return Err(Error::PartChanged {
            part: part.id.clone(),
            path: dir,
            expected: part.generation,
            found: meta.generation,
        });
    }
    let url = store.object_url(&format!("parts/{}", part.id));
    // The part committed there already (by an earlier attempt, or a push racing this one):
    // every object of it counts as skipped.
    let there = |objects: (u64, u64)| TransferReport {
        url: url.clone(),
        generation: part.generation,
        slot: 0,
        transferred: (0, 0),
        skipped: objects,
        already_done: true,
        parts: None,
    };
    match pushed_meta(store, &part.id)? {
        Some((theirs, objects)) if theirs.as_bytes() == text => return Ok(there(objects)),
        Some(_) => return Err(another_dataset(&url)),
        None => {}
    }
    match push(&dir, &url, options) {
        Ok(r) if r.generation == part.generation => Ok(r),
        Ok(r) => Err(Error::PartChanged {
            part: part.id.clone(),
            path: dir,
            expected: part.generation,
            found: r.generation,
        }),
        // Another push of this part committed first: the same commit is this one's.
        Err(Error::PublishConflict { .. }) => match pushed_meta(store, &part.id)? {
            Some((theirs, objects)) if theirs.as_bytes() == text => Ok(there(objects)),
            _ => Err(another_dataset(&url)),
        },
        Err(e) => Err(e),
    }
}

/// The error for a part id under which the store holds another dataset.
fn another_dataset(url: &str) -> Error {
    Error::PublishConflict {
        url: url.to_string(),
        reason: "another dataset is pushed there (no manifest of the collection lists it yet): \
                 remove it (zrecord gc) or push the collection to another URL"
            .into(),
    }
}

/// The exact `meta.json` text of the latest commit pushed under `parts/<id>`, and the objects
/// (files, bytes) it names; `None` if there is none.
fn pushed_meta(store: &Arc<Store>, id: &str) -> Result<Option<(String, (u64, u64))>> {
    let child = store.child(&format!("parts/{id}"))?;
    let c = Arc::clone(&child);
    let Some((slot, bytes)) = block_on(async move { latest(&c).await })?? else {
        return Ok(None);
    };
    let (commit, _) = Commit::decode(&child.object_url(&slot_key(slot)), &bytes)?;
    let objects = commit.objects.iter().fold((0u64, 0u64), |(n, b), o| {
        (n.saturating_add(1), b.saturating_add(o.size))
    });
    Ok(Some((commit.meta, objects)))
}

/// Two (objects, bytes) counts added.
pub(super) fn add(a: (u64, u64), b: (u64, u64)) -> (u64, u64) {
    (a.0.saturating_add(b.0), a.1.saturating_add(b.1))
}
