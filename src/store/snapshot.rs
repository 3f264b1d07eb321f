//! A committed, immutable view of a dataset: its meta, its offset tables and its chunk files.
//!
//! A snapshot maps the offset tables and records the identity of every chunk file its meta
//! names, then re-reads `meta.json`; if the meta changed in between it starts again, so the
//! files it knows are exactly the ones that commit named. Committed bytes are never overwritten
//! or truncated, so a snapshot stays valid while writers commit new generations. Chunk files are
//! opened while the process's descriptor budget allows and kept open, so files that later
//! commits drop stay readable; past the budget they open on demand, and one a later commit
//! removed or replaced is an error, never another file's bytes (`store/read/chunks.rs`).

#![deny(clippy::arithmetic_side_effects)]

use crate::error::{Error, Result};
use crate::format::codec::Dictionary;
use crate::format::dtype::StoredCodec;
use crate::format::entry::{decode_patch, Entry, ENTRY_BYTES, PATCH_BYTES};
use crate::format::layout;
use crate::format::meta::{DictionaryMeta, FieldMeta, Meta, MetaError};
use crate::format::FORMAT_VERSION;
use crate::io::job::FileId;
use crate::io::vfs::{Prefix, StdFs, Vfs, VfsFile};
use crate::store::paged::{self, PagedTable};
use crate::store::read::chunks::{ChunkAt, ChunkHandle, ChunkSet};
use crate::store::schema::{Field, Schema};
use crate::ReadBackend;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One field's committed offset table and patch overlay.
#[derive(Debug)]
pub(crate) struct FieldTable {
    pub(crate) meta: FieldMeta,
    pub(crate) table_path: PathBuf,
    /// The committed entries, mapped or held (empty for a paged table).
    pub(crate) map: Prefix,
    /// The committed entries read on demand in pages (a table on an object store), in place
    /// of `map`.
    pub(crate) paged: Option<Arc<PagedTable>>,
    pub(crate) patches: HashMap<u64, Entry>,
    /// The field's zstd dictionaries, prepared for decoding, in the meta's order.
    pub(crate) dictionaries: Vec<Arc<Dictionary>>,
}

impl FieldTable {
    /// Opens, checks and maps the committed prefix of a field's table and reads its patch log.
    pub(crate) fn load(vfs: &dyn Vfs, dir: &Path, meta: &FieldMeta) -> Result<FieldTable> {
        let t = meta.table;
        let table_path = layout::table(dir, &meta.name, t.generation);
        let file = vfs.open_read(&table_path)?;
        let want = t.table_len.saturating_mul(ENTRY_BYTES as u64);
        check_len(&*file, want)?;
        let map = file.map_prefix(want)?;
        map.advise_random();

        let patch_path = layout::patches(dir, &meta.name, t.generation);
        let pwant = t.patch_len.saturating_mul(PATCH_BYTES as u64);
        let buf = read_committed(vfs, &patch_path, pwant)?;
        let dictionaries = meta
            .dictionaries
            .iter()
            .map(|d| load_dictionary(vfs, dir, meta, d))
            .collect::<Result<Vec<_>>>()?;
        FieldTable::with_parts(meta, table_path, map, &patch_path, &buf, dictionaries)
    }

    /// The table of `meta` read in pages through `paged`, with its patch log and dictionaries.
    fn assemble_paged(
        meta: &FieldMeta,
        paged: PagedTable,
        patches: TableAt,
        dictionaries: Vec<Arc<Dictionary>>,
    ) -> Result<FieldTable> {
        let pwant = meta.table.patch_len.saturating_mul(PATCH_BYTES as u64);
        let (patch_path, buf) = committed_bytes(patches, pwant)?;
        let path = paged.path().to_path_buf();
        let empty = Prefix::Owned(Box::default());
        let mut t = FieldTable::with_parts(meta, path, empty, &patch_path, &buf, dictionaries)?;
        t.paged = Some(Arc::new(paged));
        Ok(t)
    }

    /// The table of `meta` from the parts a [`Location`](crate::Location) handed over: each a
    /// file (the table's committed prefix mapped) or bytes, checked to hold the committed
    /// entries.
    fn assemble(
        meta: &FieldMeta,
        table: TableAt,
        patches: TableAt,
        dictionaries: Vec<Arc<Dictionary>>,
    ) -> Result<FieldTable> {
        let t = meta.table;
        let want = t.table_len.saturating_mul(ENTRY_BYTES as u64);
        let (table_path, map) = match table {
            TableAt::File(path) => {
                let file = StdFs.open_read(&path)?;
                check_len(&*file, want)?;
                let map = file.map_prefix(want)?;
                map.advise_random();
                (path, map)
            }
            TableAt::Bytes { path, mut bytes } => {
                check_bytes(&path, bytes.len(), want)?;
                bytes.truncate(usize::try_from(want).unwrap_or(usize::MAX));
                (path, Prefix::Owned(bytes.into_boxed_slice()))
            }
        };
        let pwant = t.patch_len.saturating_mul(PATCH_BYTES as u64);
        let (patch_path, buf) = committed_bytes(patches, pwant)?;
        FieldTable::with_parts(meta, table_path, map, &patch_path, &buf, dictionaries)
    }

    /// The table of `meta` whose entries are `map` (read from `table_path`) and whose patch log
    /// holds `buf` (read from `patch_path`).
    fn with_parts(
        meta: &FieldMeta,
        table_path: PathBuf,
        map: Prefix,
        patch_path: &Path,
        buf: &[u8],
        dictionaries: Vec<Arc<Dictionary>>,
    ) -> Result<FieldTable> {
        let t = meta.table;
        let mut patches = HashMap::with_capacity(buf.len() / PATCH_BYTES);
        for (i, raw) in buf.chunks_exact(PATCH_BYTES).enumerate() {
            #[expect(
                clippy::arithmetic_side_effects,
                reason = "i < buf.len() / PATCH_BYTES (chunks_exact), so i * PATCH_BYTES < \
                          buf.len() <= isize::MAX"
            )]
            let pos = (i * PATCH_BYTES) as u64;
            let corrupt = |index, reason| Error::OffsetCorrupt {
                path: patch_path.to_path_buf(),
                field: meta.name.clone(),
                index,
                offset: pos,
                reason,
            };
            let (index, entry) = decode_patch(raw).map_err(|r| corrupt(i as u64, r))?;
            if index >= t.table_len {
                return Err(corrupt(
                    index,
                    format!(
                        "patches index {index} past the table's {} entries",
                        t.table_len
                    ),
                ));
            }
            patches.insert(index, entry);
        }
        Ok(FieldTable {
            dictionaries,
            meta: meta.clone(),
            table_path,
            map,
            paged: None,
            patches,
        })
    }

    /// Starts loading the cache lines of record `index`'s table entry: a quarter of the 24-byte
    /// entries (those at 48 and 56 mod 64) straddle two lines, and the second one is a miss of
    /// its own.
    #[inline]
    pub(crate) fn prefetch(&self, index: u64) {
        if self.paged.is_some() {
            return;
        }
        let at = self
            .map
            .bytes()
            .as_ptr()
            .wrapping_add((index as usize).wrapping_mul(ENTRY_BYTES));
        crate::io::prefetch(at);
        crate::io::prefetch(at.wrapping_add(ENTRY_BYTES - 1));
    }

    /// The entry of record `index` (< table_len), checked.
    pub(crate) fn entry(&self, index: u64) -> Result<Entry> {
        // Most tables have no patches: no hashing of the index for nothing.
        if !self.patches.is_empty() {
            if let Some(e) = self.patches.get(&index) {
                return Ok(*e);
            }
        }
        if let Some(p) = &self.paged {
            if index >= self.meta.table.table_len {
                return Err(self.corrupt(index, "index past the committed table".to_string()));
            }
            let raw = p.entry_bytes(index)?;
            return Entry::decode(index, &raw).map_err(|reason| self.corrupt(index, reason));
        }
        let start = index.saturating_mul(ENTRY_BYTES as u64);
        let raw = usize::try_from(start)
            .ok()
            .and_then(|s| self.map.bytes().get(s..s.checked_add(ENTRY_BYTES)?))
            .ok_or_else(|| self.corrupt(index, "index past the committed table".to_string()))?;
        Entry::decode(index, raw).map_err(|reason| self.corrupt(index, reason))
    }

    /// The field's dictionary number `n`, if the commit holds it.
    pub(crate) fn dictionary(&self, n: u8) -> Option<&Arc<Dictionary>> {
        self.dictionaries.iter().find(|d| d.number == n)
    }

    pub(crate) fn corrupt(&self, index: u64, reason: String) -> Error {
        Error::OffsetCorrupt {
            path: self.table_path.clone(),
            field: self.meta.name.clone(),
            index,
            offset: index.saturating_mul(ENTRY_BYTES as u64),
            reason,
        }
    }
}

/// Where a record's stored bytes live: see [`Snapshot::locate`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordLocation {
    /// The chunk file (`None` for an absent value).
    pub chunk: Option<PathBuf>,
    /// Byte offset in the chunk.
    pub offset: u64,
    /// Stored length in bytes (0 = absent).
    pub stored_len: u32,
    /// Length after decoding.
    pub logical_len: u32,
    /// The codec the bytes are stored with: the field's codec for a compressed record, raw for a
    /// record stored raw (one that did not shrink, or any record of a raw field).
    pub codec: crate::Codec,
    /// The number of the field's zstd dictionary the record was compressed with, if any.
    pub dictionary: Option<u8>,
    /// CRC32C of the stored bytes.
    pub crc32c: u32,
}

/// A committed, immutable view of a dataset. Cheap to clone through `Arc`; `Send + Sync`.
#[derive(Debug)]
pub struct Snapshot {
    pub(crate) dir: PathBuf,
    pub(crate) meta: Meta,
    pub(crate) tables: Vec<FieldTable>,
    pub(crate) chunks: ChunkSet,
    /// The backend a snapshot of a dataset on an object store must be read with (its chunks
    /// are objects, not files).
    pub(crate) native: Option<Arc<dyn ReadBackend>>,
    /// The identity of the `meta.json` this snapshot was read from (`None` on an object
    /// store): every commit renames a new file into place, so a dataset removed and created
    /// again at the same path is told apart from this one even at the same generation.
    pub(crate) meta_id: Option<FileId>,
    /// What the location that made this snapshot recorded of where it came from (an object
    /// store's commit slot or manifest, by number and content), so
    /// [`crate::Location::is_latest`] compares the latest commit with this snapshot's, not with
    /// whatever the location opened last.
    pub(crate) origin: Option<Origin>,
    /// A collection's parts; `None` for a plain dataset (its own one part). A collection's
    /// snapshot has no tables and no chunks of its own: its `meta` is made from the manifest
    /// (generation = the manifest's number, len = the parts' total, the schema's fields).
    pub(crate) parts: Option<Parts>,
    /// Whether a table of this snapshot (or of one of its parts) is read in pages: a gather
    /// loads the pages it needs first ([`Snapshot::load_pages`]).
    pub(crate) any_paged: bool,
}

/// What a location recorded of the commit a snapshot shows, for its
/// [`crate::Location::is_latest`] to compare with the latest: a number alone does not name a
/// commit, since a dataset or collection deleted and published again at the same place starts
/// numbering again.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(
    not(feature = "remote"),
    allow(dead_code, reason = "made by the object-store locations (remote/)")
)]
pub(crate) struct Origin {
    /// The commit's number: an object store's commit slot, a collection's manifest number.
    pub(crate) number: u64,
    /// A hash of the manifest's bytes (BLAKE3).
    pub(crate) digest: [u8; 32],
    /// The store's version of the manifest object (its ETag, version id and modification
    /// time), read before the manifest: a re-created object has another one even where its
    /// bytes are the same. `None` where it was not read.
    pub(crate) version: Option<String>,
}

/// The parts of a collection's snapshot: each an ordinary snapshot, with the global index of
/// its first record.
#[derive(Debug)]
pub(crate) struct Parts {
    /// Each part's snapshot, in global index order.
    pub(crate) snaps: Vec<Arc<Snapshot>>,
    /// Each part's id.
    pub(crate) ids: Vec<String>,
    /// `starts[k]`: the global index of part `k`'s first record; one more entry, the total.
    pub(crate) starts: Vec<u64>,
}

/// The identity of `dir/meta.json` now, if it can be read.
pub(crate) fn meta_id(dir: &Path) -> Option<FileId> {
    FileId::at(&layout::meta(dir)).ok()
}

/// Reads, checks and prepares one of a field's dictionaries.
pub(crate) fn load_dictionary(
    vfs: &dyn Vfs,
    dir: &Path,
    field: &FieldMeta,
    d: &DictionaryMeta,
) -> Result<Arc<Dictionary>> {
    let path = layout::dictionary(dir, &field.name, d.number);
    let bytes = read_committed(vfs, &path, d.bytes)?;
    prepare_dictionary(path, field, d, bytes)
}

/// One of a field's dictionaries from the part a [`Location`](crate::Location) handed over.
fn dictionary_at(at: TableAt, field: &FieldMeta, d: &DictionaryMeta) -> Result<Arc<Dictionary>> {
    let (path, bytes) = committed_bytes(at, d.bytes)?;
    prepare_dictionary(path, field, d, bytes)
}

/// The first `want` bytes of the file at `path` (`Truncated` if it holds fewer).
fn read_committed(vfs: &dyn Vfs, path: &Path, want: u64) -> Result<Vec<u8>> {
    let file = vfs.open_read(path)?;
    check_len(&*file, want)?;
    let mut bytes = vec![0u8; usize::try_from(want).unwrap_or(usize::MAX)];
    file.read_exact_at(&mut bytes, 0)?;
    Ok(bytes)
}

/// The first `want` bytes of a part a location handed over, and what names it in errors.
fn committed_bytes(at: TableAt, want: u64) -> Result<(PathBuf, Vec<u8>)> {
    match at {
        TableAt::File(path) => {
            let bytes = read_committed(&StdFs, &path, want)?;
            Ok((path, bytes))
        }
        TableAt::Bytes { path, mut bytes } => {
            check_bytes(&path, bytes.len(), want)?;
            bytes.truncate(usize::try_from(want).unwrap_or(usize::MAX));
            Ok((path, bytes))
        }
    }
}

/// Checks a dictionary's bytes against its CRC32C in the commit and prepares it.
fn prepare_dictionary(
    path: PathBuf,
    field: &FieldMeta,
    d: &DictionaryMeta,
    bytes: Vec<u8>,
) -> Result<Arc<Dictionary>> {
    let corrupt = |reason: String| Error::DictionaryCorrupt {
        path: path.clone(),
        field: field.name.clone(),
        number: d.number,
        reason,
    };
    let crc = crate::checksum::crc32c(&bytes);
    if crc != d.crc32c {
        return Err(corrupt(format!(
            "checksum mismatch: the commit says {:#010x}, the file has {crc:#010x}",
            d.crc32c
        )));
    }
    Dictionary::new(d.number, bytes).map_err(corrupt)
}

fn check_len(file: &dyn VfsFile, want: u64) -> Result<()> {
    let have = file.len()?;
    if have < want {
        return Err(Error::Truncated {
            path: file.path().to_path_buf(),
            expected: want,
            actual: have,
        });
    }
    Ok(())
}

fn check_bytes(path: &Path, have: usize, want: u64) -> Result<()> {
    let have = have as u64;
    if have < want {
        return Err(Error::Truncated {
            path: path.to_path_buf(),
            expected: want,
            actual: have,
        });
    }
    Ok(())
}

/// Where one offset table or patch log of a commit is read from: a part a
/// [`Location`](crate::Location) hands to [`Snapshot::assemble`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TableAt {
    /// A local file: its committed prefix is mapped (a table is read where it lies, whatever
    /// its size).
    File(PathBuf),
    /// The bytes (at least the committed prefix; more is ignored). `path` names them in
    /// errors.
    Bytes {
        /// What names these bytes in errors.
        path: PathBuf,
        /// The table's or patch log's bytes.
        bytes: Vec<u8>,
    },
}

/// Reads and decodes `dir/meta.json`, returning the bytes too.
pub(crate) fn read_meta(dir: &Path) -> Result<(Vec<u8>, Meta)> {
    read_meta_with(&StdFs, dir)
}

/// Reads and decodes `dir/meta.json` through `vfs`, returning the bytes too.
pub(crate) fn read_meta_with(vfs: &dyn Vfs, dir: &Path) -> Result<(Vec<u8>, Meta)> {
    let path = layout::meta(dir);
    let bytes = vfs.read(&path)?;
    let meta = decode_meta(&path, &bytes)?;
    Ok((bytes, meta))
}

/// Decodes the `meta.json` bytes read from `path`.
fn decode_meta(path: &Path, bytes: &[u8]) -> Result<Meta> {
    Meta::decode(bytes).map_err(|e| match e {
        MetaError::Corrupt(reason) => Error::MetaCorrupt {
            path: path.to_path_buf(),
            reason,
        },
        MetaError::Version(found) => Error::UnsupportedVersion {
            path: path.to_path_buf(),
            found,
            supported: FORMAT_VERSION,
        },
    })
}

impl Snapshot {
    /// Opens the dataset's current commit.
    pub(crate) fn load(dir: &Path) -> Result<Snapshot> {
        for _ in 0..16 {
            let id = meta_id(dir);
            let (bytes, meta) = read_meta(dir)?;
            let opened = Snapshot::open_files(dir, meta, id);
            // The files are the ones this meta named only if the meta did not change meanwhile
            // (the same bytes in the same file: a re-created dataset may have the same bytes).
            let unchanged =
                read_meta(dir).map(|(b, _)| b == bytes).unwrap_or(false) && meta_id(dir) == id;
            if unchanged {
                return opened;
            }
        }
        // The meta kept changing: the seventeenth attempt stands, whatever happens meanwhile.
        let id = meta_id(dir);
        let (_, meta) = read_meta(dir)?;
        Snapshot::open_files(dir, meta, id)
    }

    /// Assembles the snapshot of one commit from its parts, fetched by a
    /// [`Location`](crate::Location) its own way: `meta_json`, the commit's `meta.json` bytes;
    /// `table(name)`, where the offset table, patch log or zstd dictionary of that name is
    /// (`<field>.<generation>.offsets` and `.patches`, `<field>.<number>.zdict`, docs/FORMAT.md); `chunk(name)`, where the
    /// chunk file of that name is (`chunk/<id>.zr`). `path` is what [`Snapshot::dir`] reports
    /// (the dataset's directory or URL). `backend`, if set, reads this snapshot's chunks
    /// whenever no custom backend is configured (objects only it can fetch; see
    /// [`Location::read_backend`](crate::Location::read_backend)).
    ///
    /// The meta is decoded and checked, every table checked to hold its committed entries and
    /// its patch log decoded, every local chunk file opened and checked to hold its committed
    /// bytes (its identity recorded, as a local snapshot does). Chunks named
    /// [`ChunkAt::Object`] are not touched until a read.
    ///
    /// # Errors
    /// [`Error::MetaCorrupt`] / [`Error::UnsupportedVersion`] for the meta; [`Error::Truncated`]
    /// for a table, patch log or local chunk shorter than the commit says;
    /// [`Error::OffsetCorrupt`] for a damaged patch record; the errors `table` and `chunk`
    /// return, and those of opening local files.
    pub fn assemble(
        path: impl Into<PathBuf>,
        meta_json: &[u8],
        table: impl FnMut(&str) -> Result<TableAt>,
        chunk: impl FnMut(&str) -> Result<ChunkAt>,
        backend: Option<Arc<dyn ReadBackend>>,
    ) -> Result<Snapshot> {
        Snapshot::assemble_paged(path, meta_json, table, |_, _| Ok(None), chunk, backend)
    }

    /// [`Snapshot::assemble`], where `paged(field, name)` may hand over the offset table `name`
    /// of `field` as a [`PagedTable`] (read on demand) instead of `table(name)`'s bytes.
    pub(crate) fn assemble_paged(
        path: impl Into<PathBuf>,
        meta_json: &[u8],
        mut table: impl FnMut(&str) -> Result<TableAt>,
        mut paged: impl FnMut(&FieldMeta, &str) -> Result<Option<PagedTable>>,
        chunk: impl FnMut(&str) -> Result<ChunkAt>,
        backend: Option<Arc<dyn ReadBackend>>,
    ) -> Result<Snapshot> {
        let dir = path.into();
        let meta = decode_meta(&layout::meta(&dir), meta_json)?;
        let tables = meta
            .fields
            .iter()
            .map(|f| {
                let g = f.table.generation;
                let name = layout::table_name(&f.name, g);
                let offsets = match paged(f, &name)? {
                    Some(p) => Ok(p),
                    None => Err(table(&name)?),
                };
                let patches = table(&layout::patches_name(&f.name, g))?;
                let dictionaries = f
                    .dictionaries
                    .iter()
                    .map(|d| {
                        let name = layout::dictionary_name(&f.name, d.number);
                        dictionary_at(table(&name)?, f, d)
                    })
                    .collect::<Result<Vec<_>>>()?;
                match offsets {
                    Ok(p) => FieldTable::assemble_paged(f, p, patches, dictionaries),
                    Err(at) => FieldTable::assemble(f, at, patches, dictionaries),
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let chunks = ChunkSet::assemble(&meta, chunk)?;
        let any_paged = tables.iter().any(|t| t.paged.is_some());
        Ok(Snapshot {
            dir,
            meta,
            tables,
            chunks,
            native: backend,
            meta_id: None,
            origin: None,
            parts: None,
            any_paged,
        })
    }

    fn open_files(dir: &Path, meta: Meta, meta_id: Option<FileId>) -> Result<Snapshot> {
        let tables = meta
            .fields
            .iter()
            .map(|f| FieldTable::load(&StdFs, dir, f))
            .collect::<Result<Vec<_>>>()?;
        let chunks = ChunkSet::load(dir, &meta)?;
        Ok(Snapshot {
            dir: dir.to_path_buf(),
            meta,
            tables,
            chunks,
            native: None,
            meta_id,
            origin: None,
            parts: None,
            any_paged: false,
        })
    }

    /// The dataset directory (the dataset's URL for one on an object store).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The committed metadata.
    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    /// The dataset's user attributes at this commit ([`crate::Writer::set_attribute`]): empty
    /// for a dataset that has none.
    pub fn attributes(&self) -> &crate::Attributes {
        &self.meta.attributes
    }

    /// The schema of this commit: its fields (name, dtype, fixed shape, codec) and chunk size.
    pub fn schema(&self) -> Schema {
        let mut schema = Schema::new().chunk_size_bytes(self.meta.chunk_size_bytes);
        for f in &self.meta.fields {
            let mut field = Field::new(f.name.clone(), f.dtype).codec(f.codec);
            field.shape.clone_from(&f.shape);
            schema = schema.field(field);
        }
        schema
    }

    /// Number of records.
    pub fn len(&self) -> u64 {
        self.meta.len
    }

    /// True if the dataset has no records.
    pub fn is_empty(&self) -> bool {
        self.meta.len == 0
    }

    /// The commit generation this snapshot shows.
    pub fn generation(&self) -> u64 {
        self.meta.generation
    }

    /// Index of the field named `name`.
    pub fn field_index(&self, name: &str) -> Result<usize> {
        self.meta
            .field_index(name)
            .ok_or_else(|| Error::UnknownField {
                field: name.to_string(),
            })
    }

    /// The checked offset entry of `field` for record `index`: in range, intact, and pointing
    /// inside a committed chunk.
    pub(crate) fn entry(&self, field: usize, index: u64) -> Result<Entry> {
        if self.parts.is_some() {
            let (_, part, local) = self.part_of(index)?;
            return part.entry(field, local);
        }
        if index >= self.meta.len {
            return Err(Error::IndexOutOfRange {
                index,
                len: self.meta.len,
            });
        }
        let table = self.table(field)?;
        let e = table.entry(index)?;
        self.check_in_chunk(table, index, e)
    }

    /// Checks that entry `e` of record `index` in `table` points inside a committed chunk (or
    /// is absent).
    pub(crate) fn check_in_chunk(&self, table: &FieldTable, index: u64, e: Entry) -> Result<Entry> {
        if let StoredCodec::ZstdDict(n) = e.codec {
            if table.dictionary(n).is_none() {
                return Err(table.corrupt(
                    index,
                    format!("names zstd dictionary {n}, which the commit does not hold"),
                ));
            }
        }
        if e.physical_len > 0 {
            let chunk = self.chunk(e.chunk);
            match chunk {
                None => {
                    return Err(table.corrupt(
                        index,
                        format!("names chunk {}, which the meta does not list", e.chunk),
                    ))
                }
                Some(c) if e.end() > c.size() => {
                    return Err(table.corrupt(
                        index,
                        format!(
                            "record ends at byte {} past chunk {}'s committed {} bytes",
                            e.end(),
                            e.chunk,
                            c.size()
                        ),
                    ))
                }
                Some(_) => {}
            }
        }
        Ok(e)
    }

    /// Where the stored bytes of record `index` of `field` are, from the checked offset entry
    /// (no data read). For tools and baselines: reads should go through a gather.
    pub fn locate(&self, field: usize, index: u64) -> Result<RecordLocation> {
        if self.parts.is_some() {
            let (_, part, local) = self.part_of(index)?;
            return part.locate(field, local);
        }
        let e = self.entry(field, index)?;
        Ok(RecordLocation {
            chunk: self.chunk(e.chunk).map(|c| c.path().to_path_buf()),
            offset: e.offset,
            stored_len: e.physical_len,
            logical_len: e.logical_len,
            codec: match e.codec {
                StoredCodec::Raw => crate::Codec::Raw,
                StoredCodec::Deflate => crate::Codec::Deflate,
                StoredCodec::Zstd | StoredCodec::ZstdDict(_) => self
                    .table(field)
                    .map(|t| t.meta.codec)
                    .ok()
                    .filter(|c| c.needs_v2())
                    .unwrap_or_else(crate::Codec::zstd),
            },
            dictionary: match e.codec {
                StoredCodec::ZstdDict(n) => Some(n),
                _ => None,
            },
            crc32c: e.data_crc,
        })
    }

    /// Length of record `index` of `field` after decoding, from the offset table alone.
    pub fn record_len(&self, field: usize, index: u64) -> Result<u64> {
        Ok(u64::from(self.entry(field, index)?.logical_len))
    }

    /// Adds the logical length of record `indices[k]` of `field` to `lens[k]`, for every `k`
    /// (`lens` is extended with zeros to the length of `indices` first): [`Snapshot::record_len`]
    /// for many records. For random indices every table entry is a cache miss and often a TLB
    /// miss: the entries of a window of records are prefetched in one tight loop, so their
    /// misses and page walks overlap, then decoded (as resolving a gather does).
    ///
    /// # Errors
    /// As [`Snapshot::record_len`], for the first index that fails.
    pub fn add_record_lens(
        &self,
        field: usize,
        indices: &[u64],
        lens: &mut Vec<u64>,
    ) -> Result<()> {
        /// Records whose entries are prefetched in one burst.
        const WINDOW: usize = 256;
        if lens.len() < indices.len() {
            lens.resize(indices.len(), 0);
        }
        if field >= self.field_count() {
            return Err(Error::UnknownField {
                field: format!("#{field}"),
            });
        }
        for (window, lens) in indices.chunks(WINDOW).zip(lens.chunks_mut(WINDOW)) {
            self.load_pages(window, &[field])?;
            for &index in window {
                self.prefetch_entry(field, index);
            }
            for (&index, len) in window.iter().zip(lens.iter_mut()) {
                *len = len.saturating_add(u64::from(self.entry(field, index)?.logical_len));
            }
        }
        Ok(())
    }

    /// Stored (on-disk) length of record `index` of `field`, from the offset table alone: equal
    /// to [`Snapshot::record_len`] for a raw record, smaller for a deflated one, 0 if absent.
    pub fn stored_len(&self, field: usize, index: u64) -> Result<u64> {
        Ok(u64::from(self.entry(field, index)?.physical_len))
    }

    /// Total committed bytes of the chunk files this snapshot reads (the bytes the dataset holds
    /// on disk for record data, live or not).
    pub fn chunk_bytes(&self) -> u64 {
        match &self.parts {
            Some(p) => p.snaps.iter().map(|s| s.chunk_bytes()).sum(),
            None => self.meta.chunks.iter().map(|c| c.size).sum(),
        }
    }

    /// The number of chunks this snapshot's reads may name (all parts' for a collection).
    pub(crate) fn chunk_count(&self) -> usize {
        match &self.parts {
            Some(p) => p.snaps.iter().map(|s| s.chunk_count()).sum(),
            None => self.meta.chunks.len(),
        }
    }

    /// Whether any chunk is an object only the location's backend can read.
    pub(crate) fn any_object(&self) -> bool {
        match &self.parts {
            Some(p) => p.snaps.iter().any(|s| s.any_object()),
            None => self.chunks.any_object(),
        }
    }

    /// Drops the local copy of the chunk at `path` (a damaged cached copy), in whichever part
    /// holds it.
    pub(crate) fn copy_dropped(&self, path: &Path) {
        match &self.parts {
            Some(p) => p.snaps.iter().for_each(|s| s.copy_dropped(path)),
            None => self.chunks.copy_dropped(path),
        }
    }

    /// The number of fields.
    pub(crate) fn field_count(&self) -> usize {
        self.meta.fields.len()
    }

    /// True if this is a snapshot of a collection (a manifest's parts, each a dataset).
    pub fn is_collection(&self) -> bool {
        self.parts.is_some()
    }

    /// True if `other` shows the same commit as this snapshot: the same generation, `meta`,
    /// `meta.json` file and origin, and for a collection the same parts (ids, and each part the
    /// same commit).
    pub(crate) fn same_commit(&self, other: &Snapshot) -> bool {
        let parts = match (&self.parts, &other.parts) {
            (None, None) => true,
            (Some(a), Some(b)) => {
                a.ids == b.ids
                    && a.snaps.len() == b.snaps.len()
                    && a.snaps.iter().zip(&b.snaps).all(|(x, y)| x.same_commit(y))
            }
            _ => false,
        };
        parts
            && self.generation() == other.generation()
            && self.meta_id == other.meta_id
            && self.origin == other.origin
            && self.meta == other.meta
    }

    /// The snapshots of a collection's parts, in global index order (part `k`'s records follow
    /// those of parts `0..k`); empty for a plain dataset.
    pub fn parts(&self) -> &[Arc<Snapshot>] {
        self.parts.as_ref().map_or(&[], |p| p.snaps.as_slice())
    }

    /// The ids of a collection's parts, in the order of [`Snapshot::parts`]; empty for a plain
    /// dataset.
    pub fn part_ids(&self) -> &[String] {
        self.parts.as_ref().map_or(&[], |p| p.ids.as_slice())
    }

    /// The part holding global record `index`: its number, its snapshot and the record's index
    /// in it. A plain dataset is its own part 0.
    pub(crate) fn part_of(&self, index: u64) -> Result<(usize, &Snapshot, u64)> {
        if index >= self.meta.len {
            return Err(Error::IndexOutOfRange {
                index,
                len: self.meta.len,
            });
        }
        let Some(p) = &self.parts else {
            return Ok((0, self, index));
        };
        // The last part starting at or before `index`: it holds it (an empty part starts
        // where the next one does, so it is never the last such part for an index in range).
        let k = p.starts.partition_point(|&s| s <= index).saturating_sub(1);
        match (p.snaps.get(k), p.starts.get(k)) {
            (Some(snap), Some(&start)) => Ok((k, snap, index.saturating_sub(start))),
            _ => Err(Error::internal(format!(
                "record {index} is in no part of {}",
                self.dir.display()
            ))),
        }
    }

    /// Starts loading the cache lines of `field`'s table entry of record `index` (nothing for
    /// an index out of range).
    pub(crate) fn prefetch_entry(&self, field: usize, index: u64) {
        match &self.parts {
            None => {
                if let Some(t) = self.tables.get(field) {
                    if index < self.meta.len {
                        t.prefetch(index);
                    }
                }
            }
            Some(_) => {
                if let Ok((_, part, local)) = self.part_of(index) {
                    part.prefetch_entry(field, local);
                }
            }
        }
    }

    /// The snapshot of a collection: `meta` made from its manifest (generation = the
    /// manifest's number, len = the parts' total, no chunks), its parts' snapshots with their
    /// ids. `meta_id` names the manifest's file.
    pub(crate) fn collection(
        dir: PathBuf,
        meta: Meta,
        meta_id: Option<FileId>,
        parts: Vec<(String, Arc<Snapshot>)>,
    ) -> Result<Snapshot> {
        let mut starts = Vec::with_capacity(parts.len().saturating_add(1));
        let mut total = 0u64;
        starts.push(0);
        for (_, s) in &parts {
            total = total
                .checked_add(s.len())
                .ok_or_else(|| Error::MetaCorrupt {
                    path: dir.clone(),
                    reason: "the parts' lengths overflow".to_string(),
                })?;
            starts.push(total);
        }
        if total != meta.len {
            return Err(Error::internal(format!(
                "a collection of {} records whose parts hold {total}",
                meta.len
            )));
        }
        let (ids, snaps): (Vec<String>, Vec<Arc<Snapshot>>) = parts.into_iter().unzip();
        let any_paged = snaps.iter().any(|s| s.any_paged);
        Ok(Snapshot {
            dir,
            meta,
            tables: Vec::new(),
            chunks: ChunkSet::default(),
            native: None,
            meta_id,
            origin: None,
            parts: Some(Parts { snaps, ids, starts }),
            any_paged,
        })
    }

    /// The entries of paged tables that reading `fields` of `indices` needs and whose pages
    /// must be fetched: `(table, index in it)` (indices out of range are left to resolving).
    fn missing_pages<'a>(
        &'a self,
        indices: &[u64],
        fields: &[usize],
    ) -> Vec<(&'a PagedTable, u64)> {
        let mut out = Vec::new();
        if !self.any_paged {
            return out;
        }
        for &index in indices {
            let Ok((_, part, local)) = self.part_of(index) else {
                continue;
            };
            for &f in fields {
                if let Some(p) = part.tables.get(f).and_then(|t| t.paged.as_deref()) {
                    // An index past the table is left to resolving, which reports it.
                    if local < p.len() && p.needs_fetch(local) {
                        out.push((p, local));
                    }
                }
            }
        }
        out
    }

    /// Loads the table pages a read of `fields` (snapshot field numbers) of `indices` needs,
    /// all in one step (one round trip to a store): nothing for tables held whole. Blocking.
    pub(crate) fn load_pages(&self, indices: &[u64], fields: &[usize]) -> Result<()> {
        let missing = self.missing_pages(indices, fields);
        if missing.is_empty() {
            return Ok(());
        }
        paged::load(&missing)
    }

    /// True if a read of `fields` of `indices` finds every table entry it needs in memory.
    pub(crate) fn pages_resident(&self, indices: &[u64], fields: &[usize]) -> bool {
        self.missing_pages(indices, fields).is_empty()
    }

    pub(crate) fn table(&self, field: usize) -> Result<&FieldTable> {
        self.tables.get(field).ok_or_else(|| Error::UnknownField {
            field: format!("#{field}"),
        })
    }

    pub(crate) fn chunk(&self, id: u16) -> Option<&Arc<ChunkHandle>> {
        self.chunks.get(id)
    }

    /// Chunk `id`'s file, opened within the chunk descriptor budget and checked to be the file
    /// this commit named (a push hashes and uploads it).
    #[allow(dead_code, reason = "used by object-store pushes (`remote/push.rs`)")]
    pub(crate) fn chunk_file(&self, id: u16) -> Result<Arc<crate::io::job::ReadFile>> {
        self.chunk(id)
            .ok_or_else(|| Error::Internal {
                reason: format!("chunk {id} of the commit has no handle"),
            })?
            .file()
    }
}
