//! Gathered records: one owned slab per batch, every slot 64-byte aligned, in caller order.

use crate::error::{Error, Result};
use crate::format::dtype::DType;
use bytes::Bytes;
use std::sync::Arc;

/// A batch's fields: name and dtype, in order.
pub(crate) type FieldNames = Arc<[(String, DType)]>;

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
    pub(crate) owners: Vec<Bytes>,
    pub(crate) spans: Vec<Span>,
}

/// One value: `len` bytes at `start` of owner `owner`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span {
    pub(crate) owner: u32,
    pub(crate) start: usize,
    pub(crate) len: usize,
}

/// The empty value.
pub(crate) const EMPTY: Span = Span {
    owner: u32::MAX,
    start: 0,
    len: 0,
};

impl Values {
    /// Appends `other`'s values after these (its owners renumbered after ours).
    pub(crate) fn append(&mut self, other: Values) {
        let base = self.owners.len() as u32;
        self.owners.extend(other.owners);
        self.spans
            .extend(other.spans.into_iter().map(|s| match s.len {
                0 => s,
                _ => Span {
                    owner: s.owner + base,
                    ..s
                },
            }));
    }

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
    pub(crate) fn new(values: Values, indices: Vec<u64>, fields: Arc<[(String, DType)]>) -> Batch {
        Batch {
            values,
            indices,
            fields,
        }
    }

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
        // An absent value is an empty slice of any type: its bytes may sit at any address (the
        // empty span is not a slot of the slab), so it must not be alignment-checked.
        if bytes.is_empty() {
            return Ok(&[]);
        }
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

/// A 64-byte-aligned slab with one slot per length, and the slot starts.
pub(crate) fn slab(lens: impl Iterator<Item = usize>, align: usize) -> (Vec<u8>, Vec<usize>) {
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
