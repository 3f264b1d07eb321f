//! The commit protocol (see `docs/FORMAT.md`):
//!
//! 1. Record bytes are appended past the committed chunk sizes (buffered, written with checked
//!    full-length `pwrite`s) by the append tasks.
//! 2. At commit: every queued job is finished, each task writes out its buffer and `fdatasync`s
//!    its open chunk (in parallel), every chunk sealed since the last commit is `fdatasync`ed,
//!    and the chunk directory is `fsync`ed if a chunk file was created.
//! 3. New offset entries are appended past the committed table length; replaced entries
//!    (modify, delete, appends below the table length) are appended to the patch log. Both are
//!    `fdatasync`ed. A table that has gathered too many patches is rewritten as a new table
//!    generation in new files instead; committed bytes are never overwritten.
//! 4. `meta.json.tmp` is written and `fsync`ed, renamed over `meta.json`, and the directory is
//!    `fsync`ed. Only then does `commit` return.
//! 5. Files the new meta no longer names are removed; open snapshots keep reading the ones they
//!    hold open through their descriptors and mappings (`store/read/chunks.rs`).

use super::book::Shared;
use super::tables::{open_field, Core, WriterField};
use super::task::{Msg, Synced};
use super::wait::wait;
use super::Writer;
use crate::error::{Error, Result};
use crate::format::entry::{encode_patch, ENTRY_BYTES, PATCH_BYTES};
use crate::format::layout;
use crate::format::meta::{ChunkMeta, TableMeta};
use crate::io::vfs::{self, Vfs};
use crate::store::snapshot::load_dictionary;
use futures::channel::oneshot;
use std::path::Path;
use std::sync::Mutex;

impl Writer {
    /// [`Writer::commit`]: steps 1-2 on the append tasks, then the rest on this thread.
    pub(super) fn commit_blocking(&mut self) -> Result<u64> {
        wait(async {
            self.ready().await?;
            self.finish_jobs().await?;
            self.ask_tasks(|tx: oneshot::Sender<Synced>| Msg::Sync(tx))
                .await
        })
        .and_then(|sizes| {
            let r = Writer::commit_tail(&self.core, &self.shared, self.len);
            let generation = self.poison_on(r)?;
            self.generation = generation;
            self.resync(sizes);
            Ok(generation)
        })
    }

    /// [`Writer::commit_async`]: steps 1-2 on the append tasks, the rest on a thread of its own.
    pub(super) async fn commit_on_thread(&mut self) -> Result<u64> {
        self.ready().await?;
        self.finish_jobs().await?;
        let sizes = self
            .ask_tasks(|tx: oneshot::Sender<Synced>| Msg::Sync(tx))
            .await?;
        let (tx, rx) = oneshot::channel();
        let core = self.core.clone();
        let shared = self.shared.clone();
        let len = self.len;
        let spawned = std::thread::Builder::new()
            .name("zrecord-commit".to_string())
            .spawn(move || {
                let r = Writer::commit_tail(&core, &shared, len);
                // The writer may be dropped as soon as the answer arrives: let go of the lock
                // and the table descriptors first.
                drop(core);
                drop(shared);
                let _ = tx.send(r);
            });
        if let Err(e) = spawned {
            let r = Err(Error::io(&self.shared.dir, "spawn a commit thread", e));
            return self.poison_on(r);
        }
        self.committing = Some(rx);
        self.reclaim_commit().await?;
        self.resync(sizes);
        Ok(self.generation)
    }

    /// Takes the outcome of a commit finishing on its own thread, if one is running.
    pub(super) async fn reclaim_commit(&mut self) -> Result<()> {
        let Some(rx) = self.committing.as_mut() else {
            return Ok(());
        };
        let r = rx.await.unwrap_or_else(|_| {
            Err(Error::Poisoned {
                cause: "a commit thread stopped without an answer".to_string(),
            })
        });
        self.committing = None;
        match self.poison_on(r) {
            Ok(generation) => {
                self.generation = generation;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// The part of a commit after every task has synced: sealed chunks, tables, `meta.json`.
    fn commit_tail(core: &Mutex<Core>, shared: &Shared, len: u64) -> Result<u64> {
        let mut core = core.lock().unwrap_or_else(|e| e.into_inner());
        sync_sealed(shared)?;
        core.commit_tables(shared, len)
    }

    /// True if there are changes since the last commit (after every job is finished).
    pub(super) fn has_pending(&self) -> bool {
        let core = self.core();
        let book = self.shared.book();
        self.len != core.meta.len
            || core.attributes != core.meta.attributes
            || core
                .fields
                .iter()
                .any(|f| !f.appended.is_empty() || !f.pending.is_empty())
            || core.meta.chunks.len() != book.sizes.len()
            || core
                .meta
                .chunks
                .iter()
                .any(|c| book.sizes.get(&c.id) != Some(&c.size))
    }
}

/// Commit step 2 for the chunks sealed since the last commit, and the chunk directory.
pub(super) fn sync_sealed(shared: &Shared) -> Result<()> {
    let (sealed, created) = {
        let mut book = shared.book();
        (
            std::mem::take(&mut book.sealed),
            std::mem::replace(&mut book.created_chunk_file, false),
        )
    };
    for path in &sealed {
        shared.vfs.open_read(path)?.sync_data()?;
    }
    if created {
        shared.vfs.sync_dir(&layout::chunk_dir(&shared.dir))?;
    }
    Ok(())
}

impl Core {
    /// Commit steps 3-5, once every chunk is durable: offset data, then `meta.json`.
    fn commit_tables(&mut self, shared: &Shared, len: u64) -> Result<u64> {
        let mut tables = Vec::with_capacity(self.fields.len());
        let mut new_files = false;
        for wf in &mut self.fields {
            let t = wf.table();
            let patches = wf.committed.patches.len() as u64;
            let needs_compaction = self.force_compaction
                || patches > (64 * 1024).max(t.table_len / 4)
                || t.table_len > 2 * len + 64 * 1024;
            let table = if needs_compaction {
                new_files = true;
                compact(&*self.vfs, &self.dir, wf, len)?
            } else {
                append_entries(wf)?
            };
            tables.push(table);
        }
        if new_files {
            self.vfs.sync_dir(&self.dir)?;
        }
        self.force_compaction = false;
        self.publish(shared, &tables, len)
    }

    /// Commit steps 4-5, once chunks and tables are durable: the `meta.json` rename naming
    /// `tables` and the book's chunk list, then adopting it and removing the table files it no
    /// longer names.
    pub(super) fn publish(
        &mut self,
        shared: &Shared,
        tables: &[TableMeta],
        len: u64,
    ) -> Result<u64> {
        // 4. The commit point.
        let mut meta = self.meta.clone();
        meta.generation = meta
            .generation
            .checked_add(1)
            .ok_or(Error::TooManyCommits {
                generation: meta.generation,
            })?;
        meta.len = len;
        meta.chunks = shared
            .book()
            .sizes
            .iter()
            .map(|(&id, &size)| ChunkMeta { id, size })
            .collect();
        for (fm, t) in meta.fields.iter_mut().zip(tables) {
            fm.table = *t;
        }
        meta.attributes.clone_from(&self.attributes);
        // The lowest version that holds it: a dataset without zstd or attributes stays
        // version 1.
        meta.version = meta.required_version();
        vfs::replace_atomically(
            &*self.vfs,
            &self.dir,
            &self.dir.join(layout::META_TMP),
            &layout::meta(&self.dir),
            &meta.encode(),
        )?;
        // 5. Adopt the new commit; drop files it no longer names.
        let mut stale = Vec::new();
        for (wf, fm) in self.fields.iter_mut().zip(&meta.fields) {
            let old = wf.table();
            if old.generation != fm.table.generation {
                stale.push(layout::table(&self.dir, &fm.name, old.generation));
                stale.push(layout::patches(&self.dir, &fm.name, old.generation));
                let fresh = open_field(&*self.vfs, &self.dir, fm)?;
                *wf = fresh;
            } else {
                let map = wf
                    .table_file
                    .map_prefix(fm.table.table_len * ENTRY_BYTES as u64)?;
                map.advise_random();
                wf.committed.map = map;
                // Dictionaries this writer trained since the field was loaded: the committed
                // table names them now (a rebalance decodes records with them).
                if wf.committed.dictionaries.len() != fm.dictionaries.len() {
                    wf.committed.dictionaries = fm
                        .dictionaries
                        .iter()
                        .map(|d| load_dictionary(&*self.vfs, &self.dir, fm, d))
                        .collect::<Result<Vec<_>>>()?;
                }
                wf.committed.meta = fm.clone();
                wf.appended.clear();
                wf.pending.clear();
            }
        }
        for p in stale {
            if let Err(e) = self.vfs.remove_file(&p) {
                tracing::warn!(path = %p.display(), error = %e, "could not remove a table file the new commit no longer uses");
            }
        }
        self.meta = meta;
        Ok(self.meta.generation)
    }
}

/// Appends a field's new entries and patches past their committed lengths and syncs them.
fn append_entries(wf: &mut WriterField) -> Result<TableMeta> {
    let mut t = wf.table();
    if !wf.appended.is_empty() {
        let mut buf = Vec::with_capacity(wf.appended.len() * ENTRY_BYTES);
        for (k, e) in wf.appended.iter().enumerate() {
            buf.extend_from_slice(&e.encode(t.table_len + k as u64));
        }
        wf.table_file
            .write_all_at(&buf, t.table_len * ENTRY_BYTES as u64)?;
        wf.table_file.sync_data()?;
        t.table_len += wf.appended.len() as u64;
    }
    if !wf.pending.is_empty() {
        let mut buf = Vec::with_capacity(wf.pending.len() * PATCH_BYTES);
        for (index, e) in &wf.pending {
            buf.extend_from_slice(&encode_patch(*index, e));
        }
        wf.patch_file
            .write_all_at(&buf, t.patch_len * PATCH_BYTES as u64)?;
        wf.patch_file.sync_data()?;
        t.patch_len += wf.pending.len() as u64;
    }
    Ok(t)
}

/// Writes a field's `len` live entries as a new table generation with an empty patch log.
fn compact(vfs: &dyn Vfs, dir: &Path, wf: &WriterField, len: u64) -> Result<TableMeta> {
    let generation = wf
        .table()
        .generation
        .checked_add(1)
        .ok_or(Error::TooManyCommits {
            generation: wf.table().generation,
        })?;
    let name = &wf.committed.meta.name;
    let tpath = layout::table(dir, name, generation);
    let ppath = layout::patches(dir, name, generation);
    for p in [&tpath, &ppath] {
        // A leftover of a crashed compaction is not named by any commit.
        if vfs.exists(p)? {
            vfs.remove_file(p)?;
        }
    }
    let tfile = vfs.create_new(&tpath)?;
    let pfile = vfs.create_new(&ppath)?;
    const BLOCK: u64 = 16 * 1024;
    let mut buf = Vec::with_capacity(BLOCK as usize * ENTRY_BYTES);
    let mut start = 0u64;
    while start < len {
        buf.clear();
        let end = (start + BLOCK).min(len);
        for i in start..end {
            buf.extend_from_slice(&wf.entry(i)?.encode(i));
        }
        tfile.write_all_at(&buf, start * ENTRY_BYTES as u64)?;
        start = end;
    }
    tfile.sync_data()?;
    pfile.sync_data()?;
    Ok(TableMeta {
        generation,
        table_len: len,
        patch_len: 0,
    })
}
