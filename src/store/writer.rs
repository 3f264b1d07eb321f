//! The single writer of a dataset: append, modify, delete (swap-remove) and the crash-safe
//! commit.
//!
//! Commit protocol (see `docs/FORMAT.md`):
//!
//! 1. Record bytes are appended past the committed chunk sizes (buffered, written with checked
//!    full-length `pwrite`s).
//! 2. At commit: flush, `fdatasync` every chunk written since the last commit, `fsync` the chunk
//!    directory if a chunk file was created.
//! 3. New offset entries are appended past the committed table length; replaced entries
//!    (modify, delete, appends below the table length) are appended to the patch log. Both are
//!    `fdatasync`ed. A table that has gathered too many patches is rewritten as a new table
//!    generation in new files instead; committed bytes are never overwritten.
//! 4. `meta.json.tmp` is written and `fsync`ed, renamed over `meta.json`, and the directory is
//!    `fsync`ed. Only then does `commit` return.
//! 5. Files the new meta no longer names are removed; open snapshots keep reading them through
//!    their descriptors and mappings.
//!
//! Any I/O failure while writing poisons the writer: every later call returns
//! [`Error::Poisoned`], and reopening recovers the last commit.

use crate::error::{Error, Result};
use crate::format::codec::Deflater;
use crate::format::dtype::Codec;
use crate::format::entry::{encode_patch, Entry, ENTRY_BYTES, PATCH_BYTES};
use crate::format::meta::{ChunkMeta, FieldMeta, Meta, TableMeta};
use crate::format::{FORMAT_VERSION, MAX_CHUNKS, MAX_CHUNK_BYTES};
use crate::io::{fs, mmap::Mapping};
use crate::store::layout;
use crate::store::schema::{check_record, Schema};
use crate::store::snapshot::{read_meta, FieldTable};
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

/// Options of a [`Writer`].
#[derive(Clone, Debug)]
pub struct WriterConfig {
    /// Deflate level for fields whose codec is `deflate`: 1 (fastest) to 12 (smallest).
    /// Default 6.
    pub deflate_level: i32,
    /// Record bytes are buffered per chunk and written in pieces of about this size.
    /// Default 4 MiB.
    pub write_buffer_bytes: usize,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            deflate_level: 6,
            write_buffer_bytes: 4 << 20,
        }
    }
}

/// A chunk being appended to.
#[derive(Debug)]
struct ActiveChunk {
    id: u16,
    path: PathBuf,
    file: File,
    /// Size including buffered bytes.
    size: u64,
    /// Bytes not yet written, starting at `size - buf.len()`.
    buf: Vec<u8>,
}

/// A field's offset table as the writer sees it: the committed table plus pending changes.
#[derive(Debug)]
struct WriterField {
    /// Committed table; its `patches` also holds the pending patches.
    committed: FieldTable,
    table_file: File,
    patch_file: File,
    /// Entries for indices `table_len..`, not yet written to the table file.
    appended: Vec<Entry>,
    /// Patches not yet written to the patch log, in order.
    pending: Vec<(u64, Entry)>,
}

impl WriterField {
    fn table(&self) -> TableMeta {
        self.committed.meta.table
    }

    fn entry(&self, index: u64) -> Result<Entry> {
        let t = self.table();
        if index < t.table_len {
            return self.committed.entry(index);
        }
        usize::try_from(index - t.table_len)
            .ok()
            .and_then(|k| self.appended.get(k).copied())
            .ok_or_else(|| {
                self.committed
                    .corrupt(index, "no entry for this index".to_string())
            })
    }

    fn set(&mut self, index: u64, e: Entry) {
        let t = self.table();
        if index < t.table_len {
            self.committed.patches.insert(index, e);
            self.pending.push((index, e));
            return;
        }
        let k = usize::try_from(index - t.table_len).unwrap_or(usize::MAX);
        match self.appended.get_mut(k) {
            Some(slot) => *slot = e,
            None => self.appended.push(e),
        }
    }
}

/// The one writer of a dataset. Holds an exclusive lock on `writer.lock` for its lifetime.
///
/// Changes are invisible to readers, and lost if the process dies, until [`Writer::commit`]
/// returns. Not `Sync`: one thread drives it at a time.
#[derive(Debug)]
pub struct Writer {
    dir: PathBuf,
    _lock: File,
    config: WriterConfig,
    meta: Meta,
    fields: Vec<WriterField>,
    len: u64,
    /// Working chunk sizes: committed sizes plus bytes appended since.
    chunks: BTreeMap<u16, u64>,
    active: Option<ActiveChunk>,
    /// Chunks sealed since the last commit, still to be synced. Their descriptors are closed at
    /// sealing (a writer may seal thousands of chunks between commits); commit reopens each to
    /// `fdatasync` it, which flushes the file's dirty pages whichever descriptor wrote them, and
    /// since Linux 4.16 reports a writeback error no descriptor has seen yet.
    sealed: Vec<PathBuf>,
    created_chunk_file: bool,
    /// Where the search for a free chunk id starts.
    next_chunk_hint: u32,
    deflater: Deflater,
    poisoned: Option<String>,
}

impl Writer {
    /// Creates a dataset at `path` and opens its writer. `path` must not exist or must be an
    /// empty directory. The empty dataset is committed (generation 0) before this returns: it is
    /// built in a sibling directory and renamed into place, so a crash leaves either nothing or
    /// a complete empty dataset.
    pub fn create(path: impl AsRef<Path>, schema: &Schema, config: WriterConfig) -> Result<Writer> {
        let path = path.as_ref();
        schema.validate()?;
        if let Ok(mut rd) = std::fs::read_dir(path) {
            if rd.next().is_some() {
                return Err(Error::AlreadyExists {
                    path: path.to_path_buf(),
                });
            }
        } else if path.exists() {
            return Err(Error::AlreadyExists {
                path: path.to_path_buf(),
            });
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let tmp = parent.join(format!(".{name}.zrecord-create-{}", std::process::id()));
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(|e| Error::io(&tmp, "remove stale", e))?;
        }
        let built = build_empty(&tmp, schema);
        if let Err(e) = built {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
        // rename(2) replaces an empty directory atomically.
        if let Err(e) = std::fs::rename(&tmp, path) {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(Error::io(path, "rename", e));
        }
        fs::sync_dir(&parent)?;
        Writer::open(path, config)
    }

    /// Opens the writer of an existing dataset at its latest commit, cleaning what a crash left
    /// behind: a stale `meta.json.tmp`, files no commit names, and bytes past committed sizes.
    pub fn open(path: impl AsRef<Path>, config: WriterConfig) -> Result<Writer> {
        let dir = path.as_ref().to_path_buf();
        let lock_path = dir.join(layout::LOCK);
        let lock = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(|e| Error::io(&lock_path, "open", e))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::WriterBusy { path: lock_path })
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(&lock_path, "lock", e)),
        }
        let (_, meta) = read_meta(&dir)?;
        clean_orphans(&dir, &meta)?;
        let mut fields = Vec::with_capacity(meta.fields.len());
        for f in &meta.fields {
            fields.push(open_field(&dir, f)?);
        }
        let chunks: BTreeMap<u16, u64> = meta.chunks.iter().map(|c| (c.id, c.size)).collect();
        for c in &meta.chunks {
            let p = layout::chunk(&dir, c.id);
            let file = fs::open_read(&p)?;
            let have = fs::file_len(&file, &p)?;
            if have < c.size {
                return Err(Error::Truncated {
                    path: p,
                    expected: c.size,
                    actual: have,
                });
            }
        }
        Ok(Writer {
            len: meta.len,
            deflater: Deflater::new(config.deflate_level),
            dir,
            _lock: lock,
            config,
            meta,
            fields,
            chunks,
            active: None,
            sealed: Vec::new(),
            created_chunk_file: false,
            next_chunk_hint: 0,
            poisoned: None,
        })
    }

    /// Number of records, including uncommitted changes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True if there are no records (including uncommitted changes).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The generation of the last commit.
    pub fn generation(&self) -> u64 {
        self.meta.generation
    }

    /// The dataset directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    fn check_poisoned(&self) -> Result<()> {
        match &self.poisoned {
            Some(cause) => Err(Error::Poisoned {
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Runs `f`; an I/O error poisons the writer (its state on disk is then unknown).
    fn guarded<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.check_poisoned()?;
        let r = f(self);
        if let Err(e @ Error::Io { .. }) = &r {
            self.poisoned = Some(e.to_string());
        }
        r
    }

    fn field_position(&self, name: &str) -> Result<usize> {
        self.meta
            .field_index(name)
            .ok_or_else(|| Error::UnknownField {
                field: name.to_string(),
            })
    }

    fn check_index(&self, index: u64) -> Result<()> {
        if index >= self.len {
            return Err(Error::IndexOutOfRange {
                index,
                len: self.len,
            });
        }
        Ok(())
    }

    /// Appends a record — one byte string per field, in schema order; an empty one is an absent
    /// field — and returns its index. Every limit is checked before any byte is written.
    pub fn append<B: AsRef<[u8]>>(&mut self, fields: &[B]) -> Result<u64> {
        self.check_poisoned()?;
        if fields.len() != self.fields.len() {
            return Err(Error::FieldCount {
                expected: self.fields.len(),
                actual: fields.len(),
            });
        }
        let positions: Vec<usize> = (0..fields.len()).collect();
        let entries = self.write_fields(&positions, fields)?;
        let index = self.len;
        for (wf, e) in self.fields.iter_mut().zip(entries) {
            wf.set(index, e);
        }
        self.len += 1;
        Ok(index)
    }

    /// Replaces one field of record `index`.
    pub fn modify(&mut self, index: u64, field: &str, data: &[u8]) -> Result<()> {
        self.check_poisoned()?;
        let f = self.field_position(field)?;
        self.check_index(index)?;
        let entries = self.write_fields(&[f], &[data])?;
        if let (Some(wf), Some(e)) = (self.fields.get_mut(f), entries.first()) {
            wf.set(index, *e);
        }
        Ok(())
    }

    /// Replaces every field of record `index`.
    pub fn modify_record<B: AsRef<[u8]>>(&mut self, index: u64, fields: &[B]) -> Result<()> {
        self.check_poisoned()?;
        if fields.len() != self.fields.len() {
            return Err(Error::FieldCount {
                expected: self.fields.len(),
                actual: fields.len(),
            });
        }
        self.check_index(index)?;
        let positions: Vec<usize> = (0..fields.len()).collect();
        let entries = self.write_fields(&positions, fields)?;
        for (wf, e) in self.fields.iter_mut().zip(entries) {
            wf.set(index, e);
        }
        Ok(())
    }

    /// Deletes record `index` by swap-remove: the last record moves into its place and the
    /// length shrinks by one. Indices of other records do not change.
    pub fn delete(&mut self, index: u64) -> Result<()> {
        self.check_poisoned()?;
        self.check_index(index)?;
        let last = self.len - 1;
        if index != last {
            let moved = self
                .fields
                .iter()
                .map(|wf| wf.entry(last))
                .collect::<Result<Vec<_>>>()?;
            for (wf, e) in self.fields.iter_mut().zip(moved) {
                wf.set(index, e);
            }
        }
        self.len = last;
        for wf in &mut self.fields {
            let t = wf.table().table_len;
            let keep = usize::try_from(self.len.saturating_sub(t)).unwrap_or(usize::MAX);
            wf.appended.truncate(keep);
        }
        Ok(())
    }

    /// Validates, encodes and appends the given fields' bytes; returns their entries.
    fn write_fields<B: AsRef<[u8]>>(
        &mut self,
        positions: &[usize],
        data: &[B],
    ) -> Result<Vec<Entry>> {
        // Check every limit before writing anything.
        for (&f, d) in positions.iter().zip(data) {
            let wf = self.fields.get(f).ok_or_else(|| Error::UnknownField {
                field: format!("#{f}"),
            })?;
            check_record(&wf.committed.meta, d.as_ref())?;
        }
        let mut encoded: Vec<(Codec, Vec<u8>, u32)> = Vec::with_capacity(data.len());
        for (&f, d) in positions.iter().zip(data) {
            let codec = self
                .fields
                .get(f)
                .map(|wf| wf.committed.meta.codec)
                .unwrap_or_default();
            let d = d.as_ref();
            let (used, bytes) = self.deflater.encode(codec, d);
            // Raw bytes are written straight from the caller's slice below.
            let owned = if used == Codec::Raw {
                Vec::new()
            } else {
                bytes.to_vec()
            };
            encoded.push((used, owned, d.len() as u32));
        }
        self.reserve_chunks(&encoded, data)?;
        self.guarded(|w| {
            let mut out = Vec::with_capacity(encoded.len());
            for ((codec, owned, logical), d) in encoded.iter().zip(data) {
                let stored: &[u8] = if *codec == Codec::Raw {
                    d.as_ref()
                } else {
                    owned
                };
                if stored.is_empty() {
                    out.push(Entry::EMPTY);
                    continue;
                }
                let (chunk, offset) = w.place(stored)?;
                out.push(Entry {
                    chunk,
                    offset,
                    physical_len: stored.len() as u32,
                    codec: *codec,
                    data_crc: crc32c::crc32c(stored),
                    logical_len: *logical,
                });
            }
            Ok(out)
        })
    }

    /// Checks that enough chunk ids are free for the chunk rollovers these records will cause.
    fn reserve_chunks<B: AsRef<[u8]>>(
        &self,
        encoded: &[(Codec, Vec<u8>, u32)],
        data: &[B],
    ) -> Result<()> {
        let limit = self.meta.chunk_size_bytes;
        let mut size = self.active.as_ref().map(|a| a.size);
        let mut new_chunks = 0u32;
        for ((codec, owned, _), d) in encoded.iter().zip(data) {
            let n = if *codec == Codec::Raw {
                d.as_ref().len()
            } else {
                owned.len()
            } as u64;
            if n == 0 {
                continue;
            }
            size = match size {
                Some(s) if s == 0 || s + n <= limit => Some(s + n),
                _ => {
                    new_chunks += 1;
                    Some(n)
                }
            };
        }
        let free = MAX_CHUNKS.saturating_sub(self.chunks.len() as u32);
        if new_chunks > free {
            return Err(Error::TooManyChunks { max: MAX_CHUNKS });
        }
        Ok(())
    }

    /// Appends stored bytes to the active chunk (rolling over when full); returns where they went.
    fn place(&mut self, stored: &[u8]) -> Result<(u16, u64)> {
        let n = stored.len() as u64;
        let limit = self.meta.chunk_size_bytes;
        let full = match &self.active {
            Some(a) => a.size > 0 && a.size + n > limit,
            None => true,
        };
        if full {
            self.roll_over()?;
        }
        let buffer_bytes = self.config.write_buffer_bytes;
        let a = self
            .active
            .as_mut()
            .ok_or(Error::TooManyChunks { max: MAX_CHUNKS })?;
        let offset = a.size;
        if offset + n > MAX_CHUNK_BYTES {
            return Err(Error::ChunkTooLarge {
                chunk: u32::from(a.id),
                size: offset + n,
                max: MAX_CHUNK_BYTES,
            });
        }
        a.buf.extend_from_slice(stored);
        a.size += n;
        if a.buf.len() >= buffer_bytes {
            flush(a)?;
        }
        self.chunks.insert(a.id, a.size);
        Ok((a.id, offset))
    }

    /// Seals the active chunk (if any) and makes a fresh one, or, on the first write after
    /// opening, continues the newest committed chunk if it has room.
    fn roll_over(&mut self) -> Result<()> {
        if let Some(mut a) = self.active.take() {
            flush(&mut a)?;
            self.sealed.push(a.path);
        } else if let Some((&id, &size)) = self.chunks.iter().next_back() {
            if size < self.meta.chunk_size_bytes {
                let path = layout::chunk(&self.dir, id);
                let file = fs::open_rw(&path)?;
                self.active = Some(ActiveChunk {
                    id,
                    path,
                    file,
                    size,
                    buf: Vec::new(),
                });
                // The caller re-checks room; if the record does not fit, roll again.
                return Ok(());
            }
        }
        // The lowest free id at or after the last one taken, wrapping: O(1) amortised.
        let id = (0..MAX_CHUNKS)
            .map(|k| (self.next_chunk_hint + k) % MAX_CHUNKS)
            .filter_map(|i| u16::try_from(i).ok())
            .find(|i| !self.chunks.contains_key(i))
            .ok_or(Error::TooManyChunks { max: MAX_CHUNKS })?;
        self.next_chunk_hint = (u32::from(id) + 1) % MAX_CHUNKS;
        let path = layout::chunk(&self.dir, id);
        let file = fs::create_new(&path)?;
        self.created_chunk_file = true;
        self.chunks.insert(id, 0);
        self.active = Some(ActiveChunk {
            id,
            path,
            file,
            size: 0,
            buf: Vec::with_capacity(self.config.write_buffer_bytes),
        });
        Ok(())
    }

    /// Makes everything appended, modified and deleted so far durable and visible to readers
    /// that open or refresh afterwards. Returns the new generation. On an I/O error the writer is
    /// poisoned, and the dataset on disk still holds the previous commit (or this one, if the
    /// failure came after the rename).
    pub fn commit(&mut self) -> Result<u64> {
        self.guarded(|w| w.commit_inner())
    }

    fn commit_inner(&mut self) -> Result<u64> {
        // 1-2. Chunk data: flush, fdatasync, and make new chunk files' names durable.
        if let Some(a) = self.active.as_mut() {
            flush(a)?;
            fs::sync_data(&a.file, &a.path)?;
        }
        for path in self.sealed.drain(..) {
            fs::sync_data(&fs::open_read(&path)?, &path)?;
        }
        if self.created_chunk_file {
            fs::sync_dir(&layout::chunk_dir(&self.dir))?;
            self.created_chunk_file = false;
        }
        // 3. Offset data.
        let mut tables = Vec::with_capacity(self.fields.len());
        let mut new_files = false;
        for wf in &mut self.fields {
            let t = wf.table();
            let patches = wf.committed.patches.len() as u64;
            let needs_compaction = patches > (64 * 1024).max(t.table_len / 4)
                || t.table_len > 2 * self.len + 64 * 1024;
            let table = if needs_compaction {
                new_files = true;
                compact(&self.dir, wf, self.len)?
            } else {
                append_entries(wf)?
            };
            tables.push(table);
        }
        if new_files {
            fs::sync_dir(&self.dir)?;
        }
        // 4. The commit point.
        let mut meta = self.meta.clone();
        meta.generation += 1;
        meta.len = self.len;
        meta.chunks = self
            .chunks
            .iter()
            .map(|(&id, &size)| ChunkMeta { id, size })
            .collect();
        for (fm, t) in meta.fields.iter_mut().zip(&tables) {
            fm.table = *t;
        }
        fs::replace_atomically(
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
                let fresh = open_field(&self.dir, fm)?;
                *wf = fresh;
            } else {
                let path = wf.committed.table_path.clone();
                let map = Mapping::new(
                    &wf.table_file,
                    &path,
                    fm.table.table_len * ENTRY_BYTES as u64,
                )?;
                map.advise_random();
                wf.committed.map = map;
                wf.committed.meta = fm.clone();
                wf.appended.clear();
                wf.pending.clear();
            }
        }
        for p in stale {
            if let Err(e) = std::fs::remove_file(&p) {
                tracing::warn!(path = %p.display(), error = %e, "could not remove a table file the new commit no longer uses");
            }
        }
        self.meta = meta;
        Ok(self.meta.generation)
    }
}

/// Writes the buffered bytes of a chunk at their offset.
fn flush(a: &mut ActiveChunk) -> Result<()> {
    if a.buf.is_empty() {
        return Ok(());
    }
    let at = a.size - a.buf.len() as u64;
    fs::write_all_at(&a.file, &a.path, &a.buf, at)?;
    a.buf.clear();
    Ok(())
}

/// Appends a field's new entries and patches past their committed lengths and syncs them.
fn append_entries(wf: &mut WriterField) -> Result<TableMeta> {
    let mut t = wf.table();
    if !wf.appended.is_empty() {
        let mut buf = Vec::with_capacity(wf.appended.len() * ENTRY_BYTES);
        for (k, e) in wf.appended.iter().enumerate() {
            buf.extend_from_slice(&e.encode(t.table_len + k as u64));
        }
        fs::write_all_at(
            &wf.table_file,
            &wf.committed.table_path,
            &buf,
            t.table_len * ENTRY_BYTES as u64,
        )?;
        fs::sync_data(&wf.table_file, &wf.committed.table_path)?;
        t.table_len += wf.appended.len() as u64;
    }
    if !wf.pending.is_empty() {
        let mut buf = Vec::with_capacity(wf.pending.len() * PATCH_BYTES);
        for (index, e) in &wf.pending {
            buf.extend_from_slice(&encode_patch(*index, e));
        }
        let path = layout::patches(
            wf.committed.table_path.parent().unwrap_or(Path::new(".")),
            &wf.committed.meta.name,
            t.generation,
        );
        fs::write_all_at(
            &wf.patch_file,
            &path,
            &buf,
            t.patch_len * PATCH_BYTES as u64,
        )?;
        fs::sync_data(&wf.patch_file, &path)?;
        t.patch_len += wf.pending.len() as u64;
    }
    Ok(t)
}

/// Writes a field's `len` live entries as a new table generation with an empty patch log.
fn compact(dir: &Path, wf: &WriterField, len: u64) -> Result<TableMeta> {
    let generation = wf.table().generation + 1;
    let name = &wf.committed.meta.name;
    let tpath = layout::table(dir, name, generation);
    let ppath = layout::patches(dir, name, generation);
    for p in [&tpath, &ppath] {
        // A leftover of a crashed compaction is not named by any commit.
        if p.exists() {
            std::fs::remove_file(p).map_err(|e| Error::io(p, "remove", e))?;
        }
    }
    let tfile = fs::create_new(&tpath)?;
    let pfile = fs::create_new(&ppath)?;
    const BLOCK: u64 = 16 * 1024;
    let mut buf = Vec::with_capacity(BLOCK as usize * ENTRY_BYTES);
    let mut start = 0u64;
    while start < len {
        buf.clear();
        let end = (start + BLOCK).min(len);
        for i in start..end {
            buf.extend_from_slice(&wf.entry(i)?.encode(i));
        }
        fs::write_all_at(&tfile, &tpath, &buf, start * ENTRY_BYTES as u64)?;
        start = end;
    }
    fs::sync_data(&tfile, &tpath)?;
    fs::sync_data(&pfile, &ppath)?;
    Ok(TableMeta {
        generation,
        table_len: len,
        patch_len: 0,
    })
}

/// Opens a field's committed table and patch log for appending.
fn open_field(dir: &Path, f: &FieldMeta) -> Result<WriterField> {
    let committed = FieldTable::load(dir, f)?;
    let table_file = fs::open_rw(&committed.table_path)?;
    let ppath = layout::patches(dir, &f.name, f.table.generation);
    let patch_file = fs::open_rw(&ppath)?;
    Ok(WriterField {
        committed,
        table_file,
        patch_file,
        appended: Vec::new(),
        pending: Vec::new(),
    })
}

/// Builds a committed empty dataset in `dir` (which must not exist).
fn build_empty(dir: &Path, schema: &Schema) -> Result<()> {
    std::fs::create_dir_all(layout::chunk_dir(dir))
        .map_err(|e| Error::io(dir, "create directory", e))?;
    let mut fields = Vec::with_capacity(schema.fields.len());
    for f in &schema.fields {
        for p in [
            layout::table(dir, &f.name, 0),
            layout::patches(dir, &f.name, 0),
        ] {
            let file = fs::create_new(&p)?;
            fs::sync_data(&file, &p)?;
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
        });
    }
    let lock = dir.join(layout::LOCK);
    fs::create_new(&lock)?;
    let meta = Meta {
        format: "zrecord".to_string(),
        version: FORMAT_VERSION,
        generation: 0,
        len: 0,
        chunk_size_bytes: schema.chunk_size_bytes,
        fields,
        chunks: Vec::new(),
    };
    fs::sync_dir(&layout::chunk_dir(dir))?;
    fs::replace_atomically(
        dir,
        &dir.join(layout::META_TMP),
        &layout::meta(dir),
        &meta.encode(),
    )
}

/// Removes what a crash left behind and truncates committed files to their committed sizes.
fn clean_orphans(dir: &Path, meta: &Meta) -> Result<()> {
    let mut changed_dir = false;
    let tmp = dir.join(layout::META_TMP);
    if tmp.exists() {
        std::fs::remove_file(&tmp).map_err(|e| Error::io(&tmp, "remove", e))?;
        changed_dir = true;
    }
    let live: Vec<(String, u64, u64)> = meta
        .fields
        .iter()
        .flat_map(|f| {
            let t = f.table;
            [
                (
                    format!("{}.{}.offsets", f.name, t.generation),
                    t.table_len * ENTRY_BYTES as u64,
                    0,
                ),
                (
                    format!("{}.{}.patches", f.name, t.generation),
                    t.patch_len * PATCH_BYTES as u64,
                    0,
                ),
            ]
        })
        .collect();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, "list", e))? {
        let entry = entry.map_err(|e| Error::io(dir, "list", e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !layout::is_table_file(&name) {
            continue;
        }
        let path = entry.path();
        match live.iter().find(|(n, _, _)| *n == name) {
            Some((_, size, _)) => truncate_past(&path, *size)?,
            None => {
                std::fs::remove_file(&path).map_err(|e| Error::io(&path, "remove", e))?;
                changed_dir = true;
            }
        }
    }
    if changed_dir {
        fs::sync_dir(dir)?;
    }
    let cdir = layout::chunk_dir(dir);
    let mut changed_chunks = false;
    for entry in std::fs::read_dir(&cdir).map_err(|e| Error::io(&cdir, "list", e))? {
        let entry = entry.map_err(|e| Error::io(&cdir, "list", e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(id) = layout::parse_chunk(&name) else {
            continue;
        };
        let path = entry.path();
        match meta.chunks.iter().find(|c| c.id == id) {
            Some(c) => truncate_past(&path, c.size)?,
            None => {
                std::fs::remove_file(&path).map_err(|e| Error::io(&path, "remove", e))?;
                changed_chunks = true;
            }
        }
    }
    if changed_chunks {
        fs::sync_dir(&cdir)?;
    }
    Ok(())
}

/// Truncates a file to `size` if it is longer (bytes past a committed size are leftovers of an
/// interrupted commit). A file shorter than `size` is left for the open checks to report.
fn truncate_past(path: &Path, size: u64) -> Result<()> {
    let file = fs::open_rw(path)?;
    if fs::file_len(&file, path)? > size {
        fs::set_len(&file, path, size)?;
        fs::sync_data(&file, path)?;
    }
    Ok(())
}
