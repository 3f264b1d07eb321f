//! Reading a collection: the [`CollectionDir`] location, whose snapshot is the latest
//! manifest's parts, each opened as a dataset and checked against the manifest (its generation,
//! length and schema), put together as one snapshot with global indices.

use super::manifests::{LocalManifests, ManifestStore};
use super::schema_difference;
use crate::error::{Error, Result};
use crate::format::collection::{Manifest, PartMeta};
use crate::format::meta::{FieldMeta, Meta, TableMeta};
use crate::format::FORMAT_VERSION;
use crate::io::job::FileId;
use crate::store::location::Location;
use crate::store::schema::DEFAULT_CHUNK_SIZE_BYTES;
use crate::store::snapshot::{meta_id, read_meta, Snapshot};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A collection in a local directory: `<root>/_collection/<number>.json` manifests naming
/// parts under `<root>/parts/`. [`crate::Dataset::open`] opens a directory holding
/// `_collection/` through it; its snapshot is the latest manifest's.
#[derive(Debug, Clone)]
pub struct CollectionDir {
    root: PathBuf,
    manifests: LocalManifests,
}

impl CollectionDir {
    /// The collection at `root` (not opened until a snapshot is asked for).
    pub fn new(root: impl Into<PathBuf>) -> CollectionDir {
        let root = root.into();
        CollectionDir {
            manifests: LocalManifests::new(&root),
            root,
        }
    }
}

impl Location for CollectionDir {
    fn path(&self) -> &Path {
        &self.root
    }

    fn snapshot(&self) -> Result<Snapshot> {
        let manifest = self.manifests.latest()?.ok_or_else(|| Error::NotADataset {
            path: self.root.clone(),
            reason: "a collection with no manifest yet (commit parts to it first)".to_string(),
        })?;
        let id = FileId::at(&self.manifests.name_of(manifest.number)).ok();
        let root = &self.root;
        snapshot_of(
            root,
            &self.manifests.name_of(manifest.number),
            &manifest,
            id,
            &|p| {
                let dir = root.join(&p.path);
                let snap =
                    Snapshot::load(&dir).map_err(|e| part_error(&dir, &p.id, &manifest, e))?;
                Ok((dir, snap))
            },
        )
    }

    // Manifests are create-only and parts immutable, but a number alone does not name a
    // collection: one deleted and committed again starts again from manifest 1, possibly with
    // the same part ids, lengths and generations (and so the same manifest bytes). The same
    // latest number, manifest file and manifest, and each part's `meta.json` the same file
    // with the same meta (as `LocalDir::is_latest` checks a dataset), is the same collection.
    fn is_latest(&self, current: &Snapshot) -> Result<bool> {
        let Some(parts) = &current.parts else {
            return Ok(false);
        };
        let number = current.generation();
        if self.manifests.list()?.into_iter().max() != Some(number) {
            return Ok(false);
        }
        let file = self.manifests.name_of(number);
        if current.meta_id.is_none() || FileId::at(&file).ok() != current.meta_id {
            return Ok(false);
        }
        let Some(manifest) = self.manifests.latest()? else {
            return Ok(false);
        };
        let listed = manifest.number == number
            && manifest.parts.len() == parts.ids.len()
            && manifest
                .parts
                .iter()
                .zip(&parts.ids)
                .zip(&parts.snaps)
                .all(|((p, id), s)| {
                    p.id == *id
                        && s.dir == self.root.join(&p.path)
                        && s.generation() == p.generation
                        && s.len() == p.len
                });
        if !listed {
            return Ok(false);
        }
        for s in &parts.snaps {
            if s.meta_id.is_none() || meta_id(&s.dir) != s.meta_id || read_meta(&s.dir)?.1 != s.meta
            {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// The snapshot of `manifest` (read from `file`) of the collection at `root`: each part opened
/// by `open_part` (which returns what names it, and its snapshot) and checked to be the dataset
/// the manifest pinned.
pub(crate) fn snapshot_of(
    root: &Path,
    file: &Path,
    manifest: &Manifest,
    meta_id: Option<FileId>,
    open_part: &dyn Fn(&PartMeta) -> Result<(PathBuf, Snapshot)>,
) -> Result<Snapshot> {
    let mut parts = Vec::with_capacity(manifest.parts.len());
    let mut version = 1;
    let mut chunk_size_bytes = None;
    let mut attributes = None;
    for p in &manifest.parts {
        let (dir, snap) = open_part(p)?;
        if snap.generation() != p.generation {
            return Err(Error::PartChanged {
                part: p.id.clone(),
                path: dir,
                expected: p.generation,
                found: snap.generation(),
            });
        }
        if snap.len() != p.len {
            return Err(Error::MetaCorrupt {
                path: file.to_path_buf(),
                reason: format!(
                    "part {:?} has {} records at generation {}, the manifest says {}",
                    p.id,
                    snap.len(),
                    p.generation,
                    p.len
                ),
            });
        }
        if let Some((field, reason)) = schema_difference(&manifest.fields, &snap.meta().fields) {
            return Err(Error::PartMismatch {
                part: p.id.clone(),
                path: dir,
                field,
                reason,
            });
        }
        version = version.max(snap.meta().version);
        chunk_size_bytes.get_or_insert(snap.meta().chunk_size_bytes);
        // A collection shows its first part's attributes.
        attributes.get_or_insert_with(|| snap.meta().attributes.clone());
        parts.push((p.id.clone(), Arc::new(snap)));
    }
    let len = manifest.total_len();
    let meta = Meta {
        format: "zrecord".to_string(),
        version: version.min(FORMAT_VERSION),
        generation: manifest.number,
        len,
        chunk_size_bytes: chunk_size_bytes.unwrap_or(DEFAULT_CHUNK_SIZE_BYTES),
        fields: manifest
            .fields
            .iter()
            .map(|f| FieldMeta {
                name: f.name.clone(),
                dtype: f.dtype,
                shape: f.shape.clone(),
                codec: f.codec,
                table: TableMeta {
                    generation: 0,
                    table_len: len,
                    patch_len: 0,
                },
                dictionaries: Vec::new(),
            })
            .collect(),
        chunks: Vec::new(),
        attributes: attributes.unwrap_or_default(),
    };
    Snapshot::collection(root.to_path_buf(), meta, meta_id, parts)
}

/// The error of opening part `id` at `dir`: a missing or non-dataset part is
/// [`Error::NotADataset`] naming the part and the manifest; others pass unchanged.
pub(crate) fn part_error(dir: &Path, id: &str, manifest: &Manifest, e: Error) -> Error {
    match e {
        Error::Io {
            ref path,
            ref source,
            ..
        } if path == &crate::format::layout::meta(dir)
            && source.kind() == std::io::ErrorKind::NotFound =>
        {
            Error::NotADataset {
                path: dir.to_path_buf(),
                reason: format!(
                    "part {id:?} of collection manifest {} is missing (no meta.json)",
                    manifest.number
                ),
            }
        }
        e => e,
    }
}
