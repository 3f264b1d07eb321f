//! The header: magic, version and length field, then the dictionary NumPy writes, decoded into
//! an [`NpyHeader`] whose sizes are all checked.

use super::descr::parse_descr;
use super::literal::{header_offset, Lit, Parser};
use super::{NpyError, MAGIC, MAX_HEADER_BYTES};
use crate::format::dtype::DType;

/// A decoded `.npy` header.
///
/// Only [`NpyHeader::decode`] makes one, and it refuses a header whose sizes do not fit: the
/// bytes of a row (item size × the dimensions after axis 0), of the whole array (rows × row
/// bytes) and the end of the data (data offset + data bytes) are all computed with checked
/// arithmetic there and stored, so no size or offset derived from a header can wrap later.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NpyHeader {
    pub(super) version: (u8, u8),
    pub(super) descr: String,
    pub(super) dtype: DType,
    pub(super) big_endian: bool,
    pub(super) fortran_order: bool,
    pub(super) shape: Vec<u64>,
    pub(super) data_offset: u64,
    /// Items in one row (product of `shape[1..]`); ≤ `row_bytes`.
    pub(super) items_per_row: u64,
    /// `items_per_row × item_bytes`, checked at decode.
    pub(super) row_bytes: u64,
    /// `rows × row_bytes`, checked at decode; `data_offset + data_bytes` fits in a `u64`.
    pub(super) data_bytes: u64,
}

/// The sizes a header's shape implies, each checked: (items per row, row bytes, data bytes,
/// end of the data). `None` if any of them does not fit in a `u64`.
fn checked_sizes(shape: &[u64], item_bytes: u64, data_offset: u64) -> Option<(u64, u64, u64)> {
    let item_shape = shape.get(1..).unwrap_or_default();
    let items_per_row = item_shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))?;
    let row_bytes = items_per_row.checked_mul(item_bytes)?;
    let rows = shape.first().copied().unwrap_or(0);
    let data_bytes = rows.checked_mul(row_bytes)?;
    data_offset.checked_add(data_bytes)?;
    Some((items_per_row, row_bytes, data_bytes))
}

#[cfg_attr(
    not(feature = "diagnostics"),
    allow(
        dead_code,
        reason = "the fuzz targets and tests call these through `zrecord::diagnostics`"
    )
)]
impl NpyHeader {
    /// The length of the whole header (magic to the end of the header text, where the data
    /// starts), from the first 12 bytes of the file (10 suffice for version 1.0).
    pub fn header_len(prefix: &[u8]) -> Result<u64, NpyError> {
        let (_, _, end) = prefix_fields(prefix)?;
        Ok(end)
    }

    /// Decodes the header from the start of the file: `bytes` must hold at least
    /// [`NpyHeader::header_len`] bytes (more is fine: the data is not looked at).
    pub fn decode(bytes: &[u8]) -> Result<NpyHeader, NpyError> {
        let (version, text_start, end) = prefix_fields(bytes)?;
        let available = bytes.len() as u64;
        let text = usize::try_from(text_start)
            .ok()
            .zip(usize::try_from(end).ok())
            .and_then(|(s, e)| bytes.get(s..e))
            .ok_or_else(|| NpyError::truncated(available, end, available))?;
        let text = if version.0 >= 3 {
            std::str::from_utf8(text).map_err(|e| {
                NpyError::malformed(
                    header_offset(text_start, e.valid_up_to()),
                    "header is not valid UTF-8",
                )
            })?
        } else {
            // Versions 1 and 2 are latin-1; NumPy only ever writes ASCII there.
            if let Some(p) = text.iter().position(|b| !b.is_ascii()) {
                return Err(NpyError::malformed(
                    header_offset(text_start, p),
                    "non-ASCII byte in a version 1/2 header",
                ));
            }
            std::str::from_utf8(text)
                .map_err(|_| NpyError::malformed(text_start, "header is not ASCII"))?
        };
        let mut p = Parser {
            s: text.as_bytes(),
            pos: 0,
            base: text_start,
        };
        let lit = p.value(0)?;
        p.skip_ws();
        if p.pos < p.s.len() {
            return Err(p.err("unexpected text after the header dictionary"));
        }
        let Lit::Dict(entries) = lit else {
            return Err(NpyError::malformed(
                text_start,
                "header is not a dictionary",
            ));
        };
        let (mut descr, mut fortran, mut shape) = (None, None, None);
        for (key, at, value) in entries {
            match key.as_str() {
                "descr" => descr = Some((at, value)),
                "fortran_order" => fortran = Some((at, value)),
                "shape" => shape = Some((at, value)),
                other => {
                    return Err(NpyError::malformed(
                        at,
                        format!("unexpected header key {other:?}"),
                    ))
                }
            }
        }
        let missing = |k: &str| NpyError::malformed(text_start, format!("header has no {k:?}"));
        let (descr_at, descr) = descr.ok_or_else(|| missing("descr"))?;
        let (f_at, fortran) = fortran.ok_or_else(|| missing("fortran_order"))?;
        let (s_at, shape) = shape.ok_or_else(|| missing("shape"))?;

        let descr = match descr {
            Lit::Str(s) => s,
            Lit::List => {
                return Err(NpyError::unsupported(
                    descr_at,
                    "structured dtype (a record array with named fields); save each field as \
                     its own .npy file",
                ))
            }
            _ => return Err(NpyError::malformed(descr_at, "'descr' is not a string")),
        };
        let (dtype, big_endian) = parse_descr(&descr).map_err(|r| r.at(descr_at))?;
        let Lit::Bool(fortran_order) = fortran else {
            return Err(NpyError::malformed(
                f_at,
                "'fortran_order' is not True/False",
            ));
        };
        let Lit::Tuple(dims) = shape else {
            return Err(NpyError::malformed(s_at, "'shape' is not a tuple"));
        };
        let shape = dims
            .into_iter()
            .map(|d| match d {
                Lit::Int(n) => Ok(n),
                _ => Err(NpyError::malformed(
                    s_at,
                    "'shape' holds something other than non-negative integers",
                )),
            })
            .collect::<Result<Vec<u64>, _>>()?;
        if shape.is_empty() {
            return Err(NpyError::unsupported(
                s_at,
                "a 0-d array (shape ()) has no rows; reshape it to (1,)",
            ));
        }
        let (items_per_row, row_bytes, data_bytes) = checked_sizes(&shape, dtype.item_bytes(), end)
            .ok_or_else(|| {
                NpyError::malformed(
                    s_at,
                    format!(
                        "shape {shape:?} of {}-byte items is too large: a byte count overflows \
                         64 bits",
                        dtype.item_bytes()
                    ),
                )
            })?;
        Ok(NpyHeader {
            version,
            descr,
            dtype,
            big_endian,
            fortran_order,
            shape,
            data_offset: end,
            items_per_row,
            row_bytes,
            data_bytes,
        })
    }

    /// Format version `(major, minor)`: (1, 0), (2, 0) or (3, 0).
    pub fn version(&self) -> (u8, u8) {
        self.version
    }

    /// The dtype string as written (`'<f4'`, `'|b1'`, ...).
    pub fn descr(&self) -> &str {
        &self.descr
    }

    /// The zrecord dtype the data maps to (`b1` → [`DType::Bool`]).
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// True if the stored items are big-endian (decoding converts them to little-endian).
    pub fn big_endian(&self) -> bool {
        self.big_endian
    }

    /// True if the data is in Fortran (column-major) order.
    pub fn fortran_order(&self) -> bool {
        self.fortran_order
    }

    /// The array's shape; at least one dimension (axis 0 is the rows).
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// Where the data starts: the length of magic, version, length field and header text.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Number of rows (axis 0).
    pub fn rows(&self) -> u64 {
        self.shape.first().copied().unwrap_or(0)
    }

    /// The shape of one row (the dimensions after axis 0); empty for a 1-D array.
    pub fn item_shape(&self) -> &[u64] {
        self.shape.get(1..).unwrap_or_default()
    }

    /// Items in one row.
    pub fn items_per_row(&self) -> u64 {
        self.items_per_row
    }

    /// Bytes per item.
    pub fn item_bytes(&self) -> u64 {
        self.dtype.item_bytes()
    }

    /// Bytes in one row.
    pub fn row_bytes(&self) -> u64 {
        self.row_bytes
    }

    /// Bytes of array data after the header (`data_offset() + data_bytes()` fits in a `u64`).
    pub fn data_bytes(&self) -> u64 {
        self.data_bytes
    }

    /// True if the stored bytes already are little-endian and row-major, so
    /// [`NpyHeader::decode_rows`] is a plain copy (a caller may use the stored bytes as they are).
    pub fn stored_as_decoded(&self) -> bool {
        (!self.fortran_order || self.item_shape().is_empty())
            && (!self.big_endian || self.item_bytes() == 1)
    }
}

/// Parses the version and header length from the start of the file: (version, where the
/// header text starts, where it ends: the data offset).
#[expect(
    clippy::arithmetic_side_effects,
    reason = "text_start is 10 or 12 and text_len <= MAX_HEADER_BYTES (2^20), checked just \
              before the sum"
)]
fn prefix_fields(b: &[u8]) -> Result<((u8, u8), u64, u64), NpyError> {
    let available = b.len() as u64;
    let magic = b
        .get(..6)
        .ok_or_else(|| NpyError::truncated(available, 10, available))?;
    if magic != MAGIC {
        return Err(NpyError::malformed(
            0,
            "no .npy magic (\\x93NUMPY) at the start of the file",
        ));
    }
    let (major, minor) = match b.get(6..8) {
        Some(&[major, minor]) => (major, minor),
        _ => return Err(NpyError::truncated(available, 10, available)),
    };
    let (text_start, text_len) = match (major, minor) {
        (1, 0) => match b.get(8..10) {
            Some(&[a, c]) => (10u64, u64::from(u16::from_le_bytes([a, c]))),
            _ => return Err(NpyError::truncated(available, 10, available)),
        },
        (2 | 3, 0) => match b.get(8..12) {
            Some(&[a, c, d, e]) => (12u64, u64::from(u32::from_le_bytes([a, c, d, e]))),
            _ => return Err(NpyError::truncated(available, 12, available)),
        },
        _ => {
            return Err(NpyError::unsupported(
                6,
                format!("format version {major}.{minor} (1.0, 2.0 and 3.0 are read)"),
            ))
        }
    };
    if text_len > MAX_HEADER_BYTES {
        return Err(NpyError::malformed(
            8,
            format!("header length {text_len} is larger than {MAX_HEADER_BYTES} bytes"),
        ));
    }
    Ok(((major, minor), text_start, text_start + text_len))
}
