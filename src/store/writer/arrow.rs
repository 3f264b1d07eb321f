//! Arrow record batches in ([`Writer::append_record_batch`], feature `arrow`): each column is
//! matched to the field of its name, its Arrow type checked against the field's dtype and
//! shape once per batch, and each row's value handed to the append path as a slice of the
//! column's own Arrow buffers (no copy and no allocation per record; a boolean column, which
//! Arrow packs to bits, is unpacked once per batch).
//!
//! | Arrow type | fits a field of |
//! |---|---|
//! | `Int8`…`UInt64`, `Float16/32/64`, `Boolean` | the same dtype, shape `[]` (or variable length: one item) |
//! | `FixedSizeList<T, n>` (nested: `FixedSizeList<FixedSizeList<T, m>, n>`) | dtype of `T`, shape `[n]` (`[n, m]`), or variable length |
//! | `FixedSizeBinary(n)` | `bytes` or `u8`, shape `[n]`, or variable length |
//! | `Binary`, `LargeBinary`, `Utf8`, `LargeUtf8`, `BinaryView`, `Utf8View` | `bytes` or `u8`, variable length |
//! | `List<T>`, `LargeList<T>` (`T` primitive) | dtype of `T`, variable length |
//!
//! A `u8` column fits a `bytes` field too, and a `UInt16` column a `bf16` field (raw bits:
//! Arrow has no bfloat16). Anything else (a struct, a dictionary, a list of lists, a date, a
//! decimal, another dtype or shape) is refused with [`Error::ArrowType`]. A null value of a
//! variable-length field is stored as an absent value (an empty entry, physical length 0, as
//! `append` stores an empty value). A null value of a fixed-shape field is refused
//! ([`Error::ArrowValue`]): the format could store it as absent, but a gathered batch's array of
//! that shape has no slot for it, so every reader of the field would fail on it. A null item
//! inside a list is refused too: the format stores no item-level validity.

use super::wait::wait;
use super::Writer;
use crate::error::{Error, Result};
use crate::format::dtype::DType;
use crate::format::meta::FieldMeta;
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float16Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type,
    UInt32Type, UInt64Type, UInt8Type,
};
use arrow_array::{Array, BinaryViewArray, RecordBatch, StringViewArray};
use arrow_buffer::NullBuffer;
use arrow_schema::DataType;
use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;

// Arrow buffers hold values in the host's byte order, handed to the writer as they are; the
// format is little-endian.
const _: () = assert!(
    cfg!(target_endian = "little"),
    "the arrow feature hands Arrow's native-endian buffers to a little-endian format"
);

impl Writer {
    /// Appends the rows of `batch`, one record per row, and returns their indices, which are
    /// consecutive. Columns are matched to fields by name: every field needs a column and every
    /// column a field ([`Error::ArrowColumns`] names the missing, extra and duplicated ones).
    /// Each column's Arrow type must fit its field:
    ///
    /// | Arrow type | fits a field of |
    /// |---|---|
    /// | `Int8`…`UInt64`, `Float16/32/64`, `Boolean` | the same dtype, shape `[]` (or variable length: one item) |
    /// | `FixedSizeList<T, n>`, nested: `FixedSizeList<FixedSizeList<T, m>, n>` | the dtype of `T`, shape `[n]` (`[n, m]`), or variable length |
    /// | `FixedSizeBinary(n)` | `bytes` or `u8`, shape `[n]`, or variable length |
    /// | `Binary`, `LargeBinary`, `Utf8`, `LargeUtf8`, `BinaryView`, `Utf8View` | `bytes` or `u8`, variable length |
    /// | `List<T>`, `LargeList<T>`, `T` primitive | the dtype of `T`, variable length |
    ///
    /// A `UInt8` column fits a `bytes` field too, and a `UInt16` column a `bf16` field (raw
    /// bits: Arrow has no bfloat16). Anything else is refused with [`Error::ArrowType`], naming
    /// the column, its Arrow type and the field's dtype. A null value of a variable-length field
    /// is stored as an absent value (an empty entry, as [`Writer::append`] stores an empty
    /// value); a null value of a fixed-shape field (a gathered batch's array of that shape has
    /// no slot for it) and a null item inside a list are refused ([`Error::ArrowValue`], naming
    /// the column and the row).
    ///
    /// Every row is checked before any is taken: on an error, none is appended (and the writer
    /// is not poisoned). Values go to the append path as slices of the batch's Arrow buffers
    /// (sliced batches included): no copy but the one into the append tasks' jobs, and no
    /// allocation per record (a boolean column, bit-packed in Arrow, is unpacked once per
    /// batch). Blocks while the append tasks' queues are full (backpressure), like
    /// [`Writer::append_many`].
    ///
    /// Feature `arrow`.
    #[cfg(feature = "arrow")]
    pub fn append_record_batch(&mut self, batch: &RecordBatch) -> Result<Range<u64>> {
        wait(self.ready())?;
        let columns = columns(&self.field_metas, batch)?;
        let rows = batch.num_rows();
        for c in &columns {
            c.check_nulls(rows)?;
        }
        self.check_rows(rows, |r, out| fill(&columns, r, out))?;
        let start = self.len;
        let mut values = Vec::with_capacity(columns.len());
        for r in 0..rows {
            fill(&columns, r, &mut values)?;
            // Checked above, as a batch: this cannot fail.
            self.accept_record(&values)?;
            if !self.outbox.is_empty() {
                // Hand each full job over before copying more: memory stays bounded.
                wait(self.send_outbox())?;
            }
        }
        Ok(start..self.len)
    }
}

/// Row `r`'s value of every column, in schema order, into `out`.
fn fill<'c>(columns: &'c [Column<'_>], r: usize, out: &mut Vec<&'c [u8]>) -> Result<()> {
    out.clear();
    for c in columns {
        out.push(c.value(r)?);
    }
    Ok(())
}

/// The batch's columns in schema order, each checked against its field.
fn columns<'a>(fields: &[FieldMeta], batch: &'a RecordBatch) -> Result<Vec<Column<'a>>> {
    let schema = batch.schema_ref();
    let mut by_name: HashMap<&str, usize> = HashMap::new();
    let mut duplicated = Vec::new();
    for (i, f) in schema.fields().iter().enumerate() {
        if by_name.insert(f.name().as_str(), i).is_some() && !duplicated.contains(f.name()) {
            duplicated.push(f.name().clone());
        }
    }
    let missing: Vec<String> = fields
        .iter()
        .filter(|f| !by_name.contains_key(f.name.as_str()))
        .map(|f| f.name.clone())
        .collect();
    let extra: Vec<String> = schema
        .fields()
        .iter()
        .filter(|c| !fields.iter().any(|f| &f.name == c.name()))
        .map(|c| c.name().clone())
        .collect();
    if !missing.is_empty() || !extra.is_empty() || !duplicated.is_empty() {
        return Err(Error::ArrowColumns {
            missing,
            extra,
            duplicated,
        });
    }
    let mut out = Vec::with_capacity(fields.len());
    for f in fields {
        let array = by_name
            .get(f.name.as_str())
            .and_then(|&i| batch.columns().get(i))
            .ok_or_else(|| Error::internal(format!("column {:?} vanished", f.name)))?;
        out.push(Column::new(f, array.as_ref())?);
    }
    Ok(out)
}

/// A field's dtype and shape as error messages name it: `u8 [64]`, `u32 []` (one item),
/// `bytes (variable length)`.
fn field_text(f: &FieldMeta) -> String {
    match &f.shape {
        Some(shape) => format!("{} {shape:?}", f.dtype),
        None => format!("{} (variable length)", f.dtype),
    }
}

/// Whether items of Arrow's `column` dtype can be stored in a field of dtype `field`.
fn dtype_fits(field: DType, column: DType) -> bool {
    field == column
        || (field == DType::Bytes && column == DType::U8)
        || (field == DType::Bf16 && column == DType::U16)
}

/// The items of a fixed-width array (a primitive, or fixed-size lists of them, nested): their
/// dtype, the shape of one row, their bytes (the array's slice of its buffers), and the
/// validity of every nested level below the rows, with the number of its slots per row.
struct Fixed<'a> {
    dtype: DType,
    shape: Vec<u64>,
    bytes: Cow<'a, [u8]>,
    inner_nulls: Vec<(&'a NullBuffer, usize)>,
}

/// The dtype and bytes of a primitive or boolean array, `None` for any other type.
fn primitive(array: &dyn Array) -> Option<(DType, Cow<'_, [u8]>)> {
    fn bytes<T: arrow_array::ArrowPrimitiveType>(a: &dyn Array) -> Option<Cow<'_, [u8]>> {
        a.as_primitive_opt::<T>()
            .map(|p| Cow::Borrowed(p.values().inner().as_slice()))
    }
    let (dtype, b) = match array.data_type() {
        DataType::Int8 => (DType::I8, bytes::<Int8Type>(array)),
        DataType::Int16 => (DType::I16, bytes::<Int16Type>(array)),
        DataType::Int32 => (DType::I32, bytes::<Int32Type>(array)),
        DataType::Int64 => (DType::I64, bytes::<Int64Type>(array)),
        DataType::UInt8 => (DType::U8, bytes::<UInt8Type>(array)),
        DataType::UInt16 => (DType::U16, bytes::<UInt16Type>(array)),
        DataType::UInt32 => (DType::U32, bytes::<UInt32Type>(array)),
        DataType::UInt64 => (DType::U64, bytes::<UInt64Type>(array)),
        DataType::Float16 => (DType::F16, bytes::<Float16Type>(array)),
        DataType::Float32 => (DType::F32, bytes::<Float32Type>(array)),
        DataType::Float64 => (DType::F64, bytes::<Float64Type>(array)),
        // Arrow packs booleans to bits; zrecord stores one byte per item: unpacked once.
        DataType::Boolean => (
            DType::Bool,
            array
                .as_boolean_opt()
                .map(|b| Cow::Owned(b.values().iter().map(u8::from).collect())),
        ),
        _ => return None,
    };
    Some((dtype, b?))
}

/// `array` as fixed-width items, or why not.
fn fixed(array: &dyn Array) -> std::result::Result<Fixed<'_>, String> {
    if let Some((dtype, bytes)) = primitive(array) {
        return Ok(Fixed {
            dtype,
            shape: Vec::new(),
            bytes,
            inner_nulls: Vec::new(),
        });
    }
    if let Some(list) = array.as_fixed_size_list_opt() {
        let n =
            usize::try_from(list.value_length()).map_err(|_| "a negative list size".to_string())?;
        // A fixed-size list's values are sliced with it: row r is values[r*n..(r+1)*n].
        let child = list.values().as_ref();
        let mut inner = fixed(child)?;
        let mut inner_nulls = Vec::with_capacity(inner.inner_nulls.len() + 1);
        if let Some(nulls) = child.logical_nulls_ref() {
            inner_nulls.push((nulls, n));
        }
        for (nulls, per) in inner.inner_nulls.drain(..) {
            inner_nulls.push((nulls, per.saturating_mul(n)));
        }
        let mut shape = vec![n as u64];
        shape.extend_from_slice(&inner.shape);
        return Ok(Fixed {
            dtype: inner.dtype,
            shape,
            bytes: inner.bytes,
            inner_nulls,
        });
    }
    Err(match array.data_type() {
        DataType::Dictionary(..) => "dictionary arrays are not decoded: cast to the value type",
        DataType::Struct(_) => "a struct is not a field value: give each member its own column",
        DataType::List(_) | DataType::LargeList(_) => "a list of lists has no fixed shape",
        _ => "this Arrow type has no zrecord dtype",
    }
    .to_string())
}

/// A column's null buffer, if any of its values is null.
trait LogicalNulls {
    fn logical_nulls_ref(&self) -> Option<&NullBuffer>;
}

impl LogicalNulls for dyn Array + '_ {
    fn logical_nulls_ref(&self) -> Option<&NullBuffer> {
        self.nulls().filter(|n| n.null_count() > 0)
    }
}

/// Where row `r`'s bytes are.
enum Rows<'a> {
    /// Row r is `bytes[r*width..(r+1)*width]`.
    Fixed {
        bytes: Cow<'a, [u8]>,
        width: usize,
    },
    /// Row r is `bytes[off[r]*item..off[r+1]*item]`.
    Offsets32 {
        bytes: Cow<'a, [u8]>,
        item: usize,
        offsets: &'a [i32],
    },
    /// As `Offsets32`, with 64-bit offsets.
    Offsets64 {
        bytes: Cow<'a, [u8]>,
        item: usize,
        offsets: &'a [i64],
    },
    BinaryView(&'a BinaryViewArray),
    StringView(&'a StringViewArray),
}

/// One column, checked against its field.
struct Column<'a> {
    name: String,
    rows: Rows<'a>,
    /// Row validity: a null row is an absent value.
    nulls: Option<&'a NullBuffer>,
    /// Item validity inside rows (fixed-size lists: per level, with slots per row; lists: the
    /// child's), checked before any row is taken.
    inner_nulls: Vec<(&'a NullBuffer, usize)>,
    /// For lists: the child's validity, indexed by the offsets.
    list_nulls: Option<&'a NullBuffer>,
    /// The field's fixed shape, if it has one: a null row is refused there.
    fixed_shape: Option<Vec<u64>>,
}

impl<'a> Column<'a> {
    fn new(field: &FieldMeta, array: &'a dyn Array) -> Result<Column<'a>> {
        let refuse = |reason: &str| Error::ArrowType {
            column: field.name.clone(),
            arrow_type: array.data_type().to_string(),
            dtype: field_text(field),
            reason: reason.to_string(),
        };
        let nulls = array.logical_nulls_ref();
        let bytes_field = matches!(field.dtype, DType::Bytes | DType::U8);
        let variable_bytes = || {
            if !bytes_field {
                return Err(refuse("binary and string values fit a bytes or u8 field"));
            }
            if field.shape.is_some() {
                return Err(refuse(
                    "values of any length need a variable-length field (no shape)",
                ));
            }
            Ok(())
        };
        let column = |rows: Rows<'a>| Column {
            name: field.name.clone(),
            rows,
            nulls,
            inner_nulls: Vec::new(),
            list_nulls: None,
            fixed_shape: field.shape.clone(),
        };
        match array.data_type() {
            DataType::Binary | DataType::Utf8 | DataType::LargeBinary | DataType::LargeUtf8 => {
                variable_bytes()?;
                let rows = match array.data_type() {
                    DataType::Binary => array.as_binary_opt::<i32>().map(|a| Rows::Offsets32 {
                        bytes: Cow::Borrowed(a.value_data()),
                        item: 1,
                        offsets: a.value_offsets(),
                    }),
                    DataType::Utf8 => array.as_string_opt::<i32>().map(|a| Rows::Offsets32 {
                        bytes: Cow::Borrowed(a.value_data()),
                        item: 1,
                        offsets: a.value_offsets(),
                    }),
                    DataType::LargeBinary => {
                        array.as_binary_opt::<i64>().map(|a| Rows::Offsets64 {
                            bytes: Cow::Borrowed(a.value_data()),
                            item: 1,
                            offsets: a.value_offsets(),
                        })
                    }
                    _ => array.as_string_opt::<i64>().map(|a| Rows::Offsets64 {
                        bytes: Cow::Borrowed(a.value_data()),
                        item: 1,
                        offsets: a.value_offsets(),
                    }),
                };
                rows.map(column)
                    .ok_or_else(|| refuse("not the array its type says"))
            }
            DataType::BinaryView => {
                variable_bytes()?;
                let a = array.as_binary_view_opt();
                a.map(|a| column(Rows::BinaryView(a)))
                    .ok_or_else(|| refuse("not the array its type says"))
            }
            DataType::Utf8View => {
                variable_bytes()?;
                let a = array.as_string_view_opt();
                a.map(|a| column(Rows::StringView(a)))
                    .ok_or_else(|| refuse("not the array its type says"))
            }
            DataType::FixedSizeBinary(n) => {
                if !bytes_field {
                    return Err(refuse("binary values fit a bytes or u8 field"));
                }
                let width = usize::try_from(*n).map_err(|_| refuse("a negative width"))?;
                if let Some(shape) = &field.shape {
                    if shape.as_slice() != [width as u64] {
                        return Err(refuse(&format!(
                            "values of {width} bytes need shape [{width}] or a variable-length field"
                        )));
                    }
                }
                let a = array
                    .as_fixed_size_binary_opt()
                    .ok_or_else(|| refuse("not the array its type says"))?;
                // A fixed-size binary array's values are sliced with it: row r is at r*width.
                Ok(column(Rows::Fixed {
                    bytes: Cow::Borrowed(a.value_data()),
                    width,
                }))
            }
            DataType::List(_) | DataType::LargeList(_) => {
                if field.shape.is_some() {
                    return Err(refuse(
                        "lists of any length need a variable-length field (no shape)",
                    ));
                }
                let (child, rows): (&'a dyn Array, _) = match array.as_list_opt::<i32>() {
                    Some(l) => (l.values().as_ref(), ListOffsets::I32(l.value_offsets())),
                    None => match array.as_list_opt::<i64>() {
                        Some(l) => (l.values().as_ref(), ListOffsets::I64(l.value_offsets())),
                        None => return Err(refuse("not the array its type says")),
                    },
                };
                let items = fixed(child).map_err(|r| refuse(&format!("list items: {r}")))?;
                if !items.shape.is_empty() {
                    return Err(refuse(
                        "a list of fixed-size lists has no flat item type: flatten it",
                    ));
                }
                if !dtype_fits(field.dtype, items.dtype) {
                    return Err(refuse(&format!(
                        "items of {} do not fit {}",
                        items.dtype, field.dtype
                    )));
                }
                let item = items.dtype.item_bytes() as usize;
                let rows = match rows {
                    ListOffsets::I32(offsets) => Rows::Offsets32 {
                        bytes: items.bytes,
                        item,
                        offsets,
                    },
                    ListOffsets::I64(offsets) => Rows::Offsets64 {
                        bytes: items.bytes,
                        item,
                        offsets,
                    },
                };
                Ok(Column {
                    list_nulls: child.logical_nulls_ref(),
                    ..column(rows)
                })
            }
            _ => {
                let items = fixed(array).map_err(|r| refuse(&r))?;
                if !dtype_fits(field.dtype, items.dtype) {
                    return Err(refuse(&format!(
                        "items of {} do not fit {}",
                        items.dtype, field.dtype
                    )));
                }
                if let Some(shape) = &field.shape {
                    if shape != &items.shape {
                        return Err(refuse(&format!(
                            "rows of shape {:?} need that shape or a variable-length field",
                            items.shape
                        )));
                    }
                }
                let count: u64 = items.shape.iter().product();
                let width = usize::try_from(count.saturating_mul(items.dtype.item_bytes()))
                    .map_err(|_| refuse("rows too large"))?;
                Ok(Column {
                    inner_nulls: items.inner_nulls,
                    ..column(Rows::Fixed {
                        bytes: items.bytes,
                        width,
                    })
                })
            }
        }
    }

    fn bad(&self, r: usize, reason: impl Into<String>) -> Error {
        Error::ArrowValue {
            column: self.name.clone(),
            row: r as u64,
            reason: reason.into(),
        }
    }

    fn is_null(&self, r: usize) -> bool {
        self.nulls.is_some_and(|n| n.is_null(r))
    }

    /// Row `r`'s bytes: empty for a null row.
    fn value(&self, r: usize) -> Result<&[u8]> {
        if self.is_null(r) {
            return Ok(&[]);
        }
        let out = match &self.rows {
            Rows::Fixed { bytes, width } => {
                let start = r.saturating_mul(*width);
                bytes.get(start..start.saturating_add(*width))
            }
            Rows::Offsets32 {
                bytes,
                item,
                offsets,
            } => self
                .span(r, offsets.get(r).copied(), offsets.get(r + 1).copied())
                .and_then(|(a, b)| bytes.get(a * item..b * item)),
            Rows::Offsets64 {
                bytes,
                item,
                offsets,
            } => self
                .span(r, offsets.get(r).copied(), offsets.get(r + 1).copied())
                .and_then(|(a, b)| bytes.get(a * item..b * item)),
            Rows::BinaryView(a) => (r < a.len()).then(|| a.value(r)),
            Rows::StringView(a) => (r < a.len()).then(|| a.value(r).as_bytes()),
        };
        out.ok_or_else(|| self.bad(r, "offsets outside the column's values"))
    }

    /// A list row's item range, if its offsets are sound.
    fn span<O: TryInto<usize>>(
        &self,
        _r: usize,
        a: Option<O>,
        b: Option<O>,
    ) -> Option<(usize, usize)> {
        let a = a?.try_into().ok()?;
        let b = b?.try_into().ok()?;
        (a <= b).then_some((a, b))
    }

    /// Refuses a null row of a fixed-shape field, and a null item inside a row that is not
    /// null itself.
    fn check_nulls(&self, rows: usize) -> Result<()> {
        if let (Some(shape), Some(nulls)) = (&self.fixed_shape, self.nulls) {
            if let Some(r) = (0..rows).find(|&r| nulls.is_null(r)) {
                return Err(self.bad(
                    r,
                    format!(
                        "a null value in a field of fixed shape {shape:?}: a batch's array of \
                         that shape has no slot for an absent value; declare the field without \
                         a shape to store nulls as absent values"
                    ),
                ));
            }
        }
        for (nulls, per) in &self.inner_nulls {
            for r in 0..rows {
                if !self.is_null(r) && (r * per..(r + 1) * per).any(|i| nulls.is_null(i)) {
                    return Err(self.bad(
                        r,
                        "a null item inside a value (only whole values can be null)",
                    ));
                }
            }
        }
        if let Some(nulls) = self.list_nulls {
            for r in 0..rows {
                if self.is_null(r) {
                    continue;
                }
                let span = match &self.rows {
                    Rows::Offsets32 { offsets, .. } => {
                        self.span(r, offsets.get(r).copied(), offsets.get(r + 1).copied())
                    }
                    Rows::Offsets64 { offsets, .. } => {
                        self.span(r, offsets.get(r).copied(), offsets.get(r + 1).copied())
                    }
                    _ => None,
                };
                let (a, b) =
                    span.ok_or_else(|| self.bad(r, "offsets outside the column's values"))?;
                if (a..b).any(|i| i >= nulls.len() || nulls.is_null(i)) {
                    return Err(self.bad(
                        r,
                        "a null item inside a value (only whole values can be null)",
                    ));
                }
            }
        }
        Ok(())
    }
}

enum ListOffsets<'a> {
    I32(&'a [i32]),
    I64(&'a [i64]),
}
