//! The local cache of a remote dataset's chunks: whole chunk objects, in a directory several
//! processes share, under a size limit with least-recently-used eviction.
//!
//! - An object is fetched in the background the first time one of its ranges is read, into a
//!   temporary file of a unique name; its CRC32C (named by its key) is checked, then the file is
//!   renamed into place. A cached file is therefore complete and verified when it appears, and
//!   a process killed mid-write leaves only a temporary file (removed by a later eviction once
//!   it is an hour old).
//! - Using a file touches its modification time; eviction removes the least recently touched
//!   files until the directory is under its limit. A process that has a file open keeps reading
//!   it after another evicts it (the descriptor outlives the name).
//! - Every record read from a cached file is checked against its own CRC32C like any record;
//!   a mismatch drops the file ([`Cache::invalidate`]) and the read is retried from the store,
//!   so a damaged entry is refetched, never served.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use super::store::{spawn, Store};
use crate::checksum::crc32c_append;
use crate::error::{Error, Result};

/// Age past which a temporary file is a killed writer's leftover.
const STALE_TMP: Duration = Duration::from_secs(3600);

/// Bytes fetched per range request while filling the cache.
const FILL_PART: u64 = 8 << 20;

/// Cache fills in flight in this process.
static FILLING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Chunk downloads into the cache running in this process (background work a short-lived
/// process may want to wait for before exiting, or the next process starts with a cold cache).
pub fn pending_fills() -> usize {
    FILLING.load(std::sync::atomic::Ordering::Acquire)
}

/// One dataset's chunk cache.
#[derive(Debug)]
pub(crate) struct Cache {
    dir: PathBuf,
    limit: u64,
    filling: Mutex<HashSet<String>>,
}

/// `(size, crc32c)` of a data key `data/<file>.<size>.<crc32c hex>`.
pub(crate) fn key_size_crc(key: &str) -> Option<(u64, u32)> {
    let (rest, crc) = key.rsplit_once('.')?;
    let (_, size) = rest.rsplit_once('.')?;
    Some((size.parse().ok()?, u32::from_str_radix(crc, 16).ok()?))
}

impl Cache {
    /// The cache of the dataset at `url` under `root`, holding at most `limit` bytes.
    pub(crate) fn new(root: &Path, url: &str, limit: u64) -> Result<Cache> {
        let dir = root
            .join("objects")
            .join(format!("{:016x}", super::open::fnv(url)));
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, "mkdir", e))?;
        Ok(Cache {
            dir,
            limit,
            filling: Mutex::new(HashSet::new()),
        })
    }

    /// The file object `key` is cached in.
    pub(crate) fn path(&self, key: &str) -> PathBuf {
        self.dir.join(key.replace('/', "__"))
    }

    /// The key a cached file holds, if `path` is one of this cache's files.
    pub(crate) fn key_of(&self, path: &Path) -> Option<String> {
        (path.parent()? == self.dir).then(|| {
            path.file_name()
                .and_then(|n| n.to_str())
                .map(|n| n.replace("__", "/"))
        })?
    }

    /// The cached copy of `key`, if complete; marks it used.
    pub(crate) fn lookup(&self, key: &str) -> Option<PathBuf> {
        let (size, _) = key_size_crc(key)?;
        let path = self.path(key);
        let file = std::fs::File::options().write(true).open(&path).ok()?;
        let len = file.metadata().ok()?.len();
        if len != size {
            return None;
        }
        let _ = file.set_modified(SystemTime::now());
        Some(path)
    }

    /// Drops the cached copy of `key` (found damaged). True if there was one.
    pub(crate) fn invalidate(&self, key: &str) -> bool {
        std::fs::remove_file(self.path(key)).is_ok()
    }

    /// Starts fetching object `key` into the cache in the background, unless it is cached,
    /// being fetched by this process, or too big for the cache.
    pub(crate) fn fill(self: &Arc<Self>, store: &Arc<Store>, key: &str) {
        let Some((size, crc)) = key_size_crc(key) else {
            return;
        };
        if size > self.limit / 2 || self.path(key).exists() {
            return;
        }
        let fresh = self
            .filling
            .lock()
            .map(|mut f| f.insert(key.to_string()))
            .unwrap_or(false);
        if !fresh {
            return;
        }
        let cache = Arc::clone(self);
        let store = Arc::clone(store);
        let key = key.to_string();
        FILLING.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        spawn(async move {
            let result = cache.fetch(&store, &key, size, crc).await;
            if let Err(e) = result {
                tracing::warn!(object = %store.object_url(&key), error = %e,
                    "caching a chunk failed; it is read from the store");
            }
            if let Ok(mut f) = cache.filling.lock() {
                f.remove(&key);
            }
            cache.evict();
            FILLING.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        });
    }

    async fn fetch(&self, store: &Store, key: &str, size: u64, crc: u32) -> Result<()> {
        let path = self.path(key);
        let tmp = self.dir.join(format!(
            ".tmp-{}-{:x}-{}",
            std::process::id(),
            super::open::fnv(&format!("{key}{:?}", SystemTime::now())),
            path.file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("object")
        ));
        let file = std::fs::File::create(&tmp).map_err(|e| Error::io(&tmp, "create", e))?;
        let written = async {
            let mut got = 0u32;
            let mut at = 0u64;
            while at < size {
                let end = size.min(at.saturating_add(FILL_PART));
                let bytes = store.get_range(key, at..end).await?;
                got = crc32c_append(got, &bytes);
                crate::io::fs::write_all_at(&file, &tmp, &bytes, at)?;
                at = end;
            }
            if got != crc {
                return Err(Error::RemoteCorrupt {
                    object: store.object_url(key),
                    reason: format!(
                        "its bytes have checksum {got:#010x}, its key names {crc:#010x}"
                    ),
                });
            }
            Ok(())
        }
        .await;
        match written {
            Ok(()) => std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, "rename", e)),
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                Err(e)
            }
        }
    }

    /// Removes the least recently used files until the cache is under its limit, and
    /// temporary files older than an hour.
    pub(crate) fn evict(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let now = SystemTime::now();
        let mut files = Vec::new();
        let mut total = 0u64;
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            let when = meta.modified().unwrap_or(now);
            let is_tmp = entry.file_name().to_string_lossy().starts_with(".tmp-");
            if is_tmp {
                if now.duration_since(when).unwrap_or_default() > STALE_TMP {
                    let _ = std::fs::remove_file(entry.path());
                }
                continue;
            }
            total = total.saturating_add(meta.len());
            files.push((when, meta.len(), entry.path()));
        }
        if total <= self.limit {
            return;
        }
        files.sort();
        for (_, len, path) in files {
            if total <= self.limit {
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                total = total.saturating_sub(len);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_size_and_checksum() {
        assert_eq!(
            key_size_crc("data/chunk/00003.zr.262144.0a1b2c3d"),
            Some((262_144, 0x0a1b_2c3d))
        );
        assert_eq!(
            key_size_crc("data/x.0.offsets.48.ffffffff"),
            Some((48, u32::MAX))
        );
        assert_eq!(key_size_crc("nonsense"), None);
    }
}
