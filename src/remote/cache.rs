//! The local cache of a remote dataset's chunks: whole chunk objects, in a directory several
//! processes share, under a size limit with least-recently-used eviction.
//!
//! - An object is fetched in the background the first time one of its ranges is read, into a
//!   temporary file of a unique name; its CRC32C (named by its key) is checked, then the file is
//!   renamed into place. A cached file is therefore complete and verified when it appears, and
//!   a process killed mid-write leaves only a temporary file (removed by a later eviction once
//!   it is an hour old). The file work (create, writes, rename, eviction's directory scan) runs
//!   on the runtime's blocking threads, never on the workers that serve range requests.
//! - Recency is the file's modification time, which every process sharing the directory sees:
//!   set when the file is filled, and set again on use, at most once per [`USE_INTERVAL`] per
//!   chunk and process, on every read path (a snapshot's chunk handle marks the copies it opened
//!   as local chunks, zero-copy reads included; [`Cache::used`] marks the copies the remote
//!   backend reads). Opening a snapshot is no use: it marks nothing.
//! - Eviction removes the least recently used files until the directory is under its limit. It
//!   runs after a fill that takes this process's count of the cache past the limit, and at
//!   least every [`EVICT_INTERVAL`] after a fill (other processes fill the same directory), not
//!   after every fill. After an eviction this process's snapshots close the descriptors and
//!   mappings they hold of evicted files (they read those chunks from their objects), so the
//!   blocks are freed; a snapshot in another process does the same at the file's next use.
//! - Every record read from a cached file is checked against its own CRC32C like any record;
//!   a mismatch drops the file ([`Cache::invalidate`]) and the read is retried from the store,
//!   so a damaged entry is refetched, never served.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::off_runtime;
use super::store::{spawn, Store};
use crate::checksum::crc32c_append;
use crate::error::{Error, Result};
use crate::io::fork::ForkLocal;

/// Age past which a temporary file is a killed writer's leftover.
const STALE_TMP: Duration = Duration::from_secs(3600);

/// Bytes fetched per range request while filling the cache.
const FILL_PART: u64 = 8 << 20;

/// A cached file's use is recorded at most this often per process (its modification time is
/// set again).
pub(crate) const USE_INTERVAL: Duration = Duration::from_secs(1);

/// Eviction runs at least this often after fills, whatever this process counts.
const EVICT_INTERVAL: Duration = Duration::from_secs(30);

/// Cache fills in flight in this process (a child of `fork()` counts its own: its parent's
/// fills run on threads it does not have).
fn filling_count() -> &'static std::sync::atomic::AtomicUsize {
    static FILLING: ForkLocal<std::sync::atomic::AtomicUsize> = ForkLocal::new();
    FILLING.get_or_init(|_| std::sync::atomic::AtomicUsize::new(0))
}

/// Chunk downloads into the cache running in this process (background work a short-lived
/// process may want to wait for before exiting, or the next process starts with a cold cache).
#[cfg_attr(
    not(feature = "diagnostics"),
    allow(dead_code, reason = "public through `zrecord::diagnostics`")
)]
pub fn pending_fills() -> usize {
    filling_count().load(std::sync::atomic::Ordering::Acquire)
}

/// "Not counted yet" in [`Cache::held`].
const UNKNOWN: u64 = u64::MAX;

/// One dataset's chunk cache.
#[derive(Debug)]
pub(crate) struct Cache {
    dir: PathBuf,
    limit: u64,
    /// Keys this process is fetching (per process: a child of `fork()` fetches none of its
    /// parent's).
    filling: ForkLocal<Mutex<HashSet<String>>>,
    /// Bytes of cached files as the last eviction left them plus what this process filled
    /// since; [`UNKNOWN`] before the first eviction.
    held: AtomicU64,
    /// When eviction last ran, if it has.
    evicted_at: Mutex<Option<Instant>>,
    /// When this process last marked each key used.
    used: Mutex<HashMap<String, Instant>>,
    /// Bytes outside the objects directory that count against the limit (mirrored tables).
    mirrored: Option<PathBuf>,
    /// Keys whose object failed the checksum its key names when this cache fetched it
    /// (damage on the store): not fetched whole again by this cache.
    damaged: Mutex<HashSet<String>>,
}

/// `(size, crc32c)` of a data key `data/<file>.<size>.<crc32c hex>`.
pub(crate) fn key_size_crc(key: &str) -> Option<(u64, u32)> {
    let (rest, crc) = key.rsplit_once('.')?;
    let (_, size) = rest.rsplit_once('.')?;
    Some((size.parse().ok()?, u32::from_str_radix(crc, 16).ok()?))
}

/// Bytes of disk the file of `meta` takes.
fn disk_bytes(meta: &std::fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    meta.blocks().saturating_mul(512).max(meta.len())
}

impl Cache {
    /// The cache of the dataset at `url` under `root`, holding at most `limit` bytes, the
    /// bytes under `mirrored` (its mirrored tables) included.
    pub(crate) fn new(
        root: &Path,
        url: &str,
        limit: u64,
        mirrored: Option<PathBuf>,
    ) -> Result<Cache> {
        let dir = root
            .join("objects")
            .join(format!("{:016x}", crate::hash::fnv(url)));
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, "mkdir", e))?;
        Ok(Cache {
            dir,
            limit,
            filling: ForkLocal::new(),
            held: AtomicU64::new(UNKNOWN),
            evicted_at: Mutex::new(None),
            used: Mutex::new(HashMap::new()),
            mirrored,
            damaged: Mutex::new(HashSet::new()),
        })
    }

    /// The keys this process is fetching.
    fn filling(&self) -> &Mutex<HashSet<String>> {
        self.filling.get_or_init(|_| Mutex::new(HashSet::new()))
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

    /// The cached copy of `key`, if complete. Finding it is no use of it: the reads that
    /// follow mark it ([`Cache::used`], or the snapshot's chunk handle).
    pub(crate) fn lookup(&self, key: &str) -> Option<PathBuf> {
        let (size, _) = key_size_crc(key)?;
        let path = self.path(key);
        let len = std::fs::metadata(&path).ok()?.len();
        (len == size).then_some(path)
    }

    /// Marks the cached copy of `key`, open as `file`, used (at most once per
    /// [`USE_INTERVAL`] per key in this process).
    pub(crate) fn used(&self, key: &str, file: &std::fs::File) {
        let now = Instant::now();
        let due = self.used.lock().is_ok_and(|mut u| {
            if u.len() > 65_536 {
                u.retain(|_, at| now.duration_since(*at) < USE_INTERVAL);
            }
            match u.get_mut(key) {
                Some(at) if now.duration_since(*at) < USE_INTERVAL => false,
                Some(at) => {
                    *at = now;
                    true
                }
                None => {
                    u.insert(key.to_string(), now);
                    true
                }
            }
        });
        if due {
            let _ = file.set_modified(SystemTime::now());
        }
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
        let damaged = self.damaged.lock().map(|d| d.contains(key)).unwrap_or(true);
        if size > self.limit / 2 || damaged {
            return;
        }
        let fresh = self
            .filling()
            .lock()
            .map(|mut f| f.insert(key.to_string()))
            .unwrap_or(false);
        if !fresh {
            return;
        }
        let cache = Arc::clone(self);
        let store = Arc::clone(store);
        let key = key.to_string();
        filling_count().fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        spawn(async move {
            let result = cache.fetch(&store, &key, size, crc).await;
            match result {
                Ok(true) => {
                    let c = Arc::clone(&cache);
                    let _ = off_runtime(move || {
                        c.filled(size);
                        Ok(())
                    })
                    .await;
                }
                Ok(false) => {}
                Err(e) => {
                    if matches!(e, Error::RemoteCorrupt { .. }) {
                        if let Ok(mut d) = cache.damaged.lock() {
                            d.insert(key.clone());
                        }
                    }
                    tracing::warn!(object = %store.object_url(&key), error = %e,
                        "caching a chunk failed; it is read from the store");
                }
            }
            if let Ok(mut f) = cache.filling().lock() {
                f.remove(&key);
            }
            filling_count().fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        });
    }

    /// Fetches `key` into its file unless it is there; true if this call filled it.
    async fn fetch(&self, store: &Store, key: &str, size: u64, crc: u32) -> Result<bool> {
        let path = self.path(key);
        let tmp = self.dir.join(format!(
            ".tmp-{}-{:x}-{}",
            std::process::id(),
            crate::hash::fnv(&format!("{key}{:?}", SystemTime::now())),
            path.file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("object")
        ));
        let file = {
            let (p, t) = (path.clone(), tmp.clone());
            let created = off_runtime(move || {
                if p.exists() {
                    return Ok(None);
                }
                crate::io::fs::create_new(&t).map(|f| Some(Arc::new(f)))
            })
            .await?;
            match created {
                Some(f) => f,
                None => return Ok(false),
            }
        };
        let written = async {
            let mut got = 0u32;
            let mut at = 0u64;
            while at < size {
                let end = size.min(at.saturating_add(FILL_PART));
                let bytes = store.get_range(key, at..end).await?;
                got = crc32c_append(got, &bytes);
                let (f, t) = (Arc::clone(&file), tmp.clone());
                off_runtime(move || crate::io::fs::write_all_at(&f, &t, &bytes, at)).await?;
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
            let (t, p) = (tmp.clone(), path.clone());
            off_runtime(move || std::fs::rename(&t, &p).map_err(|e| Error::io(&p, "rename", e)))
                .await
        }
        .await;
        if let Err(e) = written {
            let t = tmp.clone();
            let _ = off_runtime(move || {
                let _ = std::fs::remove_file(&t);
                Ok(())
            })
            .await;
            return Err(e);
        }
        Ok(true)
    }

    /// Counts a fill of `size` bytes, and evicts if that takes the count past the limit, if
    /// the count is not known yet, or if the last eviction is older than [`EVICT_INTERVAL`].
    /// Blocking file work.
    fn filled(&self, size: u64) {
        let before = self
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| {
                (h != UNKNOWN).then(|| h.saturating_add(size))
            });
        let over = match before {
            Ok(h) => h.saturating_add(size) > self.limit,
            Err(_) => true,
        };
        let stale = self
            .evicted_at
            .lock()
            .map(|at| at.is_none_or(|at| at.elapsed() > EVICT_INTERVAL))
            .unwrap_or(true);
        if over || stale {
            self.evict();
        }
    }

    /// Bytes of the files under `dir`, recursively (the mirrored tables).
    fn bytes_under(dir: &Path) -> u64 {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return 0;
        };
        entries
            .flatten()
            .map(|e| match e.metadata() {
                Ok(m) if m.is_dir() => Self::bytes_under(&e.path()),
                Ok(m) => disk_bytes(&m),
                Err(_) => 0,
            })
            .sum()
    }

    /// Removes the least recently used files until the cache (with its mirrored tables) is
    /// under its limit, and temporary files older than an hour; then this process's snapshots
    /// let go of the files removed. Blocking file work.
    pub(crate) fn evict(&self) {
        if let Ok(mut at) = self.evicted_at.lock() {
            *at = Some(Instant::now());
        }
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let now = SystemTime::now();
        let mut files = Vec::new();
        let mut total = self.mirrored.as_deref().map_or(0, Self::bytes_under);
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
            let bytes = disk_bytes(&meta);
            total = total.saturating_add(bytes);
            files.push((when, bytes, entry.path()));
        }
        let mut removed = false;
        if total > self.limit {
            files.sort();
            for (_, bytes, path) in files {
                if total <= self.limit {
                    break;
                }
                if std::fs::remove_file(&path).is_ok() {
                    total = total.saturating_sub(bytes);
                    removed = true;
                }
            }
        }
        self.held.store(total, Ordering::Release);
        if removed {
            crate::store::read::chunks::release_unlinked_copies();
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

    /// A fill scans the directory only when this process does not know the cache's size yet,
    /// when the fill takes it past the limit, or when the last scan is old: not after every
    /// fill.
    #[test]
    fn eviction_runs_past_the_limit_not_after_every_fill() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path(), "s3://b/p", 10_000, None).unwrap();
        let scanned = || *cache.evicted_at.lock().unwrap();
        assert_eq!(scanned(), None);
        cache.filled(100);
        let first = scanned();
        assert!(first.is_some(), "the first fill counts the cache");
        for _ in 0..20 {
            cache.filled(100);
        }
        assert_eq!(
            scanned(),
            first,
            "fills under the limit rescanned the directory"
        );
        cache.filled(20_000);
        assert_ne!(scanned(), first, "a fill past the limit did not evict");
    }

    /// Eviction removes the least recently used files first, and counts what it keeps.
    #[test]
    fn eviction_removes_the_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path(), "s3://b/p", 3 * 4096, None).unwrap();
        let now = SystemTime::now();
        for (k, age) in [("old", 300u64), ("new", 0), ("mid", 100), ("older", 400)] {
            let key = format!("data/{k}.4096.00000000");
            std::fs::write(cache.path(&key), vec![1u8; 4096]).unwrap();
            let f = std::fs::File::options()
                .write(true)
                .open(cache.path(&key))
                .unwrap();
            f.set_modified(now - Duration::from_secs(age)).unwrap();
        }
        cache.evict();
        let left = |k: &str| cache.path(&format!("data/{k}.4096.00000000")).exists();
        assert!(!left("older"));
        assert!(left("old") && left("mid") && left("new"));
        assert!(cache.held.load(Ordering::Acquire) <= 3 * 4096);
    }
}
