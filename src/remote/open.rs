//! Opening a dataset on an object store: its latest commit's manifest, its offset tables read
//! on demand in pages (or mirrored whole into the local cache directory, with
//! [`RemoteConfig::mirror_tables`]), its patch logs and dictionaries mirrored, and its chunks
//! read through the remote backend.
//!
//! A table read on demand keeps its pages in `<object name>.pages` beside the mirrors, a sparse
//! file the size of the table (`store/paged.rs`); no byte of it is read at open.
//!
//! Mirrored files live in `<cache root>/mirrors/<url hash>/objects/`, one file per object key
//! (a key names its content), so a table that several commits share is fetched and stored once.
//! A snapshot opens them through a directory of hard links made for that open only and removed
//! right after (the snapshot maps its tables and reads its patch logs at open). After a
//! successful open, objects the latest commit does not name are removed: a snapshot that still
//! uses one holds it open, and an open racing with the removal copies the object privately.
//! The mirrors count against [`RemoteConfig::cache_bytes`] when the chunk cache is on.

use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::backend::RemoteBackend;
use super::cache::Cache;
use super::manifest::{latest, slot_key, Manifest, ObjectEntry};
use super::pages::StorePages;
use super::store::{block_on, Store};
use super::RemoteConfig;
use crate::checksum::crc32c_append;
use crate::error::{Error, Result};
use crate::format::entry::ENTRY_BYTES;
use crate::store::paged::{PageSource, PagedTable};
use crate::store::snapshot::Origin;
use crate::{ChunkAt, Location, ReadBackend, ReadConfig, Snapshot, TableAt, Writer};

/// A dataset URL's store, and what opening it needs again on refresh: the [`Location`] of a
/// dataset on an object store.
#[derive(Debug)]
pub(crate) struct Remote {
    /// The dataset's URL, as [`Location::path`] reports it.
    path: PathBuf,
    pub(crate) store: Arc<Store>,
    pub(crate) config: RemoteConfig,
    /// The chunk cache, if the configuration gives it room.
    pub(crate) cache: Option<Arc<Cache>>,
    /// For a part of a collection on an object store: the collection's store and the part's
    /// key prefix there (`parts/<id>/`). Its chunks are read through the collection's store
    /// under that prefix, so one backend reads every part's chunks in one plan. `None` for a
    /// dataset.
    pub(crate) reads: Option<(Arc<Store>, String)>,
}

impl Remote {
    /// Connects to the dataset at `url`.
    pub(crate) fn connect(url: &str, config: &RemoteConfig) -> Result<Remote> {
        let store = Store::open(url, &config.store)?;
        let cache = match config.cache_bytes {
            0 => None,
            limit => Some(Arc::new(Cache::new(
                &config.cache_root(),
                store.url(),
                limit,
                Some(mirror_root(config, store.url()).join("objects")),
            )?)),
        };
        Ok(Remote {
            path: PathBuf::from(store.url()),
            store,
            cache,
            config: config.clone(),
            reads: None,
        })
    }

    /// Part `id` of the collection on `root` (its store: `parts/<id>` under it, sharing its
    /// client), its chunks read through `root` (see [`Remote::reads`]). No chunk cache.
    pub(crate) fn part(root: &Arc<Store>, id: &str, config: &RemoteConfig) -> Result<Remote> {
        let base = format!("parts/{id}");
        let store = root.child(&base)?;
        Ok(Remote {
            path: PathBuf::from(store.url()),
            store,
            cache: None,
            config: config.clone(),
            reads: Some((Arc::clone(root), format!("{base}/"))),
        })
    }

    /// The backend that reads this dataset's chunks.
    pub(crate) fn backend(&self) -> Arc<RemoteBackend> {
        let store = self.reads.as_ref().map_or(&self.store, |(s, _)| s);
        Arc::new(RemoteBackend::new(
            Arc::clone(store),
            self.config.clone(),
            self.cache.clone(),
            crate::read_backend(&ReadConfig::default()).ok(),
        ))
    }

    /// The latest commit: its slot and manifest bytes.
    fn latest_bytes(&self) -> Result<(u64, bytes::Bytes)> {
        let store = Arc::clone(&self.store);
        let found = block_on(async move { latest(&store).await })??;
        found.ok_or_else(|| super::collection::probe::no_commit(&self.store))
    }

    /// The latest commit's origin (its slot and a hash of its manifest) and manifest.
    fn latest(&self) -> Result<(Origin, Manifest)> {
        let (slot, bytes) = self.latest_bytes()?;
        let (m, _) = Manifest::decode(&self.store.object_url(&slot_key(slot)), &bytes)?;
        Ok((origin(slot, &bytes), m))
    }

    /// A snapshot of the latest commit: the offset tables and patch logs fetched (once per
    /// object key) into the mirror directory, checked against their manifest's sizes and
    /// checksums; chunks as objects, or as local chunks where the chunk cache has them.
    fn open_latest(&self) -> Result<Snapshot> {
        let (origin, manifest) = self.latest()?;
        let root = mirror_root(&self.config, self.store.url());
        let objects = root.join("objects");
        std::fs::create_dir_all(&objects).map_err(|e| Error::io(&objects, "mkdir", e))?;
        let (chunks, files): (Vec<&ObjectEntry>, Vec<&ObjectEntry>) = manifest
            .objects
            .iter()
            .partition(|o| o.file.starts_with("chunk/"));
        // Offset tables read on demand are not mirrored: their pages go to page files.
        let (paged, tables): (Vec<&ObjectEntry>, Vec<&ObjectEntry>) = files
            .into_iter()
            .partition(|o| !self.config.mirror_tables && o.file.ends_with(".offsets"));
        for o in &tables {
            self.fetch(&objects.join(object_name(&o.object)), o)?;
        }
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let links = root.join(format!(
            "{OPEN_MARK}{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&links).map_err(|e| Error::io(&links, "mkdir", e))?;
        let opened = self.open_linked(&links, &objects, &tables, &paged, &chunks, &manifest);
        let _ = std::fs::remove_dir_all(&links);
        let mut snap = opened?;
        snap.origin = Some(origin);
        prune(&root, &objects, &tables, &paged);
        Ok(snap)
    }

    /// The snapshot of `manifest`'s commit, its tables linked into `links` by file name.
    fn open_linked(
        &self,
        links: &Path,
        objects: &Path,
        tables: &[&ObjectEntry],
        paged: &[&ObjectEntry],
        chunks: &[&ObjectEntry],
        manifest: &Manifest,
    ) -> Result<Snapshot> {
        for o in tables {
            let rel = Path::new(&o.file);
            if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
                return Err(Error::RemoteCorrupt {
                    object: self.store.object_url(&o.object),
                    reason: format!(
                        "its manifest names the file {:?}, not a path in a dataset",
                        o.file
                    ),
                });
            }
            let dst = links.join(rel);
            if let Some(parent) = dst.parent() {
                std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, "mkdir", e))?;
            }
            // Another process may have pruned the mirror since it was fetched: a private copy.
            if std::fs::hard_link(objects.join(object_name(&o.object)), &dst).is_err() {
                self.fetch(&dst, o)?;
            }
        }
        let store = &self.store;
        let cache = self.cache.as_deref();
        // Chunks already cached are local chunks: the local engine's whole path (zero-copy
        // included) reads them.
        let chunk = |file: &str| -> Result<ChunkAt> {
            let o = chunks
                .iter()
                .find(|o| o.file == file)
                .ok_or_else(|| Error::Internal {
                    reason: format!("no object for {file}"),
                })?;
            let path = PathBuf::from(store.object_url(&o.object));
            // A collection's part: the key under the collection's store.
            let key = match &self.reads {
                Some((_, base)) => format!("{base}{}", o.object),
                None => o.object.clone(),
            };
            Ok(match cache.and_then(|c| c.lookup(&o.object)) {
                Some(copy) => ChunkAt::Cached { copy, path, key },
                None => ChunkAt::Object { path, key },
            })
        };
        let table = |file: &str| -> Result<TableAt> { Ok(TableAt::File(links.join(file))) };
        let source: Arc<dyn PageSource> = Arc::new(StorePages::new(
            Arc::clone(store),
            self.config.requests_in_flight,
            self.config.max_request,
        ));
        // A table read on demand: its object, checked to hold the committed entries.
        let pages =
            |f: &crate::format::meta::FieldMeta, file: &str| -> Result<Option<PagedTable>> {
                let Some(o) = paged.iter().find(|o| o.file == file) else {
                    return Ok(None);
                };
                let want = f.table.table_len.saturating_mul(ENTRY_BYTES as u64);
                let path = PathBuf::from(store.object_url(&o.object));
                if o.size < want {
                    return Err(Error::Truncated {
                        path,
                        expected: want,
                        actual: o.size,
                    });
                }
                let file = objects.join(page_file_name(&o.object));
                Ok(Some(PagedTable::new(
                    path,
                    o.object.clone(),
                    f.table.table_len,
                    self.config.table_page_bytes,
                    Arc::clone(&source),
                    Some(&file),
                )))
            };
        let native: Arc<dyn ReadBackend> = self.backend();
        let mut snap = Snapshot::assemble_paged(
            store.url(),
            manifest.meta.as_bytes(),
            table,
            pages,
            chunk,
            Some(native),
        )?;
        snap.chunks.object_reads = self.config.object_reads();
        Ok(snap)
    }

    /// Puts object `o` at `path`, unless it is there with its size and checksum.
    fn fetch(&self, path: &Path, o: &ObjectEntry) -> Result<()> {
        if let Ok(bytes) = std::fs::read(path) {
            if bytes.len() as u64 == o.size && crc32c_append(0, &bytes) == o.crc32c {
                return Ok(());
            }
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        let store = Arc::clone(&self.store);
        let key = o.object.clone();
        let size = o.size;
        let bytes = if size == 0 {
            bytes::Bytes::new()
        } else {
            block_on(async move { store.get_range(&key, 0..size).await })??
        };
        let crc = crc32c_append(0, &bytes);
        if crc != o.crc32c {
            return Err(Error::RemoteCorrupt {
                object: self.store.object_url(&o.object),
                reason: format!(
                    "its bytes have checksum {crc:#010x}, the manifest records {:#010x}",
                    o.crc32c
                ),
            });
        }
        static TMP: AtomicU64 = AtomicU64::new(0);
        let n = TMP.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!("{TMP_MARK}{}-{n}", std::process::id()));
        std::fs::write(&tmp, &bytes).map_err(|e| Error::io(&tmp, "write", e))?;
        std::fs::rename(&tmp, path).map_err(|e| Error::io(path, "rename", e))
    }
}

impl Location for Remote {
    fn path(&self) -> &Path {
        &self.path
    }

    fn snapshot(&self) -> Result<Snapshot> {
        self.open_latest()
    }

    /// One listing (and a `HEAD` past the highest listed slot) and a `GET` of the latest
    /// manifest: the latest commit is the one `current` was opened from, by slot and by the
    /// manifest's bytes (a dataset deleted and published again starts again at slot 1; its
    /// manifest names its objects by their content, so the same bytes are the same dataset).
    /// A snapshot is compared by the origin it records, not by what this location opened
    /// last: two datasets may share the location, and two refreshes of one dataset may race.
    fn is_latest(&self, current: &Snapshot) -> Result<bool> {
        let (slot, bytes) = self.latest_bytes()?;
        Ok(current.origin == Some(origin(slot, &bytes)))
    }

    fn read_backend(&self) -> Option<Arc<dyn ReadBackend>> {
        Some(self.backend())
    }

    fn writer(&self) -> Result<Writer> {
        Err(Error::InvalidConfig {
            reason: format!(
                "{} is on an object store: datasets there are read-only (write locally, then \
                 push)",
                self.path.display()
            ),
        })
    }
}

/// The origin of the commit in `slot` whose manifest is `bytes`.
fn origin(slot: u64, bytes: &[u8]) -> Origin {
    Origin {
        number: slot,
        digest: *blake3::hash(bytes).as_bytes(),
        version: None,
    }
}

/// What names a directory of links made for one open.
const OPEN_MARK: &str = "open-";

/// What names a mirror being written.
const TMP_MARK: &str = ".tmp-";

/// Age past which a link directory or temporary file is a killed process's leftover.
const STALE: Duration = Duration::from_secs(3600);

/// The mirror directory of the dataset at `url`.
pub(crate) fn mirror_root(config: &RemoteConfig, url: &str) -> PathBuf {
    config
        .cache_root()
        .join("mirrors")
        .join(format!("{:016x}", crate::hash::fnv(url)))
}

/// The mirror file name of object `key`.
fn object_name(key: &str) -> String {
    key.replace('/', "__")
}

/// The page file name of table object `key` (read on demand).
fn page_file_name(key: &str) -> String {
    format!("{}.pages", object_name(key))
}

/// Removes from the mirror of a dataset what its latest commit (`tables` mirrored, `paged` read
/// on demand) does not use:
/// objects of earlier commits, the per-commit directories of earlier versions, and leftovers
/// of killed processes an hour old.
fn prune(root: &Path, objects: &Path, tables: &[&ObjectEntry], paged: &[&ObjectEntry]) {
    // An offset table keeps both its mirror and its page file, whichever this open used:
    // readers of one cache directory may differ in `mirror_tables`, and neither should wipe
    // the other's copy.
    let live: std::collections::HashSet<String> = tables
        .iter()
        .chain(paged)
        .flat_map(|o| [object_name(&o.object), page_file_name(&o.object)])
        .collect();
    let old = |p: &Path| {
        std::fs::symlink_metadata(p)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .is_some_and(|age| age > STALE)
    };
    if let Ok(entries) = std::fs::read_dir(objects) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let keep = live.contains(&name) || (name.starts_with(TMP_MARK) && !old(&e.path()));
            if !keep {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    if let Ok(entries) = std::fs::read_dir(root) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            // Earlier versions kept one directory per commit slot, named by its number.
            let slot_dir = name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit());
            if slot_dir || (name.starts_with(OPEN_MARK) && old(&e.path())) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}
