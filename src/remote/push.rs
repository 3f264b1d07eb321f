//! Publishing a local dataset to an object store.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};

use super::manifest::{latest, required_files, slot_key, Manifest, ObjectEntry, PROBES};
use super::store::{block_on, Create, Store, StoreOptions};
use crate::checksum::crc32c_append;
use crate::error::{Error, Result};
use crate::io::job::ReadFile;
use crate::store::read::chunks::descriptor_budget;
use crate::store::snapshot::read_meta;
use crate::{LocalDir, Location, Snapshot};

/// Options of `zrecord::remote::push` and `zrecord::remote::pull`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TransferOptions {
    /// The object-store client's options. Default: the environment's.
    pub store: StoreOptions,
    /// Objects transferred at once (for a push, at most the chunk descriptor budget: each
    /// upload in flight holds its file open). Default: 4.
    pub concurrency: usize,
    /// Objects larger than this go in parts of this size (multipart uploads, ranged
    /// downloads). Default: 16 MiB.
    pub part_size: usize,
    /// Push only: one writer publishes to this prefix, so a store that ignores conditional
    /// creates (`If-None-Match: *`) may be published to. Off, a push probes the store first and
    /// refuses one that ignores them ([`Error::ConditionalCreateIgnored`]): there two racing
    /// pushes could both commit and one update would be lost. Default: off.
    pub single_writer: bool,
}

impl Default for TransferOptions {
    /// The environment's store settings, 4 objects at once, parts of 16 MiB, no single-writer
    /// declaration.
    fn default() -> Self {
        Self {
            store: StoreOptions::default(),
            concurrency: 4,
            part_size: 16 << 20,
            single_writer: false,
        }
    }
}

impl TransferOptions {
    /// Sets the object-store client's options.
    #[must_use]
    pub fn store(mut self, store: StoreOptions) -> Self {
        self.store = store;
        self
    }

    /// Sets the objects transferred at once, at least 1. Default 4.
    #[must_use]
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// Sets the part size of large objects, at least 5 MiB (S3's smallest part). Default
    /// 16 MiB.
    #[must_use]
    pub fn part_size(mut self, part_size: usize) -> Self {
        self.part_size = part_size;
        self
    }

    /// Declares that one writer publishes to the prefix: a push then publishes to a store that
    /// ignores conditional creates (and skips the probe). Default off.
    #[must_use]
    pub fn single_writer(mut self, single_writer: bool) -> Self {
        self.single_writer = single_writer;
        self
    }

    pub(crate) fn check(&self) -> Result<()> {
        if self.concurrency == 0 || self.part_size < 5 << 20 {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "transfer: concurrency must be at least 1 (got {}) and parts at least 5 MiB \
                     (got {} bytes)",
                    self.concurrency, self.part_size
                ),
            });
        }
        Ok(())
    }
}

/// What `zrecord::remote::push` or `zrecord::remote::pull` did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransferReport {
    /// The dataset (or collection) URL.
    pub url: String,
    /// The generation transferred; for a collection, the local manifest's number.
    pub generation: u64,
    /// The commit slot on the store; for a collection, the store's manifest number.
    pub slot: u64,
    /// Objects (files) transferred, and their bytes (summed over a collection's parts).
    pub transferred: (u64, u64),
    /// Objects (files) already in place and skipped, and their bytes.
    pub skipped: (u64, u64),
    /// The store's latest commit already was this one (push), or the local copy already was
    /// complete (pull): nothing was committed. For a collection: the target's latest manifest
    /// already listed the source's parts (and, for a pull, every file of every part checked).
    pub already_done: bool,
    /// For a collection, its number of parts (each transferred as a dataset); `None` for a
    /// dataset.
    pub parts: Option<u64>,
}

/// Files and bytes of the `(flag, size)` results whose flag is `flag` (transferred, or not).
pub(super) fn tally(results: &[(bool, u64)], flag: bool) -> (u64, u64) {
    results
        .iter()
        .filter(|(f, _)| *f == flag)
        .fold((0u64, 0u64), |(n, b), (_, size)| {
            (n.saturating_add(1), b.saturating_add(*size))
        })
}

/// Reads `len` bytes at `offset` of `file`.
fn read_at(file: &File, path: &Path, offset: u64, len: usize) -> Result<Bytes> {
    let mut buf = vec![0u8; len];
    crate::io::fs::read_exact_at(file, path, &mut buf, offset)?;
    Ok(Bytes::from(buf))
}

/// CRC32C and BLAKE3 hash (64 lowercase hex digits) of `size` bytes of `file`, read in pieces
/// of at most `piece`.
pub(super) fn digest_of(
    file: &File,
    path: &Path,
    size: u64,
    piece: usize,
) -> Result<(u32, String)> {
    let mut crc = 0u32;
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; usize::try_from(size).unwrap_or(usize::MAX).min(piece)];
    let mut offset = 0u64;
    while offset < size {
        let len = usize::try_from(size - offset)
            .unwrap_or(usize::MAX)
            .min(piece);
        let slice = buf.get_mut(..len).unwrap_or_default();
        crate::io::fs::read_exact_at(file, path, slice, offset)?;
        crc = crc32c_append(crc, slice);
        hasher.update(slice);
        offset = offset.saturating_add(len as u64);
    }
    Ok((crc, hasher.finalize().to_hex().to_string()))
}

/// Where the committed bytes of one file of the commit are read from. Nothing is held open
/// between uses: a file is opened when its bytes are hashed and again when its upload starts,
/// so a push holds at most one descriptor per upload in flight, whatever the number of chunks.
#[derive(Debug, Clone)]
enum Source {
    /// Chunk `id` of the snapshot, which opens it within the chunk descriptor budget and
    /// checks it is still the file the commit named.
    Chunk(Arc<Snapshot>, u16),
    /// A table or patch log: opened by path.
    Path,
}

/// An open file of the commit, held only while its bytes are read.
enum Held {
    Chunk(Arc<ReadFile>),
    File(File),
}

impl Held {
    fn file(&self, path: &Path) -> Result<&File> {
        match self {
            Held::File(f) => Ok(f),
            Held::Chunk(rf) => rf.local().ok_or_else(|| Error::Internal {
                reason: format!("{} is not a local file", path.display()),
            }),
        }
    }
}

/// One local file of the commit being pushed.
struct LocalFile {
    entry: ObjectEntry,
    path: PathBuf,
    source: Source,
}

impl Source {
    fn open(&self, path: &Path) -> Result<Held> {
        match self {
            Source::Chunk(snap, id) => snap.chunk_file(*id).map(Held::Chunk),
            Source::Path => crate::io::fs::open_read(path).map(Held::File),
        }
    }
}

/// Publishes the latest commit of the local dataset at `local` to `url`: the store probed
/// (unless `single_writer`), the data objects under content keys, the commit manifest last
/// into the next free slot with a conditional create. The public entry, [`crate::remote::push`]
/// (`transfer.rs`), documents it; a collection's root goes to `collection/push.rs` instead.
///
/// # Errors
/// As [`crate::remote::push`] says of a dataset.
pub(crate) fn push(
    local: impl AsRef<Path>,
    url: &str,
    options: &TransferOptions,
) -> Result<TransferReport> {
    push_with(local.as_ref(), url, options, Stack::OnAnother)
}

/// Whether a push may commit on top of another commit than its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stack {
    /// Yes: a dataset's next generation is committed into the next free slot.
    OnAnother,
    /// No: the prefix's latest commit must be this very one, or there must be none (a
    /// collection's part, which a manifest names by id: another dataset under that id would
    /// be read in its place). Another one there is [`Error::PublishConflict`].
    Never,
}

/// [`push`], stacking as `stack` says.
pub(crate) fn push_with(
    local: &Path,
    url: &str,
    options: &TransferOptions,
    stack: Stack,
) -> Result<TransferReport> {
    options.check()?;
    let dir = local;
    let store = Store::open(url, &options.store)?;
    let not_a_dataset = |e: Error| match e {
        Error::Io { .. } | Error::MetaCorrupt { .. } => Error::NotADataset {
            path: dir.to_path_buf(),
            reason: e.to_string(),
        },
        other => other,
    };
    // The snapshot and the meta text of one commit.
    let (meta_text, snap) = loop {
        let (bytes, meta) = read_meta(dir).map_err(not_a_dataset)?;
        let snap = LocalDir::new(dir).snapshot().map_err(not_a_dataset)?;
        if snap.generation() == meta.generation {
            let text = String::from_utf8(bytes).map_err(|_| Error::MetaCorrupt {
                path: crate::format::layout::meta(dir),
                reason: "not UTF-8".into(),
            })?;
            break (text, Arc::new(snap));
        }
    };
    if !options.single_writer {
        require_conditional_create(&store, "pushes")?;
    }
    let piece = options.part_size;
    let mut files = Vec::new();
    for (name, size) in required_files(snap.meta()) {
        let path = dir.join(&name);
        let source = match name
            .strip_prefix("chunk/")
            .and_then(|n| n.strip_suffix(".zr"))
        {
            Some(id) => {
                let id: u16 = id.parse().map_err(|_| Error::Internal {
                    reason: format!("chunk file name {name}"),
                })?;
                Source::Chunk(Arc::clone(&snap), id)
            }
            None => Source::Path,
        };
        let (crc, hash) = {
            let held = source.open(&path)?;
            digest_of(held.file(&path)?, &path, size, piece)?
        };
        files.push(LocalFile {
            entry: ObjectEntry::new(name, size, crc, hash),
            path,
            source,
        });
    }
    let generation = snap.generation();
    let manifest = Manifest::new(
        generation,
        meta_text,
        files.iter().map(|f| f.entry.clone()).collect(),
    );
    let encoded = Bytes::from(manifest.encode()?);
    if stack == Stack::Never {
        // Another commit there already: refused before any object is uploaded.
        let (s, m) = (Arc::clone(&store), manifest.clone());
        block_on(async move {
            let current = latest(&s).await?;
            existing(&s, &m, current.as_ref(), stack).map(|_| ())
        })??;
    }
    // One descriptor per upload in flight: within the chunk descriptor budget.
    let concurrency = options.concurrency.min(descriptor_budget()).max(1);
    let s = Arc::clone(&store);
    block_on(async move {
        let results: Vec<(bool, u64)> = futures::stream::iter(files)
            .map(|f| upload(Arc::clone(&s), f, piece))
            .buffer_unordered(concurrency)
            .try_collect()
            .await?;
        let count = |uploaded: bool| tally(&results, uploaded);
        let (slot, already_done) = commit(&s, &manifest, encoded, stack).await?;
        Ok(TransferReport {
            url: s.url().to_string(),
            generation,
            slot,
            transferred: count(true),
            skipped: count(false),
            already_done,
            parts: None,
        })
    })?
}

/// A key no other push uses: for the probe.
fn probe_key() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{PROBES}/{}-{nanos}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Refuses `store` ([`Error::ConditionalCreateIgnored`]) if a probe finds it ignores
/// conditional creates: there two racing `writers` (pushes) could both commit and one update
/// would be lost.
///
/// # Errors
/// As above; the probe's requests' errors.
pub(crate) fn require_conditional_create(store: &Arc<Store>, writers: &str) -> Result<()> {
    let s = Arc::clone(store);
    if block_on(async move { honours_conditional_create(&s).await })?? {
        return Ok(());
    }
    Err(Error::ConditionalCreateIgnored {
        url: store.url().to_string(),
        reason: format!(
            "this object store ignores conditional creates (a probe created one key twice with \
             If-None-Match: *; Garage 2.5.0 does), so two {writers} racing to one prefix could \
             both commit and one update would be lost without an error. If only one writer \
             ever publishes to this prefix, push with --single-writer \
             (TransferOptions::single_writer)"
        ),
    })
}

/// True if `store` refuses a conditional create (`If-None-Match: *`) of a key that exists:
/// creates a fresh probe key twice (the second must fail), then deletes it.
pub(super) async fn honours_conditional_create(store: &Store) -> Result<bool> {
    let key = probe_key();
    let first = store
        .create(&key, Bytes::from_static(b"zrecord probe 1"))
        .await?;
    let second = store
        .create(&key, Bytes::from_static(b"zrecord probe 2"))
        .await;
    // The probe object is this push's own; a failed delete leaves a few bytes behind.
    if let Err(e) = store.delete(&key).await {
        tracing::debug!("deleting the probe {}: {e}", store.object_url(&key));
    }
    Ok(first != Create::Created || second? != Create::Created)
}

/// Uploads one file unless its object is there; returns (uploaded, size). The file is opened
/// only once the upload starts, and closed when it ends.
async fn upload(store: Arc<Store>, f: LocalFile, part: usize) -> Result<(bool, u64)> {
    let LocalFile {
        entry,
        path,
        source,
    } = f;
    let key = entry.object.as_str();
    // The key names the content (a BLAKE3 hash of all of it): an object there with the size
    // holds these bytes.
    if store.head(key).await? == Some(entry.size) {
        return Ok((false, entry.size));
    }
    let held = source.open(&path)?;
    let file = held.file(&path)?;
    // The bytes are read again for the upload: check they still have the hash and checksum
    // the key names before the object is complete.
    let sums = std::sync::Mutex::new((0u32, blake3::Hasher::new()));
    let read = |offset: u64, len: usize| -> Result<Bytes> {
        let b = read_at(file, &path, offset, len)?;
        if let Ok(mut s) = sums.lock() {
            s.0 = crc32c_append(s.0, &b);
            s.1.update(&b);
        }
        Ok(b)
    };
    let unchanged = || {
        sums.lock().ok().is_some_and(|s| {
            s.0 == entry.crc32c && entry.blake3.as_deref() == Some(s.1.finalize().to_hex().as_str())
        })
    };
    let changed = || Error::Internal {
        reason: format!(
            "{} changed while it was pushed (committed bytes never change)",
            path.display()
        ),
    };
    if entry.size <= part as u64 {
        let len = usize::try_from(entry.size).map_err(|_| changed())?;
        let bytes = read(0, len)?;
        if !unchanged() {
            return Err(changed());
        }
        store.put(key, bytes).await?;
    } else {
        let checked = |offset: u64, len: usize| -> Result<Bytes> {
            let b = read(offset, len)?;
            let end = offset.saturating_add(len as u64);
            if end == entry.size && !unchanged() {
                return Err(changed());
            }
            Ok(b)
        };
        store.put_multipart(key, entry.size, part, checked).await?;
    }
    Ok((true, entry.size))
}

/// The slot of `current` (the store's latest commit) if it is `manifest`; `None` if it is
/// another commit (or there is none) and `stack` allows committing on top of it.
///
/// # Errors
/// [`Error::PublishConflict`] for another commit under [`Stack::Never`]; a damaged manifest's.
fn existing(
    store: &Store,
    manifest: &Manifest,
    current: Option<&(u64, Bytes)>,
    stack: Stack,
) -> Result<Option<u64>> {
    let Some((slot, bytes)) = current else {
        return Ok(None);
    };
    let (theirs, _) = Manifest::decode(&store.object_url(&slot_key(*slot)), bytes)?;
    if &theirs == manifest {
        return Ok(Some(*slot));
    }
    if stack == Stack::Never {
        return Err(Error::PublishConflict {
            url: store.url().to_string(),
            reason: format!(
                "commit slot {slot} holds another commit than this push's (generation {}, \
                 other files); nothing is committed on top of it",
                theirs.generation
            ),
        });
    }
    Ok(None)
}

/// Writes `manifest` into the next free slot (under [`Stack::Never`], only if there is no
/// commit yet); returns the slot and whether the latest commit already was this one.
async fn commit(
    store: &Store,
    manifest: &Manifest,
    encoded: Bytes,
    stack: Stack,
) -> Result<(u64, bool)> {
    let same = |slot: u64, bytes: &[u8]| -> Result<bool> {
        let (theirs, _) = Manifest::decode(&store.object_url(&slot_key(slot)), bytes)?;
        Ok(&theirs == manifest)
    };
    let current = latest(store).await?;
    if let Some(slot) = existing(store, manifest, current.as_ref(), stack)? {
        return Ok((slot, true));
    }
    let slot = current.map_or(1, |(s, _)| s.saturating_add(1));
    let key = slot_key(slot);
    let created = store.create(&key, encoded.clone()).await?;
    let back = store.get(&key).await?;
    let ours = back == encoded;
    match (created, ours) {
        (Create::Created | Create::Maybe, true) => Ok((slot, false)),
        (Create::Exists, _) if same(slot, &back)? => Ok((slot, true)),
        (Create::Exists | Create::Maybe, _) => Err(Error::PublishConflict {
            url: store.url().to_string(),
            reason: format!(
                "another push committed slot {slot} first (generation {}); this push's data \
                 objects are uploaded but not committed",
                Manifest::decode(&store.object_url(&key), &back)
                    .map(|(m, _)| m.generation.to_string())
                    .unwrap_or_else(|e| format!("unreadable: {e}"))
            ),
        }),
        (Create::Created, false) => Err(Error::PublishConflict {
            url: store.url().to_string(),
            reason: format!(
                "slot {slot} was overwritten by another push right after this one wrote it: \
                 this store does not honour conditional creates (If-None-Match)"
            ),
        }),
    }
}
