//! Gathered records: one owned slab per batch, every slot 64-byte aligned, in caller order.

use crate::error::{Error, Result};
use crate::format::dtype::{Codec, DType};
use crate::format::entry::Entry;
use crate::io::job::{IoJob, Piece, ReadOp};
use crate::io::mmap::SharedMap;
use crate::io::{self, Backend};
use crate::store::finish::{run_parallel, Task};
use crate::store::snapshot::Snapshot;
use bytes::Bytes;
use std::sync::Arc;

/// Alignment of every record slot in a batch's slab.
pub const SLOT_ALIGN: usize = 64;

/// An element type a typed view can hand out, tied to the field dtype it reads.
pub trait Element: bytemuck::Pod {
    /// The dtype whose bytes this type reads.
    const DTYPE: DType;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => { $(impl Element for $t { const DTYPE: DType = DType::$d; })* };
}
element!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, u64 => U64, i64 => I64,
         half::f16 => F16, half::bf16 => Bf16, f32 => F32, f64 => F64);

/// Records gathered from a snapshot: `len()` records × `fields().len()` fields, in the order the
/// indices were given. Each value is a 64-byte-aligned slot of the batch's one slab, or a
/// zero-copy slice of a chunk mapping (raw records served by the mmap path). The batch holds
/// one reference per slab or mapping, not one per value. Dropping the batch frees its memory; a
/// [`Bytes`] from [`Batch::bytes`] keeps its slab or mapping alive on its own.
#[derive(Clone, Debug)]
pub struct Batch {
    values: Values,
    indices: Vec<u64>,
    fields: Arc<[(String, DType)]>,
}

/// The values of a batch: spans of a few owners (the slab, chunk mappings).
#[derive(Clone, Debug, Default)]
pub(crate) struct Values {
    owners: Vec<Bytes>,
    spans: Vec<Span>,
}

#[derive(Clone, Copy, Debug)]
struct Span {
    owner: u32,
    start: usize,
    len: usize,
}

/// The empty value.
const EMPTY: Span = Span {
    owner: u32::MAX,
    start: 0,
    len: 0,
};

impl Values {
    fn get(&self, i: usize) -> Option<&[u8]> {
        let s = self.spans.get(i)?;
        if s.len == 0 {
            return Some(&[]);
        }
        self.owners
            .get(s.owner as usize)?
            .get(s.start..s.start + s.len)
    }

    fn bytes(&self, i: usize) -> Option<Bytes> {
        let s = self.spans.get(i)?;
        if s.len == 0 {
            return Some(Bytes::new());
        }
        let o = self.owners.get(s.owner as usize)?;
        (s.start + s.len <= o.len()).then(|| o.slice(s.start..s.start + s.len))
    }
}

impl Batch {
    /// Number of records.
    pub fn len(&self) -> usize {
        self.indices.len()
    }

    /// True if the batch holds no records.
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

    /// The record indices, in order.
    pub fn indices(&self) -> &[u64] {
        &self.indices
    }

    /// The gathered fields' names and dtypes, in order.
    pub fn fields(&self) -> impl Iterator<Item = (&str, DType)> {
        self.fields.iter().map(|(n, d)| (n.as_str(), *d))
    }

    /// Position of the field named `name` in this batch.
    pub fn field_position(&self, name: &str) -> Result<usize> {
        self.fields
            .iter()
            .position(|(n, _)| n == name)
            .ok_or_else(|| Error::UnknownField {
                field: name.to_string(),
            })
    }

    fn position(&self, record: usize, field: usize) -> Option<usize> {
        if field >= self.fields.len() {
            return None;
        }
        record.checked_mul(self.fields.len())?.checked_add(field)
    }

    /// The bytes of `field` (a position in [`Batch::fields`]) of the `record`-th record, or
    /// `None` if either is out of range. An absent record is an empty slice.
    #[inline]
    pub fn get(&self, record: usize, field: usize) -> Option<&[u8]> {
        self.values.get(self.position(record, field)?)
    }

    /// Like [`Batch::get`], as a zero-copy [`Bytes`] that keeps the slab (or mapping) alive.
    pub fn bytes(&self, record: usize, field: usize) -> Option<Bytes> {
        self.values.bytes(self.position(record, field)?)
    }

    /// A typed view of a record, checked against the field's dtype.
    pub fn typed<T: Element>(&self, record: usize, field: usize) -> Result<&[T]> {
        let (name, dtype) = self.fields.get(field).ok_or_else(|| Error::UnknownField {
            field: format!("#{field}"),
        })?;
        if *dtype != T::DTYPE {
            return Err(Error::DtypeMismatch {
                field: name.clone(),
                dtype: dtype.to_string(),
                requested: T::DTYPE.to_string(),
            });
        }
        let bytes = self.get(record, field).ok_or(Error::IndexOutOfRange {
            index: record as u64,
            len: self.len() as u64,
        })?;
        bytemuck::try_cast_slice(bytes).map_err(|e| Error::ShapeMismatch {
            field: name.clone(),
            reason: format!(
                "{} bytes cannot be viewed as {}: {e}",
                bytes.len(),
                T::DTYPE
            ),
        })
    }

    /// Consumes the batch into one [`Bytes`] per field per record (zero-copy).
    pub fn into_records(self) -> Vec<Vec<Bytes>> {
        let nf = self.fields.len();
        (0..self.indices.len())
            .map(|r| (0..nf).filter_map(|f| self.bytes(r, f)).collect())
            .collect()
    }

    /// Total bytes of all values.
    pub fn total_bytes(&self) -> usize {
        self.values.spans.iter().map(|s| s.len).sum()
    }
}

/// How a dataset reads records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadOptions {
    /// Which backend serves reads (`ZRECORD_IO` overrides it). Default [`Backend::Auto`].
    pub backend: Backend,
    /// Verify every record's CRC32C on every read. Default true; turning it off trades the
    /// detection of damaged bytes for a little speed (see docs/BENCHMARKS.md).
    pub verify_checksums: bool,
    /// Read chunks with `O_DIRECT` (for datasets much larger than RAM: no page-cache pollution,
    /// no double copy). Aligned ranges are read into a staging buffer and sliced afterwards.
    /// Never uses the mmap path. Default false.
    pub direct_io: bool,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            backend: Backend::Auto,
            verify_checksums: true,
            direct_io: false,
        }
    }
}

impl ReadOptions {
    /// The default options with `backend`.
    pub fn with_backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// The options with checksum verification on or off.
    pub fn with_verify_checksums(mut self, verify: bool) -> Self {
        self.verify_checksums = verify;
        self
    }

    /// The options with `O_DIRECT` reads on or off.
    pub fn with_direct_io(mut self, direct: bool) -> Self {
        self.direct_io = direct;
        self
    }
}

/// How many records ahead the entry loop prefetches table entries.
const ENTRY_AHEAD: usize = 8;

/// Records probed with `mincore` per batch by [`Backend::Auto`].
const PROBES: usize = 8;
/// Largest coalesced read.
const MAX_OP_BYTES: usize = 1 << 20;
/// Most records in one coalesced read.
const MAX_OP_PIECES: usize = 256;
/// Alignment of `O_DIRECT` offsets, lengths and buffers.
const DIRECT_ALIGN: usize = 4096;

/// One value to produce.
pub(crate) struct Want {
    pub(crate) field: usize,
    pub(crate) index: u64,
    pub(crate) e: Entry,
}

/// Reads `indices` × `fields` from `snap` in caller order, through the backend `opts` and
/// `ZRECORD_IO` select. Every index is checked; every record's checksum is verified unless
/// `opts` turns it off.
pub(crate) fn gather(
    snap: &Snapshot,
    indices: &[u64],
    fields: &[usize],
    opts: &ReadOptions,
) -> Result<Batch> {
    let mut wants = Vec::with_capacity(indices.len().saturating_mul(fields.len()));
    let prefetch = |index: u64| {
        for &field in fields {
            if let Some(t) = snap.tables.get(field) {
                t.prefetch(index);
            }
        }
    };
    for &index in indices.iter().take(ENTRY_AHEAD) {
        prefetch(index);
    }
    for (k, &index) in indices.iter().enumerate() {
        if let Some(&ahead) = indices.get(k + ENTRY_AHEAD) {
            prefetch(ahead);
        }
        for &field in fields {
            let e = snap.entry(field, index)?;
            wants.push(Want { field, index, e });
        }
    }
    let backend = io::effective_backend(opts.backend)?;
    let mapped = !opts.direct_io
        && match backend {
            Backend::Mmap => true,
            Backend::Auto => resident(snap, &wants),
            _ => false,
        };
    let values = match mapped {
        true => match gather_mapped(snap, &wants, opts)? {
            Some(v) => v,
            None => gather_io(snap, &wants, opts, backend)?,
        },
        false => gather_io(snap, &wants, opts, backend)?,
    };
    let names: Arc<[(String, DType)]> = fields
        .iter()
        .filter_map(|&f| {
            snap.tables
                .get(f)
                .map(|t| (t.meta.name.clone(), t.meta.dtype))
        })
        .collect();
    Ok(Batch {
        values,
        indices: indices.to_vec(),
        fields: names,
    })
}

/// True if a sample of the batch's records is in the page cache: the batch is served from the
/// mapping. One cold record among them sends the whole batch to the I/O backend.
fn resident(snap: &Snapshot, wants: &[Want]) -> bool {
    let present: Vec<&Want> = wants.iter().filter(|w| w.e.physical_len > 0).collect();
    let step = present.len().div_ceil(PROBES).max(1);
    present.iter().step_by(step).all(|w| {
        snap.chunk(w.e.chunk)
            .and_then(|c| c.map())
            .is_some_and(|m| m.resident(w.e.offset, w.e.physical_len as usize))
    })
}

/// A 64-byte-aligned slab with one slot per length, and the slot starts.
fn slab(lens: impl Iterator<Item = usize>, align: usize) -> (Vec<u8>, Vec<usize>) {
    let mut starts = Vec::new();
    let mut total = 0usize;
    for len in lens {
        starts.push(total);
        total += len.next_multiple_of(align);
    }
    let buf = vec![0u8; total + align];
    let pad = buf.as_ptr().align_offset(align).min(align);
    for s in &mut starts {
        *s += pad;
    }
    (buf, starts)
}

pub(crate) fn missing_chunk(snap: &Snapshot, w: &Want) -> Error {
    match snap.table(w.field) {
        Ok(t) => t.corrupt(
            w.index,
            format!("names chunk {}, which the meta does not list", w.e.chunk),
        ),
        Err(e) => e,
    }
}

/// The mmap path: raw records are zero-copy slices of the chunk mappings; deflate records are
/// inflated from the mapping into a slab. `None` if a chunk cannot be mapped.
///
/// A raw record whose place in the chunk is not aligned to its dtype's item size is copied into
/// the slab instead, so typed views work on every value.
fn gather_mapped(snap: &Snapshot, wants: &[Want], opts: &ReadOptions) -> Result<Option<Values>> {
    let mut maps: Vec<Option<&SharedMap>> = Vec::with_capacity(wants.len());
    for w in wants {
        if w.e.physical_len == 0 {
            maps.push(None);
            continue;
        }
        let chunk = snap
            .chunk(w.e.chunk)
            .ok_or_else(|| missing_chunk(snap, w))?;
        let Some(map) = chunk.map() else {
            return Ok(None);
        };
        maps.push(Some(map));
    }
    let item = |w: &Want| {
        snap.tables
            .get(w.field)
            .map_or(1, |t| t.meta.dtype.item_bytes() as usize)
    };
    let copied: Vec<bool> = wants
        .iter()
        .zip(&maps)
        .map(|(w, m)| {
            m.is_some_and(|m| {
                w.e.codec == Codec::Deflate
                    || !(m.bytes().as_ptr() as usize)
                        .wrapping_add(w.e.offset as usize)
                        .is_multiple_of(item(w))
            })
        })
        .collect();
    let (mut buf, starts) = slab(
        wants
            .iter()
            .zip(&copied)
            .filter(|(_, &c)| c)
            .map(|(w, _)| w.e.logical_len as usize),
        SLOT_ALIGN,
    );
    // Owner 0 is the slab; each chunk mapping the batch touches gets one owner.
    let mut owners: Vec<Bytes> = vec![Bytes::new()];
    let mut owner_chunks: Vec<u16> = vec![u16::MAX];
    let mut last = (u16::MAX, 0u32);
    let mut spans = Vec::with_capacity(wants.len());
    let mut tasks = Vec::with_capacity(wants.len());
    let mut slots = starts.iter();
    for (pos, (w, map)) in wants.iter().zip(&maps).enumerate() {
        let Some(map) = map else {
            spans.push(EMPTY);
            continue;
        };
        let (start, end) = (w.e.offset as usize, w.e.end() as usize);
        let stored = map
            .bytes()
            .get(start..end)
            .ok_or_else(|| missing_chunk(snap, w))?;
        if !copied.get(pos).copied().unwrap_or(false) {
            let owner = if last.0 == w.e.chunk && last.1 != 0 {
                last.1
            } else {
                let o = match owner_chunks.iter().position(|&c| c == w.e.chunk) {
                    Some(o) => o as u32,
                    None => {
                        owners.push(map.bytes().clone());
                        owner_chunks.push(w.e.chunk);
                        (owners.len() - 1) as u32
                    }
                };
                last = (w.e.chunk, o);
                o
            };
            spans.push(Span {
                owner,
                start,
                len: end - start,
            });
            if opts.verify_checksums {
                tasks.push(Task {
                    w,
                    stored,
                    dst: None,
                });
            }
            continue;
        }
        let at = slots.next().copied().unwrap_or(0);
        let len = w.e.logical_len as usize;
        spans.push(Span {
            owner: 0,
            start: at,
            len,
        });
        tasks.push(Task {
            w,
            stored,
            dst: Some((at, len)),
        });
    }
    run_parallel(snap, &tasks, &mut buf, opts.verify_checksums)?;
    drop(tasks);
    if let Some(o) = owners.first_mut() {
        *o = Bytes::from(buf);
    }
    Ok(Some(Values { owners, spans }))
}

/// Where a record's stored bytes land: its output slot (raw, buffered) or the staging buffer.
#[derive(Clone, Copy)]
struct Landing {
    staged: bool,
    at: usize,
}

fn set(landing: &mut [Landing], i: usize, l: Landing) {
    if let Some(slot) = landing.get_mut(i) {
        *slot = l;
    }
}

/// The I/O path: positioned reads through io_uring or the pread pool, sorted by (chunk,
/// offset) and coalesced, straight into the output slots where no transformation is needed.
fn gather_io(
    snap: &Snapshot,
    wants: &[Want],
    opts: &ReadOptions,
    backend: Backend,
) -> Result<Values> {
    let (out, starts) = slab(wants.iter().map(|w| w.e.logical_len as usize), SLOT_ALIGN);
    let mut order: Vec<usize> = (0..wants.len())
        .filter(|&i| wants.get(i).is_some_and(|w| w.e.physical_len > 0))
        .collect();
    order.sort_unstable_by_key(|&i| wants.get(i).map(|w| (w.e.chunk, w.e.offset)));

    let mut job = IoJob::default();
    let mut landing = vec![
        Landing {
            staged: false,
            at: 0
        };
        wants.len()
    ];
    let mut staging_len = 0usize;
    let mut current: Option<(u16, bool)> = None; // (chunk, direct) of the last file pushed
    let mut op_end = 0u64; // file offset where the last op ends
    for &i in &order {
        let Some(w) = wants.get(i) else { continue };
        let chunk = snap
            .chunk(w.e.chunk)
            .ok_or_else(|| missing_chunk(snap, w))?;
        let direct_file = if opts.direct_io { chunk.direct() } else { None };
        let direct = direct_file.is_some();
        if current != Some((w.e.chunk, direct)) {
            job.files
                .push(Arc::clone(direct_file.unwrap_or(&chunk.file)));
            current = Some((w.e.chunk, direct));
            op_end = u64::MAX;
        }
        let file = job.files.len() - 1;
        let len = w.e.physical_len as usize;
        if direct {
            // Aligned span around the record; extend the previous op if the spans touch.
            let a = DIRECT_ALIGN as u64;
            let start = w.e.offset / a * a;
            let end = w.e.end().next_multiple_of(a);
            let extend = job.ops.last().is_some_and(|op| {
                op.file == file && start <= op_end && (end - op.offset) as usize <= MAX_OP_BYTES
            }) && op_end != u64::MAX;
            if extend {
                if let (Some(op), Some(p)) = (job.ops.last_mut(), job.pieces.last_mut()) {
                    if end > op_end {
                        let grow = (end - op_end) as usize;
                        p.len += grow;
                        staging_len += grow;
                        op_end = end;
                    }
                    op.need = op.need.max((w.e.end() - op.offset) as usize);
                    set(
                        &mut landing,
                        i,
                        Landing {
                            staged: true,
                            at: p.at + (w.e.offset - op.offset) as usize,
                        },
                    );
                }
            } else {
                let span = (end - start) as usize;
                // Direct reads need 4 KiB-aligned destinations, whatever was staged before.
                staging_len = staging_len.next_multiple_of(DIRECT_ALIGN);
                job.pieces.push(Piece {
                    buf: 1,
                    at: staging_len,
                    len: span,
                });
                job.ops.push(ReadOp {
                    file,
                    offset: start,
                    need: (w.e.end() - start) as usize,
                    pieces: job.pieces.len() - 1..job.pieces.len(),
                });
                set(
                    &mut landing,
                    i,
                    Landing {
                        staged: true,
                        at: staging_len + (w.e.offset - start) as usize,
                    },
                );
                staging_len += span;
                op_end = end;
            }
            continue;
        }
        let staged = w.e.codec == Codec::Deflate;
        let at = if staged {
            let at = staging_len;
            staging_len += len.next_multiple_of(SLOT_ALIGN);
            at
        } else {
            starts.get(i).copied().unwrap_or(0)
        };
        set(&mut landing, i, Landing { staged, at });
        let piece = Piece {
            buf: usize::from(staged),
            at,
            len,
        };
        let extend = op_end == w.e.offset
            && job.ops.last().is_some_and(|op| {
                op.file == file && op.pieces.len() < MAX_OP_PIECES && op.need + len <= MAX_OP_BYTES
            });
        job.pieces.push(piece);
        let n = job.pieces.len();
        match (extend, job.ops.last_mut()) {
            (true, Some(op)) => {
                op.pieces.end = n;
                op.need += len;
            }
            _ => job.ops.push(ReadOp {
                file,
                offset: w.e.offset,
                need: len,
                pieces: n - 1..n,
            }),
        }
        op_end = w.e.end();
    }

    // Buffers: the output slab, and the staging buffer aligned for O_DIRECT when used.
    let align = if opts.direct_io {
        DIRECT_ALIGN
    } else {
        SLOT_ALIGN
    };
    let staging = vec![0u8; staging_len + if staging_len > 0 { align } else { 0 }];
    let pad = staging.as_ptr().align_offset(align).min(align);
    if staging_len > 0 {
        for p in job.pieces.iter_mut().filter(|p| p.buf == 1) {
            p.at += pad;
        }
        for l in landing.iter_mut().filter(|l| l.staged) {
            l.at += pad;
        }
    }
    job.bufs = vec![out, staging];
    if !job.ops.is_empty() {
        let exec = io::executor(backend)?;
        job = exec.run(job)?;
    }
    let mut bufs = std::mem::take(&mut job.bufs).into_iter();
    let mut out = bufs.next().unwrap_or_default();
    let staging = bufs.next().unwrap_or_default();

    // Check in place what landed in its slot; then check, inflate or copy out of staging.
    if opts.verify_checksums {
        let mut in_place = Vec::new();
        for (w, l) in wants.iter().zip(&landing) {
            if w.e.physical_len == 0 || l.staged {
                continue;
            }
            let plen = w.e.physical_len as usize;
            let stored = out
                .get(l.at..l.at + plen)
                .ok_or_else(|| missing_chunk(snap, w))?;
            in_place.push(Task {
                w,
                stored,
                dst: None,
            });
        }
        run_parallel(snap, &in_place, &mut [], true)?;
    }
    let mut staged = Vec::new();
    for ((w, l), &slot) in wants.iter().zip(&landing).zip(&starts) {
        if w.e.physical_len == 0 || !l.staged {
            continue;
        }
        let plen = w.e.physical_len as usize;
        let stored = staging
            .get(l.at..l.at + plen)
            .ok_or_else(|| missing_chunk(snap, w))?;
        staged.push(Task {
            w,
            stored,
            dst: Some((slot, w.e.logical_len as usize)),
        });
    }
    run_parallel(snap, &staged, &mut out, opts.verify_checksums)?;
    drop(staged);
    let spans = wants
        .iter()
        .zip(&starts)
        .map(|(w, &start)| Span {
            owner: 0,
            start,
            len: w.e.logical_len as usize,
        })
        .collect();
    Ok(Values {
        owners: vec![Bytes::from(out)],
        spans,
    })
}
