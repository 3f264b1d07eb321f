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
/// zero-copy slice of a chunk mapping (raw records served by the mmap path); read with
/// [`crate::ReadConfig::with_columns`], each field's values lie end to end in a buffer of the
/// field's own (or in a mapping) instead, so [`Batch::column`] serves every field. The batch holds
/// one reference per slab or mapping, not one per value. Dropping the batch frees its memory; a
/// [`Bytes`] from [`Batch::bytes`] keeps its slab or mapping alive on its own.
#[derive(Clone, Debug)]
pub struct Batch {
    values: Values,
    indices: Vec<u64>,
    fields: Arc<[(String, DType)]>,
    /// Each field's fixed item shape, by position (`None`: no fixed shape); empty when the
    /// producer declared no shapes.
    shapes: FieldShapes,
}

/// The fixed item shapes of a batch's fields, by position.
pub(crate) type FieldShapes = Arc<[Option<Vec<u64>>]>;

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

    /// The bytes of `s` (empty for a span out of its owner, which the read engine never makes).
    pub(crate) fn bytes_of(&self, s: Span) -> Bytes {
        match self.owners.get(s.owner as usize) {
            Some(o) if s.len > 0 && s.start + s.len <= o.len() => o.slice(s.start..s.start + s.len),
            _ => Bytes::new(),
        }
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
            shapes: Arc::new([]),
        }
    }

    /// The batch with its fields' fixed item shapes (by position), which [`Batch::typed`]
    /// checks every value against.
    pub(crate) fn with_shapes(mut self, shapes: FieldShapes) -> Batch {
        self.shapes = shapes;
        self
    }

    /// The batch's parts: values, indices, fields and shapes (for a transform that rebuilds it).
    pub(crate) fn into_parts(self) -> (Values, Vec<u64>, FieldNames, FieldShapes) {
        (self.values, self.indices, self.fields, self.shapes)
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

    /// A typed view of a record, checked against the field's dtype and, if the field declares
    /// a fixed item shape, against that shape: a present value must be exactly
    /// `product(shape)` items. An absent value is an empty slice.
    ///
    /// # Errors
    /// [`Error::UnknownField`] for a field position out of range; [`Error::IndexOutOfRange`]
    /// for a record out of range; [`Error::DtypeMismatch`] if `T` is not the field's dtype;
    /// [`Error::ShapeMismatch`], naming the field and the record, if the value's length is not
    /// a whole number of items or not the declared shape's (a `meta.json` that lies about a
    /// shape), or the value is misaligned for `T`.
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
        let mismatch = |what: String| Error::ShapeMismatch {
            field: name.clone(),
            reason: format!(
                "record {} (position {record} of the batch): {what}",
                self.indices.get(record).copied().unwrap_or(record as u64)
            ),
        };
        if let Some(Some(shape)) = self.shapes.get(field) {
            let item = T::DTYPE.item_bytes();
            let needed = shape.iter().try_fold(item, |acc, &d| acc.checked_mul(d));
            if needed != Some(bytes.len() as u64) {
                let needed = needed.map_or_else(|| "more than 2^64".into(), |n| n.to_string());
                return Err(mismatch(format!(
                    "{} bytes, but shape {shape:?} of {} needs {needed} bytes",
                    bytes.len(),
                    T::DTYPE
                )));
            }
        }
        bytemuck::try_cast_slice(bytes).map_err(|e| {
            mismatch(format!(
                "{} bytes cannot be viewed as {}: {e}",
                bytes.len(),
                T::DTYPE
            ))
        })
    }

    /// The fixed item shape of `field` (a position in [`Batch::fields`]), if its dataset
    /// declares one.
    pub fn shape(&self, field: usize) -> Option<&[u64]> {
        self.shapes.get(field)?.as_deref()
    }

    /// Every record's value of `field`, end to end in record order, as one zero-copy [`Bytes`],
    /// when they lie back to back in one buffer: always for a batch read with
    /// [`crate::ReadConfig::with_columns`] (but one put together from several sources' batches,
    /// as a `Concat` does), and otherwise for a single-field batch of raw records whose lengths
    /// are multiples of 64 bytes read into the slab, for instance. `None` when they do not (values
    /// in chunk mappings or in several slabs, slots padded apart) or `field` is out of range:
    /// read them with [`Batch::get`] then. A batch whose values of `field` are all empty gives
    /// an empty `Bytes`.
    pub fn column(&self, field: usize) -> Option<Bytes> {
        let mut run: Option<(u32, usize, usize)> = None;
        for record in 0..self.len() {
            let s = self.values.spans.get(self.position(record, field)?)?;
            if s.len == 0 {
                continue;
            }
            run = match run {
                None => Some((s.owner, s.start, s.start + s.len)),
                Some((owner, start, end)) if owner == s.owner && end == s.start => {
                    Some((owner, start, end + s.len))
                }
                Some(_) => return None,
            };
        }
        match run {
            None => (field < self.fields.len()).then(Bytes::new),
            Some((owner, start, end)) => {
                let o = self.values.owners.get(owner as usize)?;
                (end <= o.len()).then(|| o.slice(start..end))
            }
        }
    }

    /// The length in bytes of `field`'s value of the `record`-th record (0 for an absent one),
    /// or `None` if either is out of range.
    #[inline]
    pub fn value_len(&self, record: usize, field: usize) -> Option<usize> {
        Some(self.values.spans.get(self.position(record, field)?)?.len)
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

/// One batch put together from the batches of several parts: record `i` is record `picks[i].1`
/// of the batch at `picks[i].0` of `batches`, and its index is `indices[i]`. Zero-copy: the
/// result holds the parts' owners (slabs, mappings) and picks their spans. Each of `batches`
/// is `(part number, batch)`; the part numbers only name parts in errors.
///
/// # Errors
/// [`Error::SchemaMismatch`] if a batch's fields (names, dtypes, order) differ from the first
/// batch's; [`Error::Internal`] for a pick that names no record, a length mismatch or no batch.
pub(crate) fn concatenate(
    batches: Vec<(usize, Batch)>,
    picks: &[(usize, usize)],
    indices: Vec<u64>,
) -> Result<Batch> {
    let internal = |reason: String| Error::Internal {
        reason: format!("concatenating batches: {reason}"),
    };
    if picks.len() != indices.len() {
        return Err(internal(format!(
            "{} picks for {} indices",
            picks.len(),
            indices.len()
        )));
    }
    let (reference, fields, shapes) = match batches.first() {
        Some((part, b)) => (*part, Arc::clone(&b.fields), Arc::clone(&b.shapes)),
        None => return Err(internal("no batch".into())),
    };
    for (part, b) in &batches {
        let difference = field_difference(&fields, &b.fields)
            .or_else(|| shape_difference(&fields, &shapes, &b.shapes));
        if let Some(reason) = difference {
            let (field, reason) = reason;
            return Err(Error::SchemaMismatch {
                part: *part,
                reference,
                field,
                reason,
            });
        }
    }
    let nf = fields.len();
    let mut owners = Vec::new();
    let mut bases = Vec::with_capacity(batches.len());
    for (_, b) in &batches {
        bases.push(u32::try_from(owners.len()).map_err(|_| internal("too many owners".into()))?);
        owners.extend(b.values.owners.iter().cloned());
    }
    u32::try_from(owners.len()).map_err(|_| internal("too many owners".into()))?;
    let mut spans = Vec::with_capacity(picks.len().saturating_mul(nf));
    for &(b, r) in picks {
        let (batch, base) = batches
            .get(b)
            .map(|(_, batch)| batch)
            .zip(bases.get(b))
            .ok_or_else(|| internal(format!("pick of batch {b} of {}", batches.len())))?;
        let record = r
            .checked_mul(nf)
            .and_then(|start| batch.values.spans.get(start..start.checked_add(nf)?))
            .ok_or_else(|| internal(format!("pick of record {r} of {}", batch.len())))?;
        spans.extend(record.iter().map(|s| match s.len {
            0 => EMPTY,
            _ => Span {
                owner: s.owner.saturating_add(*base),
                ..*s
            },
        }));
    }
    Ok(Batch::new(Values { owners, spans }, indices, fields).with_shapes(shapes))
}

/// The first field whose fixed shape differs between two batches with the same fields, and
/// how; `None` if they agree (or either declares no shapes).
fn shape_difference(
    fields: &[(String, DType)],
    a: &[Option<Vec<u64>>],
    b: &[Option<Vec<u64>>],
) -> Option<(String, String)> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let show = |s: &Option<Vec<u64>>| s.as_ref().map_or("none".into(), |s| format!("{s:?}"));
    fields
        .iter()
        .zip(a.iter().zip(b))
        .find(|(_, (x, y))| x != y)
        .map(|((name, _), (x, y))| {
            (
                name.clone(),
                format!("shape {} here, {} in the reference part", show(y), show(x)),
            )
        })
}

/// The first difference between two field lists: the field's name and how it differs.
fn field_difference(a: &[(String, DType)], b: &[(String, DType)]) -> Option<(String, String)> {
    for (i, pair) in a.iter().zip(b.iter()).enumerate() {
        let ((an, ad), (bn, bd)) = pair;
        if an != bn {
            return Some((
                bn.clone(),
                format!("field #{i} is named {bn:?} here, {an:?} in the reference part"),
            ));
        }
        if ad != bd {
            return Some((
                bn.clone(),
                format!("dtype {bd} here, {ad} in the reference part"),
            ));
        }
    }
    match a.len().cmp(&b.len()) {
        std::cmp::Ordering::Equal => None,
        std::cmp::Ordering::Greater => a.get(b.len()).map(|(n, _)| {
            (
                n.clone(),
                format!(
                    "missing here ({} fields, the reference part has {})",
                    b.len(),
                    a.len()
                ),
            )
        }),
        std::cmp::Ordering::Less => b.get(a.len()).map(|(n, _)| {
            (
                n.clone(),
                format!(
                    "not in the reference part ({} fields here, {} there)",
                    b.len(),
                    a.len()
                ),
            )
        }),
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
