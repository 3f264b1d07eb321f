//! Creating a dataset and opening its writer: the empty dataset built aside and renamed into
//! place, then the lock, the last commit read and recovered from (`recover.rs`), the offset
//! tables loaded, and one append task started per `num_writers`.

#![deny(clippy::arithmetic_side_effects)]

use super::appender::Appender;
use super::book::{Book, Shared};
use super::config::WriterConfig;
use super::placement::NextFit;
use super::recover::clean_orphans;
use super::tables::{open_field, Core};
use super::task::{Job, TaskHandle};
use super::Writer;
use crate::error::{Error, Result};
use crate::format::layout;
use crate::format::meta::{FieldMeta, Meta, TableMeta};
use crate::format::MAX_CHUNKS;
use crate::io::vfs::{self, Vfs, VfsLock};
use crate::store::schema::Schema;
use crate::store::snapshot::read_meta_with;
use futures::channel::mpsc;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// [`Writer::create_with_vfs`].
pub(super) fn create(
    vfs: Arc<dyn Vfs>,
    path: &Path,
    schema: &Schema,
    config: WriterConfig,
) -> Result<Writer> {
    schema.validate()?;
    config.validate()?;
    let exists = || Error::AlreadyExists {
        path: path.to_path_buf(),
    };
    match vfs.read_dir(path) {
        Ok(names) if names.is_empty() => {}
        Ok(_) => return Err(exists()),
        Err(e) => {
            if vfs.exists(path)? {
                // It exists but cannot be listed: not a directory, or an I/O failure.
                return Err(match e {
                    Error::Io { ref source, .. }
                        if source.raw_os_error() == Some(libc::ENOTDIR) =>
                    {
                        exists()
                    }
                    e => e,
                });
            }
        }
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    // A name no other create uses, in this process or another (two creates of one path never
    // build in, or remove, each other's directory).
    let tmp = parent.join(format!(
        ".{name}{}{}-{:016x}",
        layout::CREATE_INFIX,
        std::process::id(),
        crate::store::collection::unique_word()
    ));
    // A committed part of a collection is never replaced: refused before anything is built.
    crate::store::collection::immutable::refuse_committed_part(path)?;
    // The writer lock is taken in the new directory before anything else is written there, and
    // goes with it through the rename: the dataset is held from its first byte to the writer's
    // drop (a collection's `gc` keeps what a writer holds under `parts/`).
    let locked = vfs
        .create_dir_all(&tmp)
        .and_then(|()| vfs.lock(&tmp.join(layout::LOCK)));
    let lock = match locked {
        Ok(lock) => lock,
        Err(e) => {
            let _ = vfs.remove_dir_all(&tmp);
            return Err(e);
        }
    };
    let built = build_empty(&*vfs, &tmp, schema);
    if let Err(e) = built {
        drop(lock);
        let _ = vfs.remove_dir_all(&tmp);
        return Err(e);
    }
    // rename(2) replaces an empty directory atomically.
    if let Err(e) = vfs.rename(&tmp, path) {
        drop(lock);
        let _ = vfs.remove_dir_all(&tmp);
        return Err(e);
    }
    vfs.sync_dir(&parent)?;
    open_locked(vfs, path, config, lock)
}

/// [`Writer::open_with_vfs`].
pub(super) fn open(vfs: Arc<dyn Vfs>, path: &Path, config: WriterConfig) -> Result<Writer> {
    config.validate()?;
    let dir = path.to_path_buf();
    // Not a dataset: say so before the lock file is created, so nothing is left behind.
    if !vfs.exists(&layout::meta(&dir))? {
        return Err(Error::NotADataset {
            reason: match vfs.exists(&dir)? {
                true => "it holds no meta.json".to_string(),
                false => "no such directory".to_string(),
            },
            path: dir,
        });
    }
    let lock = vfs.lock(&dir.join(layout::LOCK))?;
    open_locked(vfs, path, config, lock)
}

/// [`open`] with the dataset's writer lock held already (`lock`).
fn open_locked(
    vfs: Arc<dyn Vfs>,
    path: &Path,
    config: WriterConfig,
    lock: Box<dyn VfsLock>,
) -> Result<Writer> {
    let dir = path.to_path_buf();
    // A part a collection's manifest names is immutable: refused before anything changes.
    crate::store::collection::immutable::refuse_committed_part(&dir)?;
    let (_, meta) = read_meta_with(&*vfs, &dir)?;
    clean_orphans(&*vfs, &dir, &meta)?;
    let mut fields = Vec::with_capacity(meta.fields.len());
    for f in &meta.fields {
        fields.push(open_field(&*vfs, &dir, f)?);
    }
    let sizes: BTreeMap<u16, u64> = meta.chunks.iter().map(|c| (c.id, c.size)).collect();
    for c in &meta.chunks {
        let p = layout::chunk(&dir, c.id);
        let have = vfs.open_read(&p)?.len()?;
        if have < c.size {
            return Err(Error::Truncated {
                path: p,
                expected: c.size,
                actual: have,
            });
        }
    }
    // Committed chunks with room, newest ids first: each task continues one before it takes
    // a fresh id, so reopening does not leave a partly filled chunk per task every time.
    let limit = meta.chunk_size_bytes;
    let reusable: Vec<(u16, u64)> = sizes
        .iter()
        .rev()
        .filter(|&(_, &s)| s < limit)
        .map(|(&id, &s)| (id, s))
        .take(config.num_writers)
        .collect();
    let shared = Arc::new(Shared {
        vfs: vfs.clone(),
        dir: dir.clone(),
        chunk_size_bytes: limit,
        write_buffer_bytes: config.write_buffer_bytes,
        book: Mutex::new(Book::new(sizes)),
    });
    let (done_tx, done_rx) = mpsc::unbounded();
    let mut tasks = Vec::with_capacity(config.num_writers);
    let n = config.num_writers;
    let mut projections = vec![NextFit::new(limit, None); n];
    for (k, p) in projections.iter_mut().enumerate() {
        let appender = match reusable.get(k) {
            Some(&(id, size)) => {
                *p = NextFit::new(limit, Some(size));
                Appender::resuming(shared.clone(), k as u32, n as u32, id, size)
            }
            None => Appender::new(shared.clone(), k as u32, n as u32),
        };
        tasks.push(TaskHandle::spawn(
            k,
            appender,
            config.deflate_level,
            config.queue_depth,
            done_tx.clone(),
        )?);
    }
    // Each `zstd_dict` field's newest dictionary: the one its next records are compressed with.
    let dictionaries = meta
        .fields
        .iter()
        .map(|f| {
            f.dictionaries
                .iter()
                .max_by_key(|d| d.number)
                .map(|d| crate::store::snapshot::load_dictionary(&*vfs, &dir, f, d))
                .transpose()
        })
        .collect::<Result<Vec<_>>>()?
        .into();
    let free_ids = u64::from(MAX_CHUNKS).saturating_sub(meta.chunks.len() as u64);
    Ok(Writer {
        len: meta.len,
        generation: meta.generation,
        process: crate::io::fork::generation(),
        field_metas: meta.fields.clone(),
        core: Arc::new(Mutex::new(Core {
            vfs,
            dir,
            _lock: lock,
            attributes: meta.attributes.clone(),
            meta,
            fields,
            force_compaction: false,
        })),
        shared,
        config,
        poisoned: None,
        tasks,
        done_rx,
        open: Job::default(),
        samples: Vec::new(),
        dictionaries,
        open_task: 0,
        outbox: VecDeque::new(),
        next_ticket: 0,
        in_flight: 0,
        ops: VecDeque::new(),
        answered: HashMap::new(),
        spare: Vec::new(),
        projections,
        projected_new: 0,
        free_ids,
        committing: None,
    })
}

/// Builds a committed empty dataset in `dir` (which must not exist).
fn build_empty(vfs: &dyn Vfs, dir: &Path, schema: &Schema) -> Result<()> {
    vfs.create_dir_all(&layout::chunk_dir(dir))?;
    let mut fields = Vec::with_capacity(schema.fields.len());
    for f in &schema.fields {
        for p in [
            layout::table(dir, &f.name, 0),
            layout::patches(dir, &f.name, 0),
        ] {
            vfs.create_new(&p)?.sync_data()?;
        }
        fields.push(FieldMeta {
            name: f.name.clone(),
            dtype: f.dtype,
            shape: f.shape.clone(),
            codec: f.codec,
            table: TableMeta {
                generation: 0,
                table_len: 0,
                patch_len: 0,
            },
            dictionaries: Vec::new(),
        });
    }
    // Created (and held) by `create` before the rest.
    let lock = dir.join(layout::LOCK);
    if !vfs.exists(&lock)? {
        vfs.create_new(&lock)?;
    }
    let mut meta = Meta {
        format: "zrecord".to_string(),
        version: 1,
        generation: 0,
        len: 0,
        chunk_size_bytes: schema.chunk_size_bytes,
        fields,
        chunks: Vec::new(),
        attributes: Default::default(),
    };
    meta.version = meta.required_version();
    vfs.sync_dir(&layout::chunk_dir(dir))?;
    vfs::replace_atomically(
        vfs,
        dir,
        &dir.join(layout::META_TMP),
        &layout::meta(dir),
        &meta.encode(),
    )
}
