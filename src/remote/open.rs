//! Opening a dataset on an object store: its latest commit's manifest, its offset tables
//! mirrored into the local cache directory, and its chunks read through the remote backend.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::backend::RemoteBackend;
use super::cache::Cache;
use super::manifest::{slot_key, Manifest, ObjectEntry, COMMITS};
use super::push::latest;
use super::store::{block_on, Store};
use super::RemoteConfig;
use crate::checksum::crc32c_append;
use crate::error::{Error, Result};
use crate::store::read::chunks::{ChunkAt, ChunkSet};
use crate::store::snapshot::Snapshot;

/// A dataset URL's store, and what opening it needs again on refresh.
#[derive(Debug)]
pub(crate) struct Remote {
    pub(crate) store: Arc<Store>,
    pub(crate) config: RemoteConfig,
    /// The chunk cache, if the configuration gives it room.
    pub(crate) cache: Option<Arc<Cache>>,
    /// The commit slot the current snapshot is.
    pub(crate) slot: std::sync::atomic::AtomicU64,
}

/// 64-bit FNV-1a of `s`: names a URL's mirror directory.
pub(crate) fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
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
            )?)),
        };
        Ok(Remote {
            store,
            cache,
            config: config.clone(),
            slot: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The backend that reads this dataset's chunks.
    pub(crate) fn backend(&self) -> Arc<RemoteBackend> {
        Arc::new(RemoteBackend::new(
            Arc::clone(&self.store),
            self.config.clone(),
            self.cache.clone(),
            crate::store::read::read_backend(&crate::ReadConfig::default()).ok(),
        ))
    }

    /// The latest commit slot and its manifest.
    fn latest(&self) -> Result<(u64, Manifest, crate::format::meta::Meta)> {
        let store = Arc::clone(&self.store);
        let found = block_on(async move { latest(&store).await })??;
        let (slot, bytes) = found.ok_or_else(|| Error::NotADataset {
            path: PathBuf::from(self.store.url()),
            reason: format!("no commit under {}", self.store.object_url(COMMITS)),
        })?;
        let (m, meta) = Manifest::decode(&self.store.object_url(&slot_key(slot)), &bytes)?;
        Ok((slot, m, meta))
    }

    /// The latest commit slot, without opening it.
    pub(crate) fn latest_slot(&self) -> Result<u64> {
        Ok(self.latest()?.0)
    }

    /// A snapshot of the latest commit: the offset tables and patch logs fetched (once per
    /// commit) into the mirror directory, checked against their manifest's sizes and
    /// checksums; chunks as objects.
    pub(crate) fn snapshot(&self) -> Result<Snapshot> {
        let (slot, manifest, meta) = self.latest()?;
        let mirror = self
            .config
            .cache_root()
            .join("mirrors")
            .join(format!("{:016x}", fnv(self.store.url())))
            .join(format!("{slot:020}"));
        std::fs::create_dir_all(&mirror).map_err(|e| Error::io(&mirror, "mkdir", e))?;
        let mut chunks = Vec::new();
        for o in &manifest.objects {
            if o.file.starts_with("chunk/") {
                chunks.push(o.clone());
            } else {
                self.fetch(&mirror, o)?;
            }
        }
        let store = &self.store;
        let cache = self.cache.as_deref();
        // Chunks already cached are local chunks: the local engine's whole path (zero-copy
        // included) reads them.
        let set = ChunkSet::load_remote(&meta, |id| {
            let file = format!("chunk/{id:05}.zr");
            let o = chunks.iter().find(|o| o.file == file)?;
            Some(match cache.and_then(|c| c.lookup(&o.object)) {
                Some(path) => ChunkAt::Local(
                    path,
                    PathBuf::from(store.object_url(&o.object)),
                    o.object.clone(),
                ),
                None => {
                    ChunkAt::Remote(PathBuf::from(store.object_url(&o.object)), o.object.clone())
                }
            })
        })?;
        self.slot.store(slot, std::sync::atomic::Ordering::Release);
        let native: Arc<dyn crate::ReadBackend> = self.backend();
        Snapshot::open_with_chunks(&mirror, PathBuf::from(store.url()), meta, set, native)
    }

    /// Puts object `o` at its file name in `dir`, unless it is there with its checksum.
    fn fetch(&self, dir: &Path, o: &ObjectEntry) -> Result<()> {
        let path = dir.join(&o.file);
        if let Ok(bytes) = std::fs::read(&path) {
            if bytes.len() as u64 == o.size && crc32c_append(0, &bytes) == o.crc32c {
                return Ok(());
            }
        }
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
        static TMP: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = TMP.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = dir.join(format!("{}.{}-{n}.tmp", o.file, std::process::id()));
        std::fs::write(&tmp, &bytes).map_err(|e| Error::io(&tmp, "write", e))?;
        std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, "rename", e))
    }
}
