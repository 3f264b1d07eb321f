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
//!
//! Every file operation goes through the [`Vfs`] seam chosen at create/open ([`StdFs`] by
//! default), so tests can run the writer on a simulated file system that crashes or fails at
//! any operation (`tests/crash_points.rs`, `tests/io_errors.rs`). [`Writer::rebalance`]
//! rewrites live records into fresh chunks (`docs/FORMAT.md`, "Rebalance").

use crate::error::{Error, Result};
use crate::format::codec::Deflater;
use crate::format::dtype::Codec;
use crate::format::entry::{encode_patch, Entry, ENTRY_BYTES, PATCH_BYTES};
use crate::format::meta::{ChunkMeta, FieldMeta, Meta, TableMeta};
use crate::format::{FORMAT_VERSION, MAX_CHUNKS, MAX_CHUNK_BYTES};
use crate::io::vfs::{self, StdFs, Vfs, VfsFile, VfsLock};
use crate::store::layout;
use crate::store::schema::{check_record, Schema};
use crate::store::snapshot::{read_meta_with, FieldTable};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// Old chunks a rebalance keeps open at once.
const MAX_OPEN_READERS: usize = 64;

/// What [`Writer::rebalance`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RebalanceReport {
    /// The generation of the rebalanced commit.
    pub generation: u64,
    /// Records rewritten.
    pub records: u64,
    /// Stored bytes of every live record and field (what the chunks must hold at least).
    pub live_bytes: u64,
    /// Bytes held in chunk files before (their committed sizes).
    pub chunk_bytes_before: u64,
    /// Bytes held in chunk files after.
    pub chunk_bytes_after: u64,
    /// Chunk files before.
    pub chunks_before: usize,
    /// Chunk files after.
    pub chunks_after: usize,
    /// The dataset's chunk size (a chunk is sealed when the next record would pass it).
    pub chunk_size_bytes: u64,
}

impl RebalanceReport {
    /// Live stored bytes / bytes held in chunk files, before (1.0 when the chunks were empty).
    pub fn utilization_before(&self) -> f64 {
        ratio(self.live_bytes, self.chunk_bytes_before)
    }

    /// Live stored bytes / bytes held in chunk files, after: 1.0 (every byte is live).
    pub fn utilization_after(&self) -> f64 {
        ratio(self.live_bytes, self.chunk_bytes_after)
    }

    /// The seed's measure, before: live stored bytes / (`chunk_size_bytes` × chunks), which also
    /// counts the unused tail of every chunk.
    pub fn capacity_utilization_before(&self) -> f64 {
        ratio(
            self.live_bytes,
            self.chunk_size_bytes
                .saturating_mul(self.chunks_before as u64),
        )
    }

    /// The seed's measure, after: live stored bytes / (`chunk_size_bytes` × chunks).
    pub fn capacity_utilization_after(&self) -> f64 {
        ratio(
            self.live_bytes,
            self.chunk_size_bytes
                .saturating_mul(self.chunks_after as u64),
        )
    }
}

fn ratio(live: u64, held: u64) -> f64 {
    if held == 0 {
        1.0
    } else {
        live as f64 / held as f64
    }
}

/// A chunk being appended to.
#[derive(Debug)]
struct ActiveChunk {
    id: u16,
    path: PathBuf,
    file: Box<dyn VfsFile>,
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
    table_file: Box<dyn VfsFile>,
    patch_file: Box<dyn VfsFile>,
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
    /// Every file operation goes through this seam (see [`crate::io::vfs`]).
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    _lock: Box<dyn VfsLock>,
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
    /// Compact every table at the next commit (tests).
    force_compaction: bool,
}

impl Writer {
    /// Creates a dataset at `path` and opens its writer. `path` must not exist or must be an
    /// empty directory. The empty dataset is committed (generation 0) before this returns: it is
    /// built in a sibling directory and renamed into place, so a crash leaves either nothing or
    /// a complete empty dataset.
    pub fn create(path: impl AsRef<Path>, schema: &Schema, config: WriterConfig) -> Result<Writer> {
        Writer::create_with_vfs(StdFs::shared(), path, schema, config)
    }

    /// [`Writer::create`] on the file system `vfs` (the real one is [`StdFs`]; tests use the
    /// simulated and fault-injecting ones of `zrecord::io::fault`).
    pub fn create_with_vfs(
        vfs: Arc<dyn Vfs>,
        path: impl AsRef<Path>,
        schema: &Schema,
        config: WriterConfig,
    ) -> Result<Writer> {
        let path = path.as_ref();
        schema.validate()?;
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
        let tmp = parent.join(format!(".{name}.zrecord-create-{}", std::process::id()));
        if vfs.exists(&tmp)? {
            vfs.remove_dir_all(&tmp)?;
        }
        let built = build_empty(&*vfs, &tmp, schema);
        if let Err(e) = built {
            let _ = vfs.remove_dir_all(&tmp);
            return Err(e);
        }
        // rename(2) replaces an empty directory atomically.
        if let Err(e) = vfs.rename(&tmp, path) {
            let _ = vfs.remove_dir_all(&tmp);
            return Err(e);
        }
        vfs.sync_dir(&parent)?;
        Writer::open_with_vfs(vfs, path, config)
    }

    /// Opens the writer of an existing dataset at its latest commit, cleaning what a crash left
    /// behind: a stale `meta.json.tmp`, files no commit names, and bytes past committed sizes.
    pub fn open(path: impl AsRef<Path>, config: WriterConfig) -> Result<Writer> {
        Writer::open_with_vfs(StdFs::shared(), path, config)
    }

    /// [`Writer::open`] on the file system `vfs`.
    pub fn open_with_vfs(
        vfs: Arc<dyn Vfs>,
        path: impl AsRef<Path>,
        config: WriterConfig,
    ) -> Result<Writer> {
        let dir = path.as_ref().to_path_buf();
        let lock = vfs.lock(&dir.join(layout::LOCK))?;
        let (_, meta) = read_meta_with(&*vfs, &dir)?;
        clean_orphans(&*vfs, &dir, &meta)?;
        let mut fields = Vec::with_capacity(meta.fields.len());
        for f in &meta.fields {
            fields.push(open_field(&*vfs, &dir, f)?);
        }
        let chunks: BTreeMap<u16, u64> = meta.chunks.iter().map(|c| (c.id, c.size)).collect();
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
        Ok(Writer {
            vfs,
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
            force_compaction: false,
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

    /// Makes the next commit write every field's table as a new generation (compaction), as if
    /// the patch thresholds were reached. For tests of the compaction path.
    #[doc(hidden)]
    pub fn force_compaction_at_next_commit(&mut self) {
        self.force_compaction = true;
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
                let file = self.vfs.open_rw(&path)?;
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
        self.open_fresh_chunk()
    }

    /// Creates a chunk file with the lowest free id at or after the last one taken (wrapping:
    /// O(1) amortised) and makes it the active chunk.
    fn open_fresh_chunk(&mut self) -> Result<()> {
        let id = (0..MAX_CHUNKS)
            .map(|k| (self.next_chunk_hint + k) % MAX_CHUNKS)
            .filter_map(|i| u16::try_from(i).ok())
            .find(|i| !self.chunks.contains_key(i))
            .ok_or(Error::TooManyChunks { max: MAX_CHUNKS })?;
        self.next_chunk_hint = (u32::from(id) + 1) % MAX_CHUNKS;
        let path = layout::chunk(&self.dir, id);
        let file = self.vfs.create_new(&path)?;
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

    /// True if there are changes since the last commit.
    fn has_pending(&self) -> bool {
        self.len != self.meta.len
            || self
                .fields
                .iter()
                .any(|f| !f.appended.is_empty() || !f.pending.is_empty())
            || self.meta.chunks.len() != self.chunks.len()
            || self
                .meta
                .chunks
                .iter()
                .any(|c| self.chunks.get(&c.id) != Some(&c.size))
    }

    /// Rewrites every live record (all fields), in index order, into fresh chunks, writes every
    /// field's offset table as a new generation, and commits that atomically (the same
    /// `meta.json` rename as any commit). The old chunk files are then unlinked: snapshots opened
    /// before keep reading them through the descriptors and mappings they hold (a file is never
    /// truncated while a snapshot may map it), and a crash at any point leaves either the old or
    /// the new commit, with the unreferenced files removed at the next writer open.
    ///
    /// Pending changes are committed first (a commit of their own), so a rebalance never mixes
    /// with unacknowledged work. Stored bytes are copied as they are (codec and checksum kept);
    /// each is checked against its CRC32C while copied, so damage is reported
    /// ([`Error::ChecksumMismatch`]) rather than carried over. Any error poisons the writer;
    /// reopening recovers the last commit. Runs only when called: nothing triggers it.
    ///
    /// The new chunks take ids the old ones do not use, so old and new chunks together must fit
    /// in the 65,535 ids of the format ([`Error::TooManyChunks`] otherwise).
    pub fn rebalance(&mut self) -> Result<RebalanceReport> {
        self.check_poisoned()?;
        if self.has_pending() {
            self.commit()?;
        }
        let r = self.rebalance_inner();
        if let Err(e) = &r {
            if self.poisoned.is_none() {
                self.poisoned = Some(format!("rebalance failed: {e}"));
            }
        }
        r
    }

    fn rebalance_inner(&mut self) -> Result<RebalanceReport> {
        let old: Vec<ChunkMeta> = self.meta.chunks.clone();
        let chunk_bytes_before: u64 = old.iter().map(|c| c.size).sum();
        // New table generations, written block by block as records are copied: memory stays
        // bounded by one block per field whatever the dataset's size.
        let mut tables = Vec::with_capacity(self.fields.len());
        for wf in &self.fields {
            let generation = wf.table().generation + 1;
            let name = &wf.committed.meta.name;
            let tpath = layout::table(&self.dir, name, generation);
            let ppath = layout::patches(&self.dir, name, generation);
            for p in [&tpath, &ppath] {
                // A leftover of a crashed compaction or rebalance is not named by any commit.
                if self.vfs.exists(p)? {
                    self.vfs.remove_file(p)?;
                }
            }
            let table = self.vfs.create_new(&tpath)?;
            let patches = self.vfs.create_new(&ppath)?;
            tables.push((generation, table, patches));
        }
        // Start from a fresh chunk, not the newest old one.
        self.active = None;
        self.open_fresh_chunk()?;
        let mut readers: BTreeMap<u16, Box<dyn VfsFile>> = BTreeMap::new();
        let mut live_bytes = 0u64;
        let mut stored = Vec::new();
        const BLOCK: u64 = 16 * 1024;
        let mut blocks: Vec<Vec<u8>> = vec![Vec::new(); self.fields.len()];
        let mut start = 0u64;
        while start < self.len {
            let end = (start + BLOCK).min(self.len);
            for b in &mut blocks {
                b.clear();
            }
            for index in start..end {
                for (f, block) in blocks.iter_mut().enumerate() {
                    let e = self.copy_record(f, index, &old, &mut readers, &mut stored)?;
                    live_bytes += u64::from(e.physical_len);
                    block.extend_from_slice(&e.encode(index));
                }
            }
            for ((_, table, _), block) in tables.iter().zip(&blocks) {
                table.write_all_at(block, start * ENTRY_BYTES as u64)?;
            }
            start = end;
        }
        drop(readers);
        for c in &old {
            self.chunks.remove(&c.id);
        }
        if self.chunks.values().all(|&s| s == 0) {
            // Nothing live: no chunk at all. The empty fresh chunk is unlisted, an orphan.
            if let Some(a) = self.active.take() {
                self.chunks.remove(&a.id);
                let _ = self.vfs.remove_file(&a.path);
            }
            self.sealed.clear();
        }
        self.sync_chunks()?;
        for (_, table, patches) in &tables {
            table.sync_data()?;
            patches.sync_data()?;
        }
        self.vfs.sync_dir(&self.dir)?;
        let metas: Vec<TableMeta> = tables
            .iter()
            .map(|(generation, _, _)| TableMeta {
                generation: *generation,
                table_len: self.len,
                patch_len: 0,
            })
            .collect();
        drop(tables);
        let generation = self.publish(&metas)?;
        // The new commit is durable; the old chunks are garbage. Open snapshots hold their own
        // descriptors (see `Snapshot`), so unlinking cannot disturb them.
        for c in &old {
            let p = layout::chunk(&self.dir, c.id);
            if let Err(e) = self.vfs.remove_file(&p) {
                tracing::warn!(path = %p.display(), error = %e, "could not remove a chunk the rebalanced commit no longer uses");
            }
        }
        let chunk_bytes_after: u64 = self.meta.chunks.iter().map(|c| c.size).sum();
        Ok(RebalanceReport {
            generation,
            records: self.len,
            live_bytes,
            chunk_bytes_before,
            chunk_bytes_after,
            chunks_before: old.len(),
            chunks_after: self.meta.chunks.len(),
            chunk_size_bytes: self.meta.chunk_size_bytes,
        })
    }

    /// Copies the stored bytes of field `f` of record `index` into the active chunk (checking
    /// them against their CRC32C); returns the record's new entry.
    fn copy_record(
        &mut self,
        f: usize,
        index: u64,
        old: &[ChunkMeta],
        readers: &mut BTreeMap<u16, Box<dyn VfsFile>>,
        buf: &mut Vec<u8>,
    ) -> Result<Entry> {
        let wf = self.fields.get(f).ok_or_else(|| Error::UnknownField {
            field: format!("#{f}"),
        })?;
        let e = wf.entry(index)?;
        if e.physical_len == 0 {
            return Ok(e);
        }
        let size = old.iter().find(|c| c.id == e.chunk).map(|c| c.size);
        if size.is_none_or(|s| e.end() > s) {
            return Err(wf.committed.corrupt(
                index,
                format!("record ends past committed chunk {}", e.chunk),
            ));
        }
        let path = layout::chunk(&self.dir, e.chunk);
        if readers.len() >= MAX_OPEN_READERS && !readers.contains_key(&e.chunk) {
            // Bounded descriptors, whatever the number of chunks (index order visits chunks
            // mostly in the order they were written, so few are reopened).
            readers.clear();
        }
        let file = match readers.entry(e.chunk) {
            std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::btree_map::Entry::Vacant(v) => v.insert(self.vfs.open_read(&path)?),
        };
        buf.resize(e.physical_len as usize, 0);
        file.read_exact_at(buf, e.offset)?;
        let crc = crc32c::crc32c(buf);
        if crc != e.data_crc {
            return Err(Error::ChecksumMismatch {
                path,
                field: wf.committed.meta.name.clone(),
                index,
                offset: e.offset,
                expected: e.data_crc,
                actual: crc,
            });
        }
        let (chunk, offset) = self.place(buf)?;
        Ok(Entry { chunk, offset, ..e })
    }

    /// Makes everything appended, modified and deleted so far durable and visible to readers
    /// that open or refresh afterwards. Returns the new generation. On an I/O error the writer is
    /// poisoned, and the dataset on disk still holds the previous commit (or this one, if the
    /// failure came after the rename).
    pub fn commit(&mut self) -> Result<u64> {
        self.guarded(|w| w.commit_inner())
    }

    fn commit_inner(&mut self) -> Result<u64> {
        self.sync_chunks()?;
        // 3. Offset data.
        let mut tables = Vec::with_capacity(self.fields.len());
        let mut new_files = false;
        for wf in &mut self.fields {
            let t = wf.table();
            let patches = wf.committed.patches.len() as u64;
            let needs_compaction = self.force_compaction
                || patches > (64 * 1024).max(t.table_len / 4)
                || t.table_len > 2 * self.len + 64 * 1024;
            let table = if needs_compaction {
                new_files = true;
                compact(&*self.vfs, &self.dir, wf, self.len)?
            } else {
                append_entries(wf)?
            };
            tables.push(table);
        }
        if new_files {
            self.vfs.sync_dir(&self.dir)?;
        }
        self.force_compaction = false;
        self.publish(&tables)
    }

    /// Commit steps 1-2: flush, `fdatasync` every chunk written since the last commit, and make
    /// new chunk files' names durable.
    fn sync_chunks(&mut self) -> Result<()> {
        if let Some(a) = self.active.as_mut() {
            flush(a)?;
            a.file.sync_data()?;
        }
        for path in self.sealed.drain(..) {
            self.vfs.open_read(&path)?.sync_data()?;
        }
        if self.created_chunk_file {
            self.vfs.sync_dir(&layout::chunk_dir(&self.dir))?;
            self.created_chunk_file = false;
        }
        Ok(())
    }

    /// Commit steps 4-5, once chunks and tables are durable: the `meta.json` rename naming
    /// `tables` and the working chunk list, then adopting it and removing the table files it no
    /// longer names.
    fn publish(&mut self, tables: &[TableMeta]) -> Result<u64> {
        // 4. The commit point.
        let mut meta = self.meta.clone();
        meta.generation += 1;
        meta.len = self.len;
        meta.chunks = self
            .chunks
            .iter()
            .map(|(&id, &size)| ChunkMeta { id, size })
            .collect();
        for (fm, t) in meta.fields.iter_mut().zip(tables) {
            fm.table = *t;
        }
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

/// Writes the buffered bytes of a chunk at their offset.
fn flush(a: &mut ActiveChunk) -> Result<()> {
    if a.buf.is_empty() {
        return Ok(());
    }
    let at = a.size - a.buf.len() as u64;
    a.file.write_all_at(&a.buf, at)?;
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
    let generation = wf.table().generation + 1;
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

/// Opens a field's committed table and patch log for appending.
fn open_field(vfs: &dyn Vfs, dir: &Path, f: &FieldMeta) -> Result<WriterField> {
    let committed = FieldTable::load(vfs, dir, f)?;
    let table_file = vfs.open_rw(&committed.table_path)?;
    let ppath = layout::patches(dir, &f.name, f.table.generation);
    let patch_file = vfs.open_rw(&ppath)?;
    Ok(WriterField {
        committed,
        table_file,
        patch_file,
        appended: Vec::new(),
        pending: Vec::new(),
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
        });
    }
    let lock = dir.join(layout::LOCK);
    vfs.create_new(&lock)?;
    let meta = Meta {
        format: "zrecord".to_string(),
        version: FORMAT_VERSION,
        generation: 0,
        len: 0,
        chunk_size_bytes: schema.chunk_size_bytes,
        fields,
        chunks: Vec::new(),
    };
    vfs.sync_dir(&layout::chunk_dir(dir))?;
    vfs::replace_atomically(
        vfs,
        dir,
        &dir.join(layout::META_TMP),
        &layout::meta(dir),
        &meta.encode(),
    )
}

/// Removes what a crash left behind and truncates committed files to their committed sizes.
fn clean_orphans(vfs: &dyn Vfs, dir: &Path, meta: &Meta) -> Result<()> {
    let mut changed_dir = false;
    let tmp = dir.join(layout::META_TMP);
    if vfs.exists(&tmp)? {
        vfs.remove_file(&tmp)?;
        changed_dir = true;
    }
    let live: Vec<(String, u64)> = meta
        .fields
        .iter()
        .flat_map(|f| {
            let t = f.table;
            [
                (
                    format!("{}.{}.offsets", f.name, t.generation),
                    t.table_len * ENTRY_BYTES as u64,
                ),
                (
                    format!("{}.{}.patches", f.name, t.generation),
                    t.patch_len * PATCH_BYTES as u64,
                ),
            ]
        })
        .collect();
    let mut names = vfs.read_dir(dir)?;
    names.sort_unstable();
    for name in names {
        if !layout::is_table_file(&name) {
            continue;
        }
        let path = dir.join(&name);
        match live.iter().find(|(n, _)| *n == name) {
            Some((_, size)) => truncate_past(vfs, &path, *size)?,
            None => {
                vfs.remove_file(&path)?;
                changed_dir = true;
            }
        }
    }
    if changed_dir {
        vfs.sync_dir(dir)?;
    }
    let cdir = layout::chunk_dir(dir);
    let mut changed_chunks = false;
    let mut names = vfs.read_dir(&cdir)?;
    names.sort_unstable();
    for name in names {
        let Some(id) = layout::parse_chunk(&name) else {
            continue;
        };
        let path = cdir.join(&name);
        match meta.chunks.iter().find(|c| c.id == id) {
            Some(c) => truncate_past(vfs, &path, c.size)?,
            None => {
                vfs.remove_file(&path)?;
                changed_chunks = true;
            }
        }
    }
    if changed_chunks {
        vfs.sync_dir(&cdir)?;
    }
    Ok(())
}

/// Truncates a file to `size` if it is longer (bytes past a committed size are leftovers of an
/// interrupted commit). A file shorter than `size` is left for the open checks to report.
fn truncate_past(vfs: &dyn Vfs, path: &Path, size: u64) -> Result<()> {
    let file = vfs.open_rw(path)?;
    if file.len()? > size {
        file.set_len(size)?;
        file.sync_data()?;
    }
    Ok(())
}
