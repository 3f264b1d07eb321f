//! Collections on an object store: the layout of a local collection under a prefix.
//!
//! ```text
//! <url>/_collection/00000000000000000001.json   manifest 1 (a conditional create; the highest wins)
//! <url>/parts/<id>/                              each an ordinary pushed dataset
//! ```
//!
//! ```text
//! mod.rs     RemoteManifests (the ManifestStore of a prefix: LIST, GET, conditional PUT) and
//!            RemoteCollection, the Location whose snapshot is the latest manifest's parts
//! commit.rs  commit_url(): reference parts pushed under parts/, push local ones there, append
//! gc.rs      gc of a prefix: remove parts no manifest names and no live commit holds once
//!            older than a limit
//! lease.rs   leases under _collection/leases/: what a live commit holds, what a gc removes
//! push.rs    push of a whole local collection: its parts, then a manifest listing them
//! pull.rs    pull of a whole collection into a local one, through the local committer
//! mirror.rs  what push and pull compare: does the target list a prefix of the source's parts
//! ```
//!
//! Each part is opened as the remote dataset it is, on a store sharing the collection's client;
//! its chunks are read through the collection's store (keys `parts/<id>/data/…`), so a batch
//! over many parts is one read plan through one backend, as locally.

mod commit;
mod gc;
mod lease;
mod mirror;
pub(crate) mod probe;
mod pull;
mod push;

pub use commit::commit_url;
pub(crate) use gc::gc_url;
pub use lease::LEASE_TTL;
pub(crate) use pull::pull_collection;
pub(crate) use push::push_collection;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use super::backend::RemoteBackend;
use super::open::Remote;
use super::store::{block_on, Create, Store};
use super::RemoteConfig;
use crate::error::{Error, Result};
use crate::format::collection::{Manifest, PartMeta};
use crate::store::collection::manifests::{
    manifest_name, parse_manifest_name, ManifestStore, Step, MANIFEST_DIR,
};
use crate::store::collection::open::snapshot_of;
use crate::store::collection::CommitStep;
use crate::store::snapshot::Origin;
use crate::{Dataset, Location, ReadBackend, ReadConfig, Snapshot};

/// The key of manifest `number`, relative to the collection's prefix.
fn manifest_key(number: u64) -> String {
    format!("{MANIFEST_DIR}/{}", manifest_name(number))
}

/// The numbered manifests of a collection on an object store: `<url>/_collection/<N>.json`,
/// each created with a conditional `PUT` (`If-None-Match: *`; 412 and 409 both mean taken).
#[derive(Debug, Clone)]
pub(crate) struct RemoteManifests {
    store: Arc<Store>,
}

impl RemoteManifests {
    pub(crate) fn new(store: Arc<Store>) -> RemoteManifests {
        RemoteManifests { store }
    }
}

impl ManifestStore for RemoteManifests {
    fn name_of(&self, number: u64) -> PathBuf {
        PathBuf::from(self.store.object_url(&manifest_key(number)))
    }

    /// One listing, then a `HEAD` past the highest listed number (a listing may lag behind
    /// creates on some stores).
    fn list(&self) -> Result<Vec<u64>> {
        let store = Arc::clone(&self.store);
        block_on(async move {
            let keys = store.list(MANIFEST_DIR).await?;
            let mut out: Vec<u64> = keys
                .iter()
                .filter_map(|k| k.rsplit('/').next().and_then(parse_manifest_name))
                .collect();
            let mut next = out.iter().max().map_or(1, |n| n.saturating_add(1));
            while !out.contains(&next) && store.head(&manifest_key(next)).await?.is_some() {
                out.push(next);
                next = next.saturating_add(1);
            }
            Ok(out)
        })?
    }

    fn read(&self, number: u64) -> Result<Vec<u8>> {
        let store = Arc::clone(&self.store);
        let key = manifest_key(number);
        Ok(block_on(async move { store.get(&key).await })??.to_vec())
    }

    /// One conditional `PUT`: the manifest is visible whole or not at all, so only
    /// [`CommitStep::ManifestLinked`] is told. A create whose answer was lost and that then
    /// found an object reads it back: it is this create's if it holds these bytes.
    fn create_new(&self, number: u64, bytes: &[u8], step: Step<'_>) -> Result<bool> {
        let store = Arc::clone(&self.store);
        let key = manifest_key(number);
        let body = Bytes::copy_from_slice(bytes);
        let created = block_on(async move {
            match store.create(&key, body.clone()).await? {
                Create::Created => Ok::<bool, Error>(true),
                Create::Exists => Ok(false),
                Create::Maybe => Ok(store.get(&key).await? == body),
            }
        })??;
        if created {
            step(CommitStep::ManifestLinked);
        }
        Ok(created)
    }
}

/// A collection on an object store: [`crate::Dataset::open`] of a URL whose prefix holds
/// `_collection/` opens it through this location.
#[derive(Debug)]
pub(crate) struct RemoteCollection {
    path: PathBuf,
    store: Arc<Store>,
    manifests: RemoteManifests,
    config: RemoteConfig,
}

impl RemoteCollection {
    pub(crate) fn new(store: Arc<Store>, config: &RemoteConfig) -> RemoteCollection {
        RemoteCollection {
            path: PathBuf::from(store.url()),
            manifests: RemoteManifests::new(Arc::clone(&store)),
            store,
            config: config.clone(),
        }
    }
}

impl RemoteCollection {
    /// The latest manifest's number and the version of its object, `None` if there is none.
    fn newest(&self) -> Result<Option<(u64, String)>> {
        let Some(number) = self.manifests.list()?.into_iter().max() else {
            return Ok(None);
        };
        let store = Arc::clone(&self.store);
        let key = manifest_key(number);
        let found = block_on(async move { store.head_version(&key).await })??;
        Ok(found.map(|(_, version)| (number, version)))
    }
}

/// Parts opened at once, at most.
const OPENING: usize = 8;

/// What opening each part gave, by id.
type Opened = std::collections::HashMap<String, Result<(PathBuf, Snapshot)>>;

impl RemoteCollection {
    /// Opens part `p` of `manifest` (read from `file`) as the remote dataset it is: what names
    /// it (its URL) and its snapshot.
    fn open_part(
        &self,
        p: &PartMeta,
        manifest: &Manifest,
        file: &Path,
    ) -> Result<(PathBuf, Snapshot)> {
        let part = Remote::part(&self.store, &p.id, &self.config)?;
        let url = PathBuf::from(part.store.url());
        let snap = part.snapshot().map_err(|e| match e {
            Error::NotADataset { reason, .. } => Error::NotADataset {
                path: url.clone(),
                reason: format!(
                    "part {:?} of collection manifest {} ({}): {reason}",
                    p.id,
                    manifest.number,
                    file.display()
                ),
            },
            e => e,
        })?;
        Ok((url, snap))
    }

    /// Every part of `manifest`, opened by up to [`OPENING`] threads at once (on this thread
    /// alone if none can be started).
    fn open_parts(&self, manifest: &Manifest, file: &Path) -> Opened {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let parts = &manifest.parts;
        let next = AtomicUsize::new(0);
        let out = std::sync::Mutex::new(Opened::with_capacity(parts.len()));
        let work = || {
            while let Some(p) = parts.get(next.fetch_add(1, Ordering::Relaxed)) {
                let r = self.open_part(p, manifest, file);
                if let Ok(mut out) = out.lock() {
                    out.insert(p.id.clone(), r);
                }
            }
        };
        std::thread::scope(|s| {
            for _ in 1..parts.len().min(OPENING) {
                let spawned = std::thread::Builder::new()
                    .name("zrecord-open-part".into())
                    .spawn_scoped(s, work);
                if spawned.is_err() {
                    break;
                }
            }
            work();
        });
        out.into_inner().unwrap_or_default()
    }
}

impl Location for RemoteCollection {
    fn path(&self) -> &Path {
        &self.path
    }

    fn snapshot(&self) -> Result<Snapshot> {
        // The manifest object's version first: one replaced after this is seen as new.
        let before = self.newest()?;
        let manifest = self.manifests.latest()?.ok_or_else(|| Error::NotADataset {
            path: self.path.clone(),
            reason: "a collection with no manifest yet (commit parts to it first)".to_string(),
        })?;
        let origin = Origin {
            number: manifest.number,
            digest: *blake3::hash(&manifest.encode()).as_bytes(),
            version: before
                .filter(|(n, _)| *n == manifest.number)
                .map(|(_, v)| v),
        };
        let file = self.manifests.name_of(manifest.number);
        // Every part opened first, several at once (each open is a few round trips).
        let opened = std::sync::Mutex::new(self.open_parts(&manifest, &file));
        let mut snap = snapshot_of(&self.path, &file, &manifest, None, &|p| {
            let mut opened = opened
                .lock()
                .map_err(|_| Error::internal("a part opener panicked".into()))?;
            opened
                .remove(&p.id)
                .unwrap_or_else(|| Err(Error::internal(format!("part {:?} not opened", p.id))))
        })?;
        // A snapshot read on its own (`Snapshot::gather_with`) reads its parts' objects too.
        snap.native = self.read_backend();
        snap.origin = Some(origin);
        Ok(snap)
    }

    /// One listing (and a `HEAD` past the highest listed number), then a `HEAD` of the latest
    /// manifest: the same number and the same version of its object (ETag, version id,
    /// modification time). Manifests are create-only and parts immutable, but a collection
    /// deleted and published again starts again from manifest 1, possibly with the same part
    /// ids and lengths and so the same manifest bytes: its manifest object is another write,
    /// with another version (where the store's versions do not tell, S3's ETag being the
    /// bytes' MD5 and its modification time in seconds, one re-created within the same second
    /// is not told apart). Where the version was not read, the manifest's bytes are compared.
    fn is_latest(&self, current: &Snapshot) -> Result<bool> {
        let Some(was) = current.origin.as_ref().filter(|_| current.is_collection()) else {
            return Ok(false);
        };
        let Some((number, version)) = self.newest()? else {
            return Ok(false);
        };
        if number != was.number {
            return Ok(false);
        }
        if let Some(v) = &was.version {
            return Ok(*v == version);
        }
        let bytes = self.manifests.read(number)?;
        let digest = match Manifest::decode(&bytes) {
            Ok(m) => *blake3::hash(&m.encode()).as_bytes(),
            Err(_) => return Ok(false),
        };
        Ok(digest == was.digest)
    }

    /// One backend over the collection's store reads every part's chunks (`parts/<id>/…`).
    fn read_backend(&self) -> Option<Arc<dyn ReadBackend>> {
        Some(Arc::new(RemoteBackend::new(
            Arc::clone(&self.store),
            self.config.clone(),
            None,
            crate::read_backend(&ReadConfig::default()).ok(),
        )))
    }

    fn writer(&self) -> Result<crate::Writer> {
        Err(Error::InvalidConfig {
            reason: format!(
                "{} is a collection on an object store: add parts with \
                 zrecord::collection::commit_url",
                self.path.display()
            ),
        })
    }
}

/// Opens the collection at `url` read-only at its latest manifest, as one dataset with global
/// indices (each part read as the remote dataset it is), with `config` and `remote`.
/// [`crate::remote::open`] and [`Dataset::open`] of a collection's URL come here too.
///
/// # Errors
/// [`Error::NotADataset`] if the prefix holds no manifest, or a part is missing;
/// [`Error::MetaCorrupt`] naming the manifest's URL for a damaged manifest; a part's errors
/// ([`Error::PartChanged`], [`Error::PartMismatch`], the remote errors of opening it).
pub fn open_collection(url: &str, config: ReadConfig, remote: RemoteConfig) -> Result<Dataset> {
    let store = Store::open(url, &remote.store)?;
    Dataset::from_location(Arc::new(RemoteCollection::new(store, &remote)), config)
}
