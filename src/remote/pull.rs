//! Fetching a dataset from an object store into a local directory.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};

use super::manifest::{slot_key, Manifest, ObjectEntry, COMMITS};
use super::push::{crc_of, latest, TransferOptions, TransferReport};
use super::store::{block_on, Store};
use crate::checksum::crc32c_append;
use crate::error::{Error, Result};
use crate::store::snapshot::read_meta;

/// Fetches the latest commit of the dataset at `url` into the local directory `local`, which
/// becomes an ordinary local dataset.
///
/// Every file is downloaded next to its final name, checked against the size and CRC32C its
/// manifest records, synced and renamed into place; `meta.json` comes last, so an interrupted
/// pull leaves no dataset, and running it again skips the files already in place and checked.
///
/// # Errors
/// [`Error::NotADataset`] if `url` holds no commit; [`Error::RemoteCorrupt`] for an object that
/// does not match its manifest; [`Error::InvalidConfig`] if `local` holds another dataset;
/// [`Error::Remote`] for a request that failed after its retries.
pub fn pull(
    url: &str,
    local: impl AsRef<Path>,
    options: &TransferOptions,
) -> Result<TransferReport> {
    options.check()?;
    let dir = local.as_ref().to_path_buf();
    let store = Store::open(url, &options.store)?;
    let s = Arc::clone(&store);
    let (slot, bytes) =
        block_on(async move { latest(&s).await })??.ok_or_else(|| Error::NotADataset {
            path: PathBuf::from(url),
            reason: format!("no commit under {}", store.object_url(COMMITS)),
        })?;
    let (manifest, meta) = Manifest::decode(&store.object_url(&slot_key(slot)), &bytes)?;
    let meta_path = crate::store::layout::meta(&dir);
    if let Ok((_, local_meta)) = read_meta(&dir) {
        if local_meta.generation == meta.generation
            && std::fs::read(&meta_path).ok().as_deref() == Some(manifest.meta.as_bytes())
        {
            let n = manifest.objects.len() as u64;
            let b = manifest.objects.iter().map(|o| o.size).sum();
            return Ok(TransferReport {
                url: store.url().to_string(),
                generation: meta.generation,
                slot,
                transferred: (0, 0),
                skipped: (n, b),
                already_done: true,
            });
        }
        return Err(Error::InvalidConfig {
            reason: format!(
                "{} already holds a dataset (generation {}); pull into a new directory",
                dir.display(),
                local_meta.generation
            ),
        });
    }
    std::fs::create_dir_all(dir.join("chunk")).map_err(|e| Error::io(&dir, "mkdir", e))?;
    let part = options.part_size;
    let s = Arc::clone(&store);
    let d = dir.clone();
    let objects = manifest.objects.clone();
    let concurrency = options.concurrency;
    let results: Vec<(bool, u64)> = block_on(async move {
        futures::stream::iter(objects)
            .map(|o| download(Arc::clone(&s), d.clone(), o, part))
            .buffer_unordered(concurrency)
            .try_collect::<Vec<_>>()
            .await
    })??;
    crate::io::fs::sync_dir(&dir.join("chunk"))?;
    let tmp = dir.join("meta.json.pull");
    std::fs::write(&tmp, manifest.meta.as_bytes()).map_err(|e| Error::io(&tmp, "write", e))?;
    let f = crate::io::fs::open_read(&tmp)?;
    crate::io::fs::sync_data(&f, &tmp)?;
    std::fs::rename(&tmp, &meta_path).map_err(|e| Error::io(&meta_path, "rename", e))?;
    crate::io::fs::sync_dir(&dir)?;
    let count = |done: bool| {
        results
            .iter()
            .filter(|(t, _)| *t == done)
            .fold((0u64, 0u64), |(n, b), (_, size)| {
                (n.saturating_add(1), b.saturating_add(*size))
            })
    };
    Ok(TransferReport {
        url: store.url().to_string(),
        generation: meta.generation,
        slot,
        transferred: count(true),
        skipped: count(false),
        already_done: false,
    })
}

/// Downloads one object into `dir` unless the file is there and checks; returns (downloaded,
/// size).
async fn download(
    store: Arc<Store>,
    dir: PathBuf,
    o: ObjectEntry,
    part: usize,
) -> Result<(bool, u64)> {
    let path = dir.join(&o.file);
    let corrupt = |reason: String| Error::RemoteCorrupt {
        object: store.object_url(&o.object),
        reason,
    };
    if let Ok(f) = File::open(&path) {
        let len = crate::io::fs::file_len(&f, &path)?;
        if len == o.size && crc_of(&f, &path, len, part)? == o.crc32c {
            return Ok((false, o.size));
        }
    }
    let tmp = PathBuf::from(format!("{}.pull", path.display()));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&tmp)
        .map_err(|e| Error::io(&tmp, "create", e))?;
    let mut crc = 0u32;
    let mut offset = 0u64;
    while offset < o.size {
        let len = (o.size - offset).min(part as u64);
        let end = offset.saturating_add(len);
        let bytes = store.get_range(&o.object, offset..end).await?;
        crc = crc32c_append(crc, &bytes);
        crate::io::fs::write_all_at(&file, &tmp, &bytes, offset)?;
        offset = end;
    }
    if crc != o.crc32c {
        let _ = std::fs::remove_file(&tmp);
        return Err(corrupt(format!(
            "its bytes have checksum {crc:#010x}, the manifest records {:#010x}",
            o.crc32c
        )));
    }
    crate::io::fs::sync_data(&file, &tmp)?;
    std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, "rename", e))?;
    Ok((true, o.size))
}
