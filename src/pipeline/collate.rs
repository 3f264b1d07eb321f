//! Collate: one buffer per field of a gathered batch. [`stack`] for fixed-shape fields (what
//! `torch.utils.data.default_collate` does), d9d's `pad_stack_1d` for variable-length 1-D
//! records, and its token pooling masks.

use serde::{Deserialize, Serialize};

use crate::store::read::batch::Element;
use crate::{Error, Result};

/// The side padding goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum PadSide {
    /// After the record (the default).
    #[default]
    Right,
    /// Before the record (for left-padded generation).
    Left,
}

/// Which tokens a pooling reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PoolingType {
    /// The first token of the record (e.g. `[CLS]`).
    First,
    /// The last token of the record (e.g. a decoder's final token).
    Last,
    /// Every token of the record (e.g. mean pooling).
    All,
}

/// Padding options of [`pad_stack`].
///
/// Built from [`PadConfig::default`] or [`PadConfig::new`] with chainable setters, so options
/// added later do not break callers:
///
/// ```
/// use zrecord::pipeline::{PadConfig, PadSide};
///
/// let config = PadConfig::new(-1i32).side(PadSide::Left).pad_to_multiple_of(Some(8));
/// assert_eq!(config.pad_value, -1);
/// assert_eq!(PadConfig::<u16>::default().pad_value, 0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PadConfig<E> {
    /// The value of padding elements. Default: `E::default()` (zero for numbers).
    pub pad_value: E,
    /// The side. Default: [`PadSide::Right`].
    pub side: PadSide,
    /// Round the row length up to a multiple of this (for GPU kernels or context-parallel
    /// splits). Default: `None`. `Some(0)` is invalid.
    pub pad_to_multiple_of: Option<usize>,
}

impl<E: Default> Default for PadConfig<E> {
    /// Padding with `E::default()` (zero for numbers), on the right, rows not rounded up.
    fn default() -> Self {
        Self::new(E::default())
    }
}

impl<E> PadConfig<E> {
    /// Padding with `pad_value`; every other option at its default.
    #[must_use]
    pub fn new(pad_value: E) -> Self {
        Self {
            pad_value,
            side: PadSide::Right,
            pad_to_multiple_of: None,
        }
    }

    /// Sets the value of padding elements. Default `E::default()` (zero for numbers).
    #[must_use]
    pub fn pad_value(mut self, pad_value: E) -> Self {
        self.pad_value = pad_value;
        self
    }

    /// Sets the side padding goes on. Default [`PadSide::Right`].
    #[must_use]
    pub fn side(mut self, side: PadSide) -> Self {
        self.side = side;
        self
    }

    /// Sets the multiple the row length is rounded up to (for GPU kernels or context-parallel
    /// splits); `None` does not round. Default `None`. `Some(0)` is invalid.
    #[must_use]
    pub fn pad_to_multiple_of(mut self, multiple: Option<usize>) -> Self {
        self.pad_to_multiple_of = multiple;
        self
    }
}

/// Records padded and stacked into one buffer.
///
/// [`stack`] lays the `B` records of a field, all of one byte length, out in one contiguous
/// row-major `[B, …]` buffer; a record of another length is an error, never padding.
///
/// [`pad_stack`] lays `rows` records out in one contiguous row-major buffer of `rows × cols`
/// elements, `cols` being the longest record rounded up to `pad_to_multiple_of`; every record is
/// padded on the chosen side with `pad_value`. The result carries the record lengths and an
/// attention mask (1 for a record element, 0 for padding), from which [`PaddedBatch::pooling_mask`]
/// derives the mask of the tokens a pooling reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaddedBatch<E> {
    /// `rows × cols` elements, row-major.
    pub data: Vec<E>,
    /// Number of records.
    pub rows: usize,
    /// Elements per row.
    pub cols: usize,
    /// Each record's length.
    pub lengths: Vec<usize>,
    /// `rows × cols`, row-major: 1 where `data` holds a record element, 0 for padding.
    pub attention_mask: Vec<u8>,
}

impl<E> PaddedBatch<E> {
    /// Row `r`, padding included.
    pub fn row(&self, r: usize) -> Option<&[E]> {
        let start = r.checked_mul(self.cols)?;
        self.data.get(start..start.checked_add(self.cols)?)
    }

    /// The attention mask of row `r`.
    pub fn mask_row(&self, r: usize) -> Option<&[u8]> {
        let start = r.checked_mul(self.cols)?;
        self.attention_mask
            .get(start..start.checked_add(self.cols)?)
    }

    /// The pooling mask of this batch; see [`pooling_mask`].
    pub fn pooling_mask(&self, pooling: PoolingType) -> Vec<u8> {
        // The attention mask is rows × cols by construction: the call cannot fail.
        pooling_mask(&self.attention_mask, self.cols, pooling).unwrap_or_default()
    }
}

/// Pads `items` to one length and stacks them (d9d's `pad_stack_1d`).
///
/// # Errors
/// [`Error::InvalidConfig`] if `items` is empty or `pad_to_multiple_of` is `Some(0)`.
pub fn pad_stack<E: Copy, R: AsRef<[E]>>(
    items: &[R],
    config: PadConfig<E>,
) -> Result<PaddedBatch<E>> {
    if items.is_empty() {
        return Err(Error::InvalidConfig {
            reason: "pad_stack: no items to stack".into(),
        });
    }
    let longest = items.iter().map(|r| r.as_ref().len()).max().unwrap_or(0);
    let cols = match config.pad_to_multiple_of {
        None => longest,
        Some(0) => {
            return Err(Error::InvalidConfig {
                reason: "pad_stack: pad_to_multiple_of must be at least 1".into(),
            })
        }
        Some(m) => longest.next_multiple_of(m),
    };
    let rows = items.len();
    let cells = rows.checked_mul(cols).ok_or_else(|| Error::InvalidConfig {
        reason: format!("pad_stack: {rows} rows of {cols} elements overflow usize"),
    })?;
    let mut data = Vec::with_capacity(cells);
    let mut attention_mask = Vec::with_capacity(cells);
    let mut lengths = Vec::with_capacity(rows);
    for item in items {
        let item = item.as_ref();
        let pad = cols - item.len();
        lengths.push(item.len());
        let padding = std::iter::repeat_n(config.pad_value, pad);
        match config.side {
            PadSide::Right => {
                data.extend_from_slice(item);
                data.extend(padding);
                attention_mask.extend(std::iter::repeat_n(1u8, item.len()));
                attention_mask.extend(std::iter::repeat_n(0u8, pad));
            }
            PadSide::Left => {
                data.extend(padding);
                data.extend_from_slice(item);
                attention_mask.extend(std::iter::repeat_n(0u8, pad));
                attention_mask.extend(std::iter::repeat_n(1u8, item.len()));
            }
        }
    }
    Ok(PaddedBatch {
        data,
        rows,
        cols,
        lengths,
        attention_mask,
    })
}

/// Pads and stacks field `field` (a position in [`crate::Batch::fields`]) of every record of a
/// gathered batch, viewed as elements of type `E`.
///
/// # Errors
/// [`Error::DtypeMismatch`] / [`Error::ShapeMismatch`] if the field's bytes are not `E`s;
/// otherwise as [`pad_stack`].
pub fn pad_stack_field<E: Element>(
    batch: &crate::Batch,
    field: usize,
    config: PadConfig<E>,
) -> Result<PaddedBatch<E>> {
    let rows = (0..batch.len())
        .map(|r| batch.typed::<E>(r, field))
        .collect::<Result<Vec<&[E]>>>()?;
    pad_stack(&rows, config)
}

/// Records of one fixed-shape field stacked into one buffer; see [`stack`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackedBatch<E> {
    /// `rows × cols` elements, row-major: row `r` is the `r`-th record of the batch.
    pub data: Vec<E>,
    /// Number of records: the leading `B` of the `[B, …]` shape.
    pub rows: usize,
    /// Elements per record (the product of the field's record shape, which the caller applies
    /// to reshape a row).
    pub cols: usize,
}

impl<E> StackedBatch<E> {
    /// Row `r`: the elements of the batch's `r`-th record.
    pub fn row(&self, r: usize) -> Option<&[E]> {
        let start = r.checked_mul(self.cols)?;
        self.data.get(start..start.checked_add(self.cols)?)
    }
}

/// Stacks field `field` (a position in [`crate::Batch::fields`]) of every record of a gathered
/// batch, viewed as elements of type `E`, into one contiguous `[B, …]` buffer: what
/// `torch.utils.data.default_collate` does for a fixed-shape tensor field. Every record must
/// have the first record's byte length; for variable lengths, use [`pad_stack_field`].
///
/// ```
/// use zrecord::pipeline::stack;
/// use zrecord::{DType, Dataset, Field, Schema, Writer, WriterConfig};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let tmp = tempfile::tempdir()?;
/// # let dir = tmp.path().join("points.zr");
/// let schema = Schema::new().field(Field::new("xyz", DType::F32).shape(vec![3]));
/// let mut writer = Writer::create(&dir, &schema, WriterConfig::default())?;
/// for i in 0..10u8 {
///     let xyz: Vec<u8> = [f32::from(i), 0.5, -1.0].iter().flat_map(|v| v.to_le_bytes()).collect();
///     writer.append(&[&xyz[..]])?;
/// }
/// writer.commit()?;
/// drop(writer);
///
/// let batch = Dataset::open(&dir)?.gather_blocking(&[4, 2])?;
/// let points = stack::<f32>(&batch, 0)?;
/// assert_eq!((points.rows, points.cols), (2, 3));
/// assert_eq!(points.data, vec![4.0, 0.5, -1.0, 2.0, 0.5, -1.0]);
/// # Ok(())
/// # }
/// ```
///
/// # Errors
/// [`Error::ShapeMismatch`] naming the field, the record's position in the batch (and its
/// index) and both byte lengths if a record's length differs from the first record's, or if a
/// record's bytes are not a whole number of `E`s; [`Error::DtypeMismatch`] if the field is not
/// of `E`'s dtype; [`Error::UnknownField`] for a field position out of range;
/// [`Error::InvalidConfig`] for an empty batch.
pub fn stack<E: Element>(batch: &crate::Batch, field: usize) -> Result<StackedBatch<E>> {
    let rows = batch.len();
    if rows == 0 {
        return Err(Error::InvalidConfig {
            reason: "stack: no records to stack".into(),
        });
    }
    // The field, its dtype and the first record's bytes are checked here.
    let cols = batch.typed::<E>(0, field)?.len();
    let len_bytes = |r: usize| batch.get(r, field).map_or(0, <[u8]>::len);
    let first_bytes = len_bytes(0);
    let cells = rows.checked_mul(cols).ok_or_else(|| Error::InvalidConfig {
        reason: format!("stack: {rows} records of {cols} elements overflow usize"),
    })?;
    let mut data = Vec::with_capacity(cells);
    for r in 0..rows {
        let bytes = len_bytes(r);
        if bytes != first_bytes {
            let name = batch.fields().nth(field).map_or("", |(name, _)| name);
            let index = batch.indices().get(r).copied().unwrap_or(0);
            return Err(Error::ShapeMismatch {
                field: name.to_string(),
                reason: format!(
                    "stack: record {r} of the batch (index {index}) is {bytes} bytes, record 0 is \
                     {first_bytes} bytes; a stacked field needs one length for every record \
                     (pad_stack_field pads variable lengths)"
                ),
            });
        }
        data.extend_from_slice(batch.typed::<E>(r, field)?);
    }
    Ok(StackedBatch { data, rows, cols })
}

/// The token pooling mask of a row-major attention mask with `cols` columns (d9d's
/// `token_pooling_mask_from_attention_mask`): 1 at the tokens the pooling reads, 0 elsewhere.
///
/// `First` marks the first and `Last` the last non-padding token of each row, so both work for
/// left and right padding; `All` marks every non-padding token. A row with no token gets no
/// mark.
///
/// # Errors
/// [`Error::InvalidConfig`] if the mask's length is not a multiple of `cols`.
pub fn pooling_mask(attention_mask: &[u8], cols: usize, pooling: PoolingType) -> Result<Vec<u8>> {
    if cols == 0 {
        return if attention_mask.is_empty() {
            Ok(Vec::new())
        } else {
            Err(Error::InvalidConfig {
                reason: "pooling_mask: a non-empty mask with 0 columns".into(),
            })
        };
    }
    if !attention_mask.len().is_multiple_of(cols) {
        return Err(Error::InvalidConfig {
            reason: format!(
                "pooling_mask: mask of {} elements is not rows of {cols}",
                attention_mask.len()
            ),
        });
    }
    let mut out = vec![0u8; attention_mask.len()];
    for (mask_row, out_row) in attention_mask.chunks(cols).zip(out.chunks_mut(cols)) {
        let pick = match pooling {
            PoolingType::All => {
                for (o, &m) in out_row.iter_mut().zip(mask_row) {
                    *o = u8::from(m != 0);
                }
                None
            }
            PoolingType::First => mask_row.iter().position(|&m| m != 0),
            PoolingType::Last => mask_row.iter().rposition(|&m| m != 0),
        };
        if let Some(o) = pick.and_then(|i| out_row.get_mut(i)) {
            *o = 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::read::batch::{Span, Values};
    use crate::DType;
    use bytes::Bytes;
    use std::sync::Arc;

    /// A batch of one record per entry of `values`, two fields: `x` of `dtype` with those bytes,
    /// and `y` (u8).
    fn batch(dtype: DType, values: &[Vec<u8>]) -> crate::Batch {
        let mut owners = Vec::new();
        let mut spans = Vec::new();
        for v in values {
            for bytes in [v.clone(), vec![7u8]] {
                spans.push(Span {
                    owner: owners.len() as u32,
                    start: 0,
                    len: bytes.len(),
                });
                owners.push(Bytes::from(bytes));
            }
        }
        let fields: Arc<[(String, DType)]> =
            vec![("x".to_string(), dtype), ("y".to_string(), DType::U8)].into();
        let indices = (0..values.len() as u64).map(|i| 100 + i).collect();
        crate::Batch::new(Values { owners, spans }, indices, fields)
    }

    fn u32s(v: &[u32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn stack_lays_equal_records_out_as_rows() {
        let b = batch(DType::U32, &[u32s(&[1, 2, 3]), u32s(&[4, 5, 6])]);
        let s = stack::<u32>(&b, 0).unwrap();
        assert_eq!((s.rows, s.cols), (2, 3));
        assert_eq!(s.data, vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(s.row(1).unwrap(), &[4, 5, 6]);
        assert_eq!(s.row(2), None);
        let y = stack::<u8>(&b, 1).unwrap();
        assert_eq!((y.rows, y.cols, y.data), (2, 1, vec![7, 7]));
        // Empty records stack to zero columns.
        let empty = stack::<u32>(&batch(DType::U32, &[vec![], vec![]]), 0).unwrap();
        assert_eq!((empty.rows, empty.cols), (2, 0));
    }

    #[test]
    fn stack_refuses_another_length_naming_field_record_and_lengths() {
        let b = batch(
            DType::U32,
            &[u32s(&[1, 2]), u32s(&[3, 4]), u32s(&[5, 6, 7])],
        );
        let err = stack::<u32>(&b, 0).unwrap_err();
        let Error::ShapeMismatch { field, reason } = &err else {
            panic!("{err}");
        };
        assert_eq!(field, "x");
        assert!(reason.contains("record 2 of the batch"), "{reason}");
        assert!(reason.contains("12 bytes"), "{reason}");
        assert!(reason.contains("8 bytes"), "{reason}");
        // A shorter first record is the reference too: the second record differs.
        let err = stack::<u32>(&batch(DType::U32, &[u32s(&[1]), u32s(&[3, 4])]), 0).unwrap_err();
        assert!(err.to_string().contains("record 1 of the batch"), "{err}");
    }

    #[test]
    fn stack_checks_the_dtype_and_the_inputs() {
        let b = batch(DType::U32, &[u32s(&[1, 2])]);
        assert!(matches!(
            stack::<f32>(&b, 0),
            Err(Error::DtypeMismatch { .. })
        ));
        assert!(matches!(
            stack::<u32>(&b, 2),
            Err(Error::UnknownField { .. })
        ));
        assert!(matches!(
            stack::<u32>(&batch(DType::U32, &[]), 0),
            Err(Error::InvalidConfig { .. })
        ));
    }

    fn items() -> Vec<Vec<i32>> {
        vec![vec![1, 2, 3], vec![4], vec![5, 6]]
    }

    #[test]
    fn right_left_and_aligned_padding_as_in_d9d() {
        let right = pad_stack(&items(), PadConfig::default()).unwrap();
        assert_eq!((right.rows, right.cols), (3, 3));
        assert_eq!(right.data, vec![1, 2, 3, 4, 0, 0, 5, 6, 0]);
        assert_eq!(right.lengths, vec![3, 1, 2]);
        assert_eq!(right.attention_mask, vec![1, 1, 1, 1, 0, 0, 1, 1, 0]);

        let left = pad_stack(
            &items(),
            PadConfig::new(-1)
                .side(PadSide::Left)
                .pad_to_multiple_of(None),
        )
        .unwrap();
        assert_eq!(left.data, vec![1, 2, 3, -1, -1, 4, -1, 5, 6]);
        assert_eq!(left.attention_mask, vec![1, 1, 1, 0, 0, 1, 0, 1, 1]);

        let aligned =
            pad_stack(&items(), PadConfig::default().pad_to_multiple_of(Some(8))).unwrap();
        assert_eq!(aligned.cols, 8);
        assert_eq!(aligned.row(1).unwrap(), &[4, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(aligned.data.len(), 24);
    }

    #[test]
    fn invalid_inputs() {
        let none: Vec<Vec<u8>> = Vec::new();
        assert!(pad_stack(&none, PadConfig::default()).is_err());
        let zero = PadConfig::<u8>::default().pad_to_multiple_of(Some(0));
        assert!(pad_stack(&[vec![1u8]], zero).is_err());
        assert!(pooling_mask(&[1, 1, 1], 2, PoolingType::All).is_err());
        // Empty records stack to zero columns.
        let empty = pad_stack(&[Vec::<u8>::new(), Vec::new()], PadConfig::default()).unwrap();
        assert_eq!((empty.rows, empty.cols), (2, 0));
        assert!(empty.pooling_mask(PoolingType::Last).is_empty());
    }

    #[test]
    fn pooling_masks_for_both_sides() {
        let right = pad_stack(&items(), PadConfig::default()).unwrap();
        assert_eq!(
            right.pooling_mask(PoolingType::First),
            vec![1, 0, 0, 1, 0, 0, 1, 0, 0]
        );
        assert_eq!(
            right.pooling_mask(PoolingType::Last),
            vec![0, 0, 1, 1, 0, 0, 0, 1, 0]
        );
        assert_eq!(right.pooling_mask(PoolingType::All), right.attention_mask);
        let left = pad_stack(&items(), PadConfig::default().side(PadSide::Left)).unwrap();
        assert_eq!(
            left.pooling_mask(PoolingType::First),
            vec![1, 0, 0, 0, 0, 1, 0, 1, 0]
        );
        assert_eq!(
            left.pooling_mask(PoolingType::Last),
            vec![0, 0, 1, 0, 0, 1, 0, 0, 1]
        );
        // A row without tokens gets no mark.
        assert_eq!(
            pooling_mask(&[0, 0, 1, 0], 2, PoolingType::Last).unwrap(),
            vec![0, 0, 1, 0]
        );
    }
}
