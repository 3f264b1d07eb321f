//! Fetching a dataset from an object store into a local directory.
//!
//! Several processes may pull into one directory at once (the ranks of one node): each takes
//! the directory's writer lock (`writer.lock`) for the whole pull, so they run one after the
//! other, and every later one finds the files in place. A pull killed mid-way leaves temporary
//! files only (`<file>.pull-<pid>-<n>`, each created new, never shared), which the next pull
//! removes while it holds the lock. Every file is checked on disk against the size and CRC32C
//! its manifest entry records ([`check_file`]) before it is renamed into place, and again
//! whenever a pull finds it already there, so "already done" means the files check, not only
//! that `meta.json` matches.

use std::fs::File;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};

use super::manifest::{latest, slot_key, Manifest, ObjectEntry};
use super::off_runtime;
use super::push::{TransferOptions, TransferReport};
use super::store::{block_on, Store};
use crate::checksum::crc32c_append;
use crate::error::{Error, Result};
use crate::store::snapshot::read_meta;

/// What a file on disk is, against its manifest entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Check {
    /// Its size and checksum are the entry's.
    Good,
    /// It is missing or differs; why.
    Bad(String),
}

/// Checks the file at `path` against manifest entry `o`: its size, and the CRC32C and (where
/// the manifest records one) the BLAKE3 hash of its bytes, read back from disk in pieces of
/// `piece` bytes.
fn check_file(path: &Path, o: &ObjectEntry, piece: usize) -> Result<Check> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Check::Bad("missing".into()))
        }
        Err(e) => return Err(Error::io(path, "open", e)),
    };
    let size = crate::io::fs::file_len(&file, path)?;
    if size != o.size {
        return Ok(Check::Bad(format!(
            "{size} bytes, the manifest records {}",
            o.size
        )));
    }
    let (crc, hash) = super::push::digest_of(&file, path, size, piece.max(1))?;
    if crc != o.crc32c {
        return Ok(Check::Bad(format!(
            "checksum {crc:#010x}, the manifest records {:#010x}",
            o.crc32c
        )));
    }
    // A version 1 manifest records no hash: its size and CRC32C are all there is to check.
    if let Some(want) = o.blake3.as_ref().filter(|want| **want != hash) {
        return Ok(Check::Bad(format!(
            "BLAKE3 {hash}, the manifest records {want}"
        )));
    }
    Ok(Check::Good)
}

/// The path of manifest entry `o`'s file under `dir`; an entry that names anything but a
/// relative path inside the dataset directory is a damaged manifest.
fn entry_path(store: &Store, dir: &Path, o: &ObjectEntry) -> Result<PathBuf> {
    let rel = Path::new(&o.file);
    let plain = !o.file.is_empty() && rel.components().all(|c| matches!(c, Component::Normal(_)));
    if !plain {
        return Err(Error::RemoteCorrupt {
            object: store.object_url(&o.object),
            reason: format!(
                "its manifest names the file {:?}, not a path in a dataset",
                o.file
            ),
        });
    }
    Ok(dir.join(rel))
}

/// A temporary name next to `path`, unique in this process and across processes.
fn temp_path(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    PathBuf::from(format!(
        "{}{TMP_MARK}{}-{n}",
        path.display(),
        std::process::id()
    ))
}

/// What temporary names of a pull contain.
const TMP_MARK: &str = ".pull-";

/// Removes temporary files of earlier pulls from `dir` (a killed pull's; only called while the
/// lock is held, so no live pull owns one).
fn remove_leftovers(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.contains(TMP_MARK) || name.ends_with(".pull") {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Takes the writer lock of `dir` for a pull: waiting while another pull (or a writer) holds
/// it, or, with `wait` false, [`Error::WriterBusy`] at once if it is held (a collection's pull, which holds the collection's commit lock: waiting there on a writer
/// would hold up every `gc` of the collection for as long as the writer lives).
fn lock_dir(dir: &Path, wait: bool) -> Result<crate::io::lock::FileLock> {
    let path = dir.join(crate::format::layout::LOCK);
    if !wait {
        return crate::io::lock::FileLock::try_take(&path)?.ok_or(Error::WriterBusy { path });
    }
    crate::io::lock::FileLock::take_waiting(
        &path,
        crate::io::lock::Mode::Exclusive,
        || tracing::info!(dir = %dir.display(), "another pull (or a writer) holds the directory; waiting for it"),
    )
}

/// Fetches the latest commit of the dataset at `url` into the local directory `local`: every
/// file under a temporary name, synced, checked and renamed, `meta.json` last, all under the
/// directory's writer lock. The public entry, [`crate::remote::pull`] (`transfer.rs`),
/// documents it; a collection's URL goes to `collection/pull.rs` instead.
///
/// # Errors
/// As [`crate::remote::pull`] says of a dataset; [`Error::InvalidConfig`] for a `local` that is
/// a collection's root.
pub(crate) fn pull(
    url: &str,
    local: impl AsRef<Path>,
    options: &TransferOptions,
) -> Result<TransferReport> {
    pull_with(url, local, options, true)
}

/// [`pull`] of a collection's part into `<root>/parts/<id>`: a writer holding the part's
/// directory is [`Error::WriterBusy`] at once, never waited for.
pub(crate) fn pull_part(
    url: &str,
    local: impl AsRef<Path>,
    options: &TransferOptions,
) -> Result<TransferReport> {
    pull_with(url, local, options, false)
}

fn pull_with(
    url: &str,
    local: impl AsRef<Path>,
    options: &TransferOptions,
    wait: bool,
) -> Result<TransferReport> {
    options.check()?;
    let dir = local.as_ref().to_path_buf();
    let store = Store::open(url, &options.store)?;
    if crate::store::collection::is_collection(&dir) {
        return Err(Error::InvalidConfig {
            reason: format!(
                "{} is a collection and {} a dataset: pull it into a new directory",
                dir.display(),
                store.url()
            ),
        });
    }
    std::fs::create_dir_all(dir.join("chunk")).map_err(|e| Error::io(&dir, "mkdir", e))?;
    let _lock = lock_dir(&dir, wait)?;
    remove_leftovers(&dir);
    remove_leftovers(&dir.join("chunk"));
    let s = Arc::clone(&store);
    let (slot, bytes) = block_on(async move { latest(&s).await })??
        .ok_or_else(|| super::collection::probe::no_commit(&store))?;
    let (manifest, meta) = Manifest::decode(&store.object_url(&slot_key(slot)), &bytes)?;
    let meta_path = crate::format::layout::meta(&dir);
    let mut committed = false;
    if let Ok((_, local_meta)) = read_meta(&dir) {
        committed = local_meta.generation == meta.generation
            && std::fs::read(&meta_path).ok().as_deref() == Some(manifest.meta.as_bytes());
        if !committed {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "{} already holds a dataset (generation {}); pull into a new directory",
                    dir.display(),
                    local_meta.generation
                ),
            });
        }
    }
    let mut objects = Vec::with_capacity(manifest.objects.len());
    for o in &manifest.objects {
        objects.push((entry_path(&store, &dir, o)?, o.clone()));
    }
    let part = options.part_size;
    let s = Arc::clone(&store);
    let concurrency = options.concurrency;
    let results: Vec<(bool, u64)> = block_on(async move {
        futures::stream::iter(objects)
            .map(|(path, o)| download(Arc::clone(&s), path, o, part))
            .buffer_unordered(concurrency)
            .try_collect::<Vec<_>>()
            .await
    })??;
    let count = |done: bool| super::push::tally(&results, done);
    let transferred = count(true);
    crate::io::fs::sync_dir(&dir.join("chunk"))?;
    if !committed {
        let tmp = temp_path(&meta_path);
        let f = crate::io::fs::create_new(&tmp)?;
        crate::io::fs::write_all_at(&f, &tmp, manifest.meta.as_bytes(), 0)?;
        crate::io::fs::sync_data(&f, &tmp)?;
        std::fs::rename(&tmp, &meta_path).map_err(|e| Error::io(&meta_path, "rename", e))?;
    }
    crate::io::fs::sync_dir(&dir)?;
    Ok(TransferReport {
        url: store.url().to_string(),
        generation: meta.generation,
        slot,
        transferred,
        skipped: count(false),
        already_done: committed && transferred.0 == 0,
        parts: None,
    })
}

/// Puts object `o` at `path` unless the file there checks; returns (downloaded, size). The
/// file work runs on a blocking thread, off the object-store runtime.
async fn download(
    store: Arc<Store>,
    path: PathBuf,
    o: ObjectEntry,
    part: usize,
) -> Result<(bool, u64)> {
    let (p, e) = (path.clone(), o.clone());
    if off_runtime(move || check_file(&p, &e, part)).await? == Check::Good {
        return Ok((false, o.size));
    }
    let tmp = temp_path(&path);
    let file = Arc::new(crate::io::fs::create_new(&tmp)?);
    let written = async {
        let mut crc = 0u32;
        let mut offset = 0u64;
        while offset < o.size {
            let len = (o.size - offset).min(part as u64);
            let end = offset.saturating_add(len);
            let bytes = store.get_range(&o.object, offset..end).await?;
            crc = crc32c_append(crc, &bytes);
            let (f, t) = (Arc::clone(&file), tmp.clone());
            off_runtime(move || crate::io::fs::write_all_at(&f, &t, &bytes, offset)).await?;
            offset = end;
        }
        if crc != o.crc32c {
            return Err(Error::RemoteCorrupt {
                object: store.object_url(&o.object),
                reason: format!(
                    "its bytes have checksum {crc:#010x}, the manifest records {:#010x}",
                    o.crc32c
                ),
            });
        }
        // Checked again as the disk has it, then renamed into place.
        let (f, t, p, e) = (Arc::clone(&file), tmp.clone(), path.clone(), o.clone());
        off_runtime(move || {
            crate::io::fs::sync_data(&f, &t)?;
            if let Check::Bad(why) = check_file(&t, &e, part)? {
                return Err(Error::io(
                    &t,
                    "read back",
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("the downloaded file does not read back as written: {why}"),
                    ),
                ));
            }
            std::fs::rename(&t, &p).map_err(|e| Error::io(&p, "rename", e))
        })
        .await
    }
    .await;
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    Ok((true, o.size))
}
