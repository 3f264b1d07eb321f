//! Gathered records: one owned slab per batch, every slot 64-byte aligned, in caller order.

use crate::error::{Error, Result};
use crate::format::dtype::DType;
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

#[derive(Clone, Copy, Debug)]
struct Slot {
    start: usize,
    len: usize,
}

/// Records gathered from a snapshot: `len()` records × `fields().len()` fields, in the order the
/// indices were given. Dropping the batch frees its memory; a [`Bytes`] from
/// [`Batch::bytes`] keeps the slab alive on its own.
#[derive(Clone, Debug)]
pub struct Batch {
    slab: Bytes,
    slots: Vec<Slot>,
    indices: Vec<u64>,
    fields: Arc<[(String, DType)]>,
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

    fn slot(&self, record: usize, field: usize) -> Option<Slot> {
        if field >= self.fields.len() {
            return None;
        }
        self.slots
            .get(record.checked_mul(self.fields.len())?.checked_add(field)?)
            .copied()
    }

    /// The bytes of `field` (a position in [`Batch::fields`]) of the `record`-th record, or
    /// `None` if either is out of range. An absent record is an empty slice.
    pub fn get(&self, record: usize, field: usize) -> Option<&[u8]> {
        let s = self.slot(record, field)?;
        self.slab.get(s.start..s.start + s.len)
    }

    /// Like [`Batch::get`], as a zero-copy [`Bytes`] that keeps the slab alive.
    pub fn bytes(&self, record: usize, field: usize) -> Option<Bytes> {
        let s = self.slot(record, field)?;
        Some(self.slab.slice(s.start..s.start + s.len))
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
        (0..self.len())
            .map(|r| (0..nf).filter_map(|f| self.bytes(r, f)).collect())
            .collect()
    }
}

/// Reads `indices` × `fields` from `snap` into one aligned slab, in caller order. Every index is
/// checked; every record's checksum is verified.
pub(crate) fn gather(snap: &Snapshot, indices: &[u64], fields: &[usize]) -> Result<Batch> {
    let mut entries = Vec::with_capacity(indices.len() * fields.len());
    let mut slots = Vec::with_capacity(entries.capacity());
    let mut total = 0usize;
    for &index in indices {
        for &f in fields {
            let e = snap.entry(f, index)?;
            let len = e.logical_len as usize;
            slots.push(Slot { start: total, len });
            total += len.next_multiple_of(SLOT_ALIGN);
            entries.push(e);
        }
    }
    // Over-allocate by one alignment unit and start the slots where the buffer is aligned.
    let mut buf = vec![0u8; total + SLOT_ALIGN];
    let pad = buf.as_ptr().align_offset(SLOT_ALIGN).min(SLOT_ALIGN);
    for s in &mut slots {
        s.start += pad;
    }
    let mut i = 0;
    for &index in indices {
        for &f in fields {
            let (Some(e), Some(s)) = (entries.get(i), slots.get(i)) else {
                break;
            };
            if let Some(out) = buf.get_mut(s.start..s.start + s.len) {
                snap.read_into(f, index, e, out)?;
            }
            i += 1;
        }
    }
    let names: Arc<[(String, DType)]> = fields
        .iter()
        .filter_map(|&f| {
            snap.tables
                .get(f)
                .map(|t| (t.meta.name.clone(), t.meta.dtype))
        })
        .collect();
    Ok(Batch {
        slab: Bytes::from(buf),
        slots,
        indices: indices.to_vec(),
        fields: names,
    })
}
