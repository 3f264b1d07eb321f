//! Creating the next manifest of a collection, wherever its manifests are kept: manifest N+1 =
//! manifest N's parts followed by the given parts it does not list yet, written with a
//! create-only write; a committer that finds N+1 taken re-reads the latest manifest and rebases
//! (appending parts commutes), so racing committers all land, each part once.

use super::manifests::{ManifestStore, Step};
use super::options::CommitReport;
use crate::error::{Error, Result};
use crate::format::collection::{
    Manifest, ManifestField, PartMeta, COLLECTION_FORMAT, COLLECTION_VERSION,
};
use std::path::{Path, PathBuf};

/// The collection a commit appends to: where its manifests are, what names it and a part of it
/// in errors.
#[derive(Clone, Copy)]
pub(crate) struct Collection<'a> {
    /// Its manifests.
    pub(crate) store: &'a dyn ManifestStore,
    /// What names the collection (its root, or URL).
    pub(crate) root: &'a Path,
    /// What names part `id` (its directory, or URL).
    pub(crate) part_path: &'a dyn Fn(&str) -> PathBuf,
}

/// Appends `placed` (parts already in place, in this order) to the collection whose manifests
/// `store` keeps, on top of `latest` (what the committer read before placing them; `None`: no
/// manifest yet, and then `fields` is the schema the first manifest gets). A part already
/// listed at the same generation is not added again (a retried commit adds nothing and creates
/// no manifest); one listed at another generation is [`Error::PartChanged`]. After a rebase onto
/// a manifest another committer created, `check_schema` checks the parts against its schema.
/// `to.root` names the collection and `to.part_path(id)` a part in errors.
///
/// # Errors
/// As above; [`Error::TooManyCommits`]; [`Error::InvalidConfig`] for a manifest that would not
/// be valid; the store's.
pub(crate) fn append_parts(
    to: Collection<'_>,
    mut latest: Option<Manifest>,
    mut fields: Vec<ManifestField>,
    placed: &[PartMeta],
    check_schema: &dyn Fn(&[ManifestField]) -> Result<()>,
    step: Step<'_>,
) -> Result<CommitReport> {
    let Collection {
        store,
        root,
        part_path,
    } = to;
    let ids: Vec<String> = placed.iter().map(|p| p.id.clone()).collect();
    let mut attempts = 0u32;
    loop {
        let (number, mut list) = match &latest {
            Some(m) => {
                fields.clone_from(&m.fields);
                (m.number, m.parts.clone())
            }
            None => (0, Vec::new()),
        };
        let mut added = Vec::new();
        for p in placed {
            match list.iter().find(|q| q.id == p.id) {
                Some(q) if q.generation == p.generation => {}
                Some(q) => {
                    return Err(Error::PartChanged {
                        part: p.id.clone(),
                        path: part_path(&p.id),
                        expected: q.generation,
                        found: p.generation,
                    })
                }
                None => {
                    list.push(p.clone());
                    added.push(p.id.clone());
                }
            }
        }
        if added.is_empty() && latest.is_some() {
            let len = list.iter().map(|p| p.len).sum();
            return Ok(CommitReport {
                number,
                ids,
                added,
                parts: list.len(),
                len,
                attempts,
            });
        }
        // A rebase onto a collection created by another committer: its schema rules.
        check_schema(&fields)?;
        let next = number
            .checked_add(1)
            .ok_or(Error::TooManyCommits { generation: number })?;
        let manifest = Manifest {
            format: COLLECTION_FORMAT.to_string(),
            version: COLLECTION_VERSION,
            number: next,
            fields: fields.clone(),
            parts: list,
        };
        manifest.validate().map_err(|reason| Error::InvalidConfig {
            reason: format!("{}: {reason}", root.display()),
        })?;
        attempts = attempts.saturating_add(1);
        if store.create_new(next, &manifest.encode(), step)? {
            return Ok(CommitReport {
                number: next,
                ids,
                added,
                parts: manifest.parts.len(),
                len: manifest.total_len(),
                attempts,
            });
        }
        latest = store.latest()?;
    }
}
