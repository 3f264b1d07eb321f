//! Decoding NumPy `.npy` files: the header, then rows as little-endian, row-major bytes.
//!
//! This is the reader behind `zrecord convert`, usable on its own. It is pure decode code: the
//! header decoder takes `&[u8]`, the row decoders take the stored bytes, and [`NpyReader`]
//! works over any `Read + Seek`. Bad bytes are an [`NpyError`] naming the byte offset, never a
//! panic.
//!
//! # What is read
//!
//! - Format versions 1.0, 2.0 and 3.0 (a `u16` header length for 1.0, `u32` for 2.0 and 3.0;
//!   3.0 allows UTF-8 in the header).
//! - The header is the Python dict literal NumPy writes:
//!   `{'descr': '<f4', 'fortran_order': False, 'shape': (1000, 28, 28), }`.
//! - Numeric dtypes: `b1` (bool), `i1`…`i8`, `u1`…`u8`, `f2`, `f4`, `f8`, in either byte order
//!   (`<`, `>`, `|`, `=`). Big-endian data is converted to little-endian.
//! - C order and Fortran order. A row is the sub-array at one index of axis 0; Fortran-order
//!   rows are transposed to row-major as they are decoded.
//!
//! Refused with [`NpyErrorKind::Unsupported`]: object arrays (`O`), structured and sub-array
//! dtypes, strings, complex numbers, datetimes, `float128`, and 0-d arrays (no axis 0).
//!
//! # Streaming
//!
//! [`NpyReader::read_rows`] decodes the next rows on demand, so a file of any size converts in
//! bounded memory. In C order the rows of a block are one contiguous read; in Fortran order a
//! block of `n` rows is one read of `n` items per item position of a row (see
//! [`NpyHeader::fortran_segments`]), so larger blocks mean fewer, longer reads.
//!
//! ```
//! use zrecord::diagnostics::NpyReader; // feature `diagnostics`
//! use zrecord::DType;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // A 2×3 big-endian i16 array in Fortran order, as NumPy would write it.
//! let header = "{'descr': '>i2', 'fortran_order': True, 'shape': (2, 3), }";
//! let mut file = b"\x93NUMPY\x01\x00".to_vec();
//! let padded = format!("{header:<117}\n"); // 10 + 118 = 128 bytes of header
//! file.extend_from_slice(&(padded.len() as u16).to_le_bytes());
//! file.extend_from_slice(padded.as_bytes());
//! for v in [1i16, 4, 2, 5, 3, 6] {
//!     // column-major: [[1, 2, 3], [4, 5, 6]]
//!     file.extend_from_slice(&v.to_be_bytes());
//! }
//!
//! let mut reader = NpyReader::new(std::io::Cursor::new(file))?;
//! assert_eq!(reader.header().dtype(), DType::I16);
//! assert_eq!(reader.header().item_shape(), &[3]);
//! let mut rows = Vec::new();
//! assert_eq!(reader.read_rows(2, &mut rows)?, 2);
//! let values: Vec<i16> = rows
//!     .chunks_exact(2)
//!     .map(|b| i16::from_le_bytes([b[0], b[1]]))
//!     .collect();
//! assert_eq!(values, [1, 2, 3, 4, 5, 6]); // little-endian, row-major
//! # Ok(())
//! # }
//! ```

use super::dtype::DType;
use std::fmt;
use std::io::{Read, Seek, SeekFrom};

/// The magic string every `.npy` file starts with.
pub const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// The largest header this reader accepts, in bytes. NumPy's own default limit is 10,000; a
/// header of a numeric dtype is never near either.
pub const MAX_HEADER_BYTES: u64 = 1 << 20;

/// Nesting depth allowed in the header literal (NumPy's headers nest two levels).
const MAX_DEPTH: usize = 16;

/// Why a `.npy` file cannot be read. `offset` is the byte of the file the problem is at (for a
/// header problem, the position within the header text, counted from the start of the file).
#[derive(Debug)]
pub struct NpyError {
    /// Byte offset in the file.
    pub offset: u64,
    /// What is wrong.
    pub kind: NpyErrorKind,
}

/// The kinds of [`NpyError`].
#[derive(Debug)]
#[non_exhaustive]
pub enum NpyErrorKind {
    /// The file ends before the header or the data it declares.
    Truncated {
        /// Bytes the file needs (up to the end of what was being read).
        needed: u64,
        /// Bytes the file has.
        available: u64,
    },
    /// Not a `.npy` file, or a header that does not parse.
    Malformed(String),
    /// A well-formed file zrecord cannot store (object arrays, structured dtypes, ...).
    Unsupported(String),
    /// The underlying reader failed.
    Io(std::io::Error),
}

impl NpyError {
    fn malformed(offset: u64, reason: impl Into<String>) -> NpyError {
        NpyError {
            offset,
            kind: NpyErrorKind::Malformed(reason.into()),
        }
    }

    fn unsupported(offset: u64, reason: impl Into<String>) -> NpyError {
        NpyError {
            offset,
            kind: NpyErrorKind::Unsupported(reason.into()),
        }
    }

    fn truncated(offset: u64, needed: u64, available: u64) -> NpyError {
        NpyError {
            offset,
            kind: NpyErrorKind::Truncated { needed, available },
        }
    }
}

impl fmt::Display for NpyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            NpyErrorKind::Truncated { needed, available } => write!(
                f,
                "truncated .npy file: needs {needed} bytes, has {available} (at byte {})",
                self.offset
            ),
            NpyErrorKind::Malformed(r) => {
                write!(f, "not a valid .npy file: {r} (at byte {})", self.offset)
            }
            NpyErrorKind::Unsupported(r) => {
                write!(f, "unsupported .npy array: {r} (at byte {})", self.offset)
            }
            NpyErrorKind::Io(e) => write!(f, "read failed at byte {}: {e}", self.offset),
        }
    }
}

impl std::error::Error for NpyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            NpyErrorKind::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// A decoded `.npy` header.
///
/// Only [`NpyHeader::decode`] makes one, and it refuses a header whose sizes do not fit: the
/// bytes of a row (item size × the dimensions after axis 0), of the whole array (rows × row
/// bytes) and the end of the data (data offset + data bytes) are all computed with checked
/// arithmetic there and stored, so no size or offset derived from a header can wrap later.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NpyHeader {
    version: (u8, u8),
    descr: String,
    dtype: DType,
    big_endian: bool,
    fortran_order: bool,
    shape: Vec<u64>,
    data_offset: u64,
    /// Items in one row (product of `shape[1..]`); ≤ `row_bytes`.
    items_per_row: u64,
    /// `items_per_row × item_bytes`, checked at decode.
    row_bytes: u64,
    /// `rows × row_bytes`, checked at decode; `data_offset + data_bytes` fits in a `u64`.
    data_bytes: u64,
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

    /// Checks that a file of `file_len` bytes holds all the data the header declares.
    pub fn check_file_len(&self, file_len: u64) -> Result<(), NpyError> {
        // Fits: checked by `checked_sizes` at decode; saturating keeps this free of arithmetic.
        let needed = self.data_offset.saturating_add(self.data_bytes);
        if file_len < needed {
            return Err(NpyError::truncated(file_len, needed, file_len));
        }
        Ok(())
    }

    /// The stored byte ranges `(file offset, length)` of rows `first..first + n` of a
    /// Fortran-order array, in the order [`NpyHeader::decode_rows`] expects them: one range of
    /// `n` items per item position of a row, positions in Fortran (column-major) order. Rows past
    /// the end of the array are left out (`first` and `n` are clamped to `0..rows()`).
    #[expect(
        clippy::arithmetic_side_effects,
        reason = "first + n <= rows and p < items_per_row after the clamps, so every offset is \
                  < data_offset + items_per_row * rows * item_bytes = data_offset + data_bytes, \
                  which NpyHeader::decode (checked_sizes) proved fits in a u64"
    )]
    pub fn fortran_segments(&self, first: u64, n: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        let item = self.item_bytes();
        let rows = self.rows();
        let first = first.min(rows);
        let n = n.min(rows - first);
        (0..self.items_per_row)
            .map(move |p| (self.data_offset + (p * rows + first) * item, n * item))
    }

    /// Decodes `n` rows from their stored bytes and appends them to `out` as little-endian,
    /// row-major bytes (`n * row_bytes()` of them).
    ///
    /// For a C-order array `stored` is the rows' contiguous bytes; for a Fortran-order array it
    /// is the concatenation of [`NpyHeader::fortran_segments`]. Either way it must be exactly
    /// `n * row_bytes()` bytes.
    pub fn decode_rows(&self, n: u64, stored: &[u8], out: &mut Vec<u8>) -> Result<(), NpyError> {
        let want = n.checked_mul(self.row_bytes());
        if want != Some(stored.len() as u64) {
            return Err(NpyError::malformed(
                self.data_offset,
                format!(
                    "{} stored bytes given for {n} rows of {} bytes",
                    stored.len(),
                    self.row_bytes()
                ),
            ));
        }
        let item = usize::try_from(self.item_bytes()).unwrap_or(1);
        let swap = self.big_endian && item > 1;
        let start = out.len();
        let shape = self.item_shape();
        if !self.fortran_order || shape.is_empty() || (shape.len() == 1 && n == 1) {
            // Row-major already (a 1-D array, or a single Fortran row of a 1-D item).
            out.extend_from_slice(stored);
        } else {
            // The stored bytes as placeholders, every one overwritten by the transpose.
            out.extend_from_slice(stored);
            let dst = out.get_mut(start..).unwrap_or_default();
            fortran_to_c(self.item_shape(), n, item, stored, dst);
        }
        if swap {
            for v in out
                .get_mut(start..)
                .unwrap_or_default()
                .chunks_exact_mut(item)
            {
                v.reverse();
            }
        }
        Ok(())
    }
}

/// Scatters `n` rows stored column-major (`stored`: item position `p` in Fortran order, then
/// row) into row-major `dst` (row, then item position in C order). Does nothing unless
/// `stored` and `dst` both hold exactly `n` rows of `item_shape` items of `item` bytes.
#[expect(
    clippy::arithmetic_side_effects,
    reason = "m * n * item == dst.len() == stored.len() is checked (checked_mul) at the top, so \
              r * m + q < n * m and (r * m + q + 1) * item <= dst.len(); every stride and d * s \
              is <= m, and q + s <= 2m - 1, which fits since m <= dst.len() <= isize::MAX"
)]
fn fortran_to_c(item_shape: &[u64], n: u64, item: usize, stored: &[u8], dst: &mut [u8]) {
    let Ok(n) = usize::try_from(n) else { return };
    let Some(dims) = item_shape
        .iter()
        .map(|&d| usize::try_from(d).ok())
        .collect::<Option<Vec<usize>>>()
    else {
        return;
    };
    let Some(m) = dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)) else {
        return;
    };
    let total = m.checked_mul(n).and_then(|x| x.checked_mul(item));
    // Nothing to move; and with a zero dimension the other dimensions' strides may overflow.
    if n == 0
        || item == 0
        || dst.is_empty()
        || total != Some(dst.len())
        || stored.len() != dst.len()
    {
        return;
    }
    // C-order strides of the item shape.
    let mut c_strides = vec![1usize; dims.len()];
    for k in (0..dims.len().saturating_sub(1)).rev() {
        let next =
            c_strides.get(k + 1).copied().unwrap_or(1) * dims.get(k + 1).copied().unwrap_or(1);
        if let Some(s) = c_strides.get_mut(k) {
            *s = next;
        }
    }
    // Walk positions in Fortran order (first index fastest), tracking the C-order index q.
    let mut idx = vec![0usize; dims.len()];
    let mut q = 0usize;
    for col in stored.chunks_exact(n * item).take(m) {
        for (r, v) in col.chunks_exact(item).enumerate() {
            let at = (r * m + q) * item;
            if let Some(d) = dst.get_mut(at..at + item) {
                d.copy_from_slice(v);
            }
        }
        for (k, i) in idx.iter_mut().enumerate() {
            let d = dims.get(k).copied().unwrap_or(1);
            let s = c_strides.get(k).copied().unwrap_or(1);
            *i += 1;
            q += s;
            if *i < d {
                break;
            }
            *i = 0;
            q -= d * s;
        }
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

/// The file offset of byte `i` of a header text starting at `text_start`, for errors.
#[expect(
    clippy::arithmetic_side_effects,
    reason = "text_start <= 12 and i <= the header text's length <= MAX_HEADER_BYTES (2^20), \
              bounded in prefix_fields"
)]
fn header_offset(text_start: u64, i: usize) -> u64 {
    text_start + i as u64
}

/// A dtype problem, placed at the `descr` value's offset by the caller.
struct DescrError(String, bool);

impl DescrError {
    fn at(self, offset: u64) -> NpyError {
        if self.1 {
            NpyError::unsupported(offset, self.0)
        } else {
            NpyError::malformed(offset, self.0)
        }
    }
}

/// Maps a dtype string (`'<f4'`) to a zrecord dtype and whether it is big-endian.
fn parse_descr(descr: &str) -> Result<(DType, bool), DescrError> {
    let unsupported = |why: String| DescrError(why, true);
    let (order, rest) = match descr.as_bytes().first() {
        Some(&c @ (b'<' | b'>' | b'|' | b'=')) => (c, descr.get(1..).unwrap_or_default()),
        _ => (b'=', descr),
    };
    let mut chars = rest.chars();
    let kind = chars.next().unwrap_or(' ');
    let size = chars.as_str();
    if kind == 'O' {
        return Err(unsupported(format!(
            "object array (dtype {descr:?}): it holds Python objects, not numbers"
        )));
    }
    let dtype = match (kind, size) {
        ('b', "1") | ('?', "" | "1") => DType::Bool,
        ('i', "1") => DType::I8,
        ('i', "2") => DType::I16,
        ('i', "4") => DType::I32,
        ('i', "8") => DType::I64,
        ('u', "1") => DType::U8,
        ('u', "2") => DType::U16,
        ('u', "4") => DType::U32,
        ('u', "8") => DType::U64,
        ('f', "2") => DType::F16,
        ('f', "4") => DType::F32,
        ('f', "8") => DType::F64,
        ('f', _) => {
            return Err(unsupported(format!(
                "dtype {descr:?} (extended-precision float; f2, f4 and f8 are stored)"
            )))
        }
        ('c', _) => return Err(unsupported(format!("complex dtype {descr:?}"))),
        ('S' | 'a' | 'U', _) => return Err(unsupported(format!("string dtype {descr:?}"))),
        ('V', _) => return Err(unsupported(format!("void/raw dtype {descr:?}"))),
        ('M' | 'm', _) => return Err(unsupported(format!("datetime dtype {descr:?}"))),
        ('b' | 'i' | 'u', _) => return Err(unsupported(format!("integer dtype {descr:?}"))),
        _ => return Err(DescrError(format!("unknown dtype {descr:?}"), false)),
    };
    let big = match order {
        b'>' => true,
        b'<' | b'|' => false,
        _ => cfg!(target_endian = "big"),
    };
    Ok((dtype, big))
}

/// The subset of Python literals NumPy writes in a header.
enum Lit {
    Str(String),
    Bool(bool),
    Int(u64),
    None,
    Tuple(Vec<Lit>),
    /// A list (its items are parsed, then dropped: only a structured `descr` is a list).
    List,
    /// (key, offset of the value, value)
    Dict(Vec<(String, u64, Lit)>),
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
    base: u64,
}

impl Parser<'_> {
    fn offset(&self) -> u64 {
        header_offset(self.base, self.pos)
    }

    /// Moves past the current byte (never past the end of the text).
    #[expect(
        clippy::arithmetic_side_effects,
        reason = "pos < s.len() <= isize::MAX, checked just before the increment"
    )]
    fn bump(&mut self) {
        if self.pos < self.s.len() {
            self.pos += 1;
        }
    }

    fn err(&self, why: &str) -> NpyError {
        NpyError::malformed(self.offset(), format!("header: {why}"))
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.bump();
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        self.skip_ws();
        if self.peek() == Some(c) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Result<Lit, NpyError> {
        let inner = match depth.checked_add(1) {
            Some(inner) if depth <= MAX_DEPTH => inner,
            _ => return Err(self.err("nested too deeply")),
        };
        self.skip_ws();
        match self.peek() {
            Some(b'{') => {
                self.bump();
                let mut entries = Vec::new();
                loop {
                    if self.eat(b'}') {
                        break;
                    }
                    self.skip_ws();
                    let Lit::Str(key) = self.value(inner)? else {
                        return Err(self.err("dictionary key is not a string"));
                    };
                    if !self.eat(b':') {
                        return Err(self.err("expected ':'"));
                    }
                    self.skip_ws();
                    let at = self.offset();
                    let v = self.value(inner)?;
                    if entries.iter().any(|(k, _, _)| *k == key) {
                        return Err(NpyError::malformed(at, format!("duplicate key {key:?}")));
                    }
                    entries.push((key, at, v));
                    if !self.eat(b',') {
                        if self.eat(b'}') {
                            break;
                        }
                        return Err(self.err("expected ',' or '}'"));
                    }
                }
                Ok(Lit::Dict(entries))
            }
            Some(open @ (b'(' | b'[')) => {
                self.bump();
                let close = if open == b'(' { b')' } else { b']' };
                let mut items = Vec::new();
                let mut had_comma = false;
                loop {
                    if self.eat(close) {
                        break;
                    }
                    items.push(self.value(inner)?);
                    had_comma = self.eat(b',');
                    if !had_comma {
                        if self.eat(close) {
                            break;
                        }
                        return Err(self.err("expected ',' or a closing bracket"));
                    }
                }
                if open == b'(' && items.len() == 1 && !had_comma {
                    // `(x)` is just x in Python.
                    return items.pop().ok_or_else(|| self.err("empty parenthesis"));
                }
                Ok(if open == b'(' {
                    Lit::Tuple(items)
                } else {
                    Lit::List
                })
            }
            Some(q @ (b'\'' | b'"')) => {
                self.bump();
                let mut out = Vec::new();
                loop {
                    match self.peek() {
                        None => return Err(self.err("unterminated string")),
                        Some(c) if c == q => {
                            self.bump();
                            break;
                        }
                        Some(b'\\') => {
                            self.bump();
                            let c = self.peek().ok_or_else(|| self.err("unterminated string"))?;
                            out.push(c);
                            self.bump();
                        }
                        Some(c) => {
                            out.push(c);
                            self.bump();
                        }
                    }
                }
                String::from_utf8(out)
                    .map(Lit::Str)
                    .map_err(|_| self.err("string is not valid UTF-8"))
            }
            Some(c) if c.is_ascii_digit() => {
                let start = self.pos;
                while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    self.bump();
                }
                let digits = std::str::from_utf8(self.s.get(start..self.pos).unwrap_or_default())
                    .unwrap_or_default();
                let n = digits
                    .parse::<u64>()
                    .map_err(|_| self.err("integer does not fit in 64 bits"))?;
                // Python 2 wrote long integers with an `L` suffix.
                if matches!(self.peek(), Some(b'L' | b'l')) {
                    self.bump();
                }
                Ok(Lit::Int(n))
            }
            Some(c) if c.is_ascii_alphabetic() => {
                let start = self.pos;
                while self
                    .peek()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')
                {
                    self.bump();
                }
                match self.s.get(start..self.pos) {
                    Some(b"True") => Ok(Lit::Bool(true)),
                    Some(b"False") => Ok(Lit::Bool(false)),
                    Some(b"None") => Ok(Lit::None),
                    _ => {
                        self.pos = start;
                        Err(self.err("unexpected name (True, False or None expected)"))
                    }
                }
            }
            Some(b'-') => Err(self.err("negative number")),
            Some(_) => Err(self.err("unexpected character")),
            None => Err(self.err("unexpected end of header")),
        }
    }
}

/// Reads rows of a `.npy` file from any `Read + Seek`, a block at a time.
#[derive(Debug)]
pub struct NpyReader<R> {
    inner: R,
    header: NpyHeader,
    next_row: u64,
    /// Where `inner` is positioned (to skip redundant seeks).
    pos: u64,
    #[cfg_attr(
        not(feature = "diagnostics"),
        allow(dead_code, reason = "read_rows uses it")
    )]
    scratch: Vec<u8>,
}

#[cfg_attr(
    not(feature = "diagnostics"),
    allow(
        dead_code,
        reason = "the fuzz targets and tests call these through `zrecord::diagnostics`"
    )
)]
impl<R: Read + Seek> NpyReader<R> {
    /// Reads and decodes the header; `inner` must be positioned at the start of the file.
    /// Does not check the file's length: see [`NpyHeader::check_file_len`].
    pub fn new(mut inner: R) -> Result<NpyReader<R>, NpyError> {
        let mut prefix = Vec::with_capacity(12);
        read_up_to(&mut inner, &mut prefix, 12, 0)?;
        let len = NpyHeader::header_len(&prefix)?;
        let have = prefix.len() as u64;
        if let Some(rest) = len.checked_sub(have).filter(|&r| r > 0) {
            read_up_to(&mut inner, &mut prefix, rest, have)?;
        }
        let header = NpyHeader::decode(&prefix)?;
        let pos = prefix.len() as u64;
        Ok(NpyReader {
            inner,
            header,
            next_row: 0,
            pos,
            scratch: Vec::new(),
        })
    }

    /// The decoded header.
    pub fn header(&self) -> &NpyHeader {
        &self.header
    }

    /// The index of the next row [`NpyReader::read_rows`] returns.
    pub fn next_row(&self) -> u64 {
        self.next_row
    }

    /// Reads the stored bytes of the next `n` rows (fewer at the end) into `stored` (replacing
    /// its contents), ready for [`NpyHeader::decode_rows`]; returns the number of rows.
    #[expect(
        clippy::arithmetic_side_effects,
        reason = "n is clamped to rows - next_row, so next_row + n <= rows and \
                  (next_row + n) * row_bytes <= rows * row_bytes = data_bytes; \
                  data_offset + data_bytes fits in a u64 (NpyHeader::decode, checked_sizes)"
    )]
    pub fn read_stored(&mut self, n: u64, stored: &mut Vec<u8>) -> Result<u64, NpyError> {
        let n = n.min(self.header.rows().saturating_sub(self.next_row));
        stored.clear();
        if n == 0 {
            return Ok(0);
        }
        let h = &self.header;
        if h.fortran_order && !h.item_shape().is_empty() {
            let segments: Vec<(u64, u64)> = h.fortran_segments(self.next_row, n).collect();
            for (at, len) in segments {
                self.read_at(at, len, stored)?;
            }
        } else {
            let at = h.data_offset + self.next_row * h.row_bytes();
            let len = n * h.row_bytes();
            self.read_at(at, len, stored)?;
        }
        self.next_row += n;
        Ok(n)
    }

    /// Decodes the next `n` rows (fewer at the end) and appends them to `out` as little-endian,
    /// row-major bytes; returns the number of rows (0 at the end).
    pub fn read_rows(&mut self, n: u64, out: &mut Vec<u8>) -> Result<u64, NpyError> {
        let mut stored = std::mem::take(&mut self.scratch);
        let r = self.read_stored(n, &mut stored);
        let r = r.and_then(|got| self.header.decode_rows(got, &stored, out).map(|()| got));
        self.scratch = stored;
        r
    }

    /// Appends the `len` bytes at file offset `at` to `out`; fewer is [`NpyErrorKind::Truncated`].
    #[expect(
        clippy::arithmetic_side_effects,
        reason = "at + len is checked first (end); got <= len since read_up_to reads through \
                  take(len) and only appends, so at + got <= end"
    )]
    fn read_at(&mut self, at: u64, len: u64, out: &mut Vec<u8>) -> Result<(), NpyError> {
        let end = at.checked_add(len).ok_or_else(|| {
            NpyError::malformed(
                at,
                format!("a read of {len} bytes at byte {at} ends past 2^64"),
            )
        })?;
        if self.pos != at {
            self.inner.seek(SeekFrom::Start(at)).map_err(|e| NpyError {
                offset: at,
                kind: NpyErrorKind::Io(e),
            })?;
            self.pos = at;
        }
        let before = out.len() as u64;
        read_up_to(&mut self.inner, out, len, at)?;
        let got = out.len() as u64 - before;
        let reached = at + got;
        self.pos = reached;
        if got < len {
            return Err(NpyError::truncated(reached, end, reached));
        }
        Ok(())
    }
}

/// Appends up to `len` bytes from `r` to `out`; fewer only at end of file. `at` is the file
/// offset of the first byte (for errors).
fn read_up_to<R: Read>(r: &mut R, out: &mut Vec<u8>, len: u64, at: u64) -> Result<(), NpyError> {
    r.take(len).read_to_end(out).map_err(|e| NpyError {
        offset: at,
        kind: NpyErrorKind::Io(e),
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// Builds a `.npy` file the way NumPy does: header padded with spaces to a multiple of 64,
    /// ending in a newline.
    #[expect(
        clippy::arithmetic_side_effects,
        reason = "test headers are a few dozen bytes"
    )]
    fn npy(version: (u8, u8), header: &str, data: &[u8]) -> Vec<u8> {
        let prefix = if version.0 == 1 { 10 } else { 12 };
        let mut text = header.to_string();
        while !(prefix + text.len() + 1).is_multiple_of(64) {
            text.push(' ');
        }
        text.push('\n');
        let mut f = MAGIC.to_vec();
        f.extend_from_slice(&[version.0, version.1]);
        if version.0 == 1 {
            f.extend_from_slice(&(text.len() as u16).to_le_bytes());
        } else {
            f.extend_from_slice(&(text.len() as u32).to_le_bytes());
        }
        f.extend_from_slice(text.as_bytes());
        f.extend_from_slice(data);
        f
    }

    /// Big-endian bytes from little-endian ones (the crate denies `to_be_bytes`).
    fn be(le: &[u8]) -> Vec<u8> {
        le.iter().rev().copied().collect()
    }

    fn read_all(file: Vec<u8>, block: u64) -> Result<(NpyHeader, Vec<u8>), NpyError> {
        let len = file.len() as u64;
        let mut r = NpyReader::new(Cursor::new(file))?;
        r.header().check_file_len(len)?;
        let mut out = Vec::new();
        while r.read_rows(block, &mut out)? > 0 {}
        Ok((r.header().clone(), out))
    }

    #[test]
    fn c_order_little_endian_round_trips_in_every_version() {
        let data: Vec<u8> = (0..6u32).flat_map(|v| (v as f32).to_le_bytes()).collect();
        for v in [(1, 0), (2, 0), (3, 0)] {
            let f = npy(
                v,
                "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }",
                &data,
            );
            let (h, out) = read_all(f, 2).unwrap();
            assert!(h.stored_as_decoded());
            assert_eq!(h.version, v);
            assert_eq!(h.dtype, DType::F32);
            assert_eq!(h.shape, vec![3, 2]);
            assert_eq!(h.item_shape(), &[2]);
            assert_eq!(h.data_offset % 64, 0);
            assert_eq!(out, data);
        }
    }

    #[test]
    fn big_endian_is_swapped() {
        let vals = [1u32, 0x0102_0304, u32::MAX, 7];
        let data: Vec<u8> = vals.iter().flat_map(|v| be(&v.to_le_bytes())).collect();
        let f = npy(
            (1, 0),
            "{'descr': '>u4', 'fortran_order': False, 'shape': (4,), }",
            &data,
        );
        let (h, out) = read_all(f, 3).unwrap();
        assert!(h.big_endian);
        assert!(!h.stored_as_decoded());
        assert_eq!(h.item_shape(), &[] as &[u64]);
        let want: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(out, want);
    }

    #[test]
    fn fortran_order_is_transposed_to_row_major() {
        // shape (2, 3, 4) of i16, value = 100*i + 10*j + k, stored column-major and big-endian.
        let (a, b, c) = (2u64, 3u64, 4u64);
        let mut stored = Vec::new();
        for k in 0..c {
            for j in 0..b {
                for i in 0..a {
                    stored.extend_from_slice(&be(&((100 * i + 10 * j + k) as i16).to_le_bytes()));
                }
            }
        }
        let mut want = Vec::new();
        for i in 0..a {
            for j in 0..b {
                for k in 0..c {
                    want.extend_from_slice(&((100 * i + 10 * j + k) as i16).to_le_bytes());
                }
            }
        }
        let f = npy(
            (2, 0),
            "{'descr': '>i2', 'fortran_order': True, 'shape': (2, 3, 4), }",
            &stored,
        );
        for block in [1, 2, 5] {
            let (h, out) = read_all(f.clone(), block).unwrap();
            assert!(h.fortran_order);
            assert_eq!(out, want, "block {block}");
        }
    }

    #[test]
    fn every_numeric_dtype_maps() {
        for (d, t) in [
            ("|b1", DType::Bool),
            ("|i1", DType::I8),
            ("|u1", DType::U8),
            ("<i2", DType::I16),
            (">u2", DType::U16),
            ("<i4", DType::I32),
            ("<u4", DType::U32),
            ("<i8", DType::I64),
            ("<u8", DType::U64),
            ("<f2", DType::F16),
            ("<f4", DType::F32),
            (">f8", DType::F64),
        ] {
            let data = vec![0u8; 2 * t.item_bytes() as usize];
            let f = npy(
                (1, 0),
                &format!("{{'descr': '{d}', 'fortran_order': False, 'shape': (2,), }}"),
                &data,
            );
            let (h, out) = read_all(f, 8).unwrap();
            assert_eq!(h.dtype, t, "{d}");
            assert_eq!(out.len(), data.len());
        }
    }

    #[test]
    fn unsupported_dtypes_are_typed_errors() {
        for d in [
            "'|O'",
            "'<c8'",
            "'<U5'",
            "'|S3'",
            "'<M8[ns]'",
            "'<f16'",
            "[('a', '<i4'), ('b', '<f4')]",
            "'|V8'",
        ] {
            let f = npy(
                (1, 0),
                &format!("{{'descr': {d}, 'fortran_order': False, 'shape': (2,), }}"),
                &[0u8; 64],
            );
            let e = NpyReader::new(Cursor::new(f)).unwrap_err();
            assert!(matches!(e.kind, NpyErrorKind::Unsupported(_)), "{d}: {e}");
        }
    }

    #[test]
    fn malformed_headers_are_errors() {
        for h in [
            "",
            "{",
            "{'descr': '<f4', 'fortran_order': False}",
            "{'descr': '<f4', 'shape': (2,)}",
            "{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} trailing",
            "{'descr': 'zz', 'fortran_order': False, 'shape': (2,)}",
            "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
        ] {
            let f = npy((1, 0), h, &[0u8; 64]);
            assert!(NpyReader::new(Cursor::new(f)).is_err(), "{h}");
        }
        // A 0-d array has no rows.
        let f = npy(
            (1, 0),
            "{'descr': '<f4', 'fortran_order': False, 'shape': (), }",
            &[0; 4],
        );
        assert!(matches!(
            NpyReader::new(Cursor::new(f)).unwrap_err().kind,
            NpyErrorKind::Unsupported(_)
        ));
        // Bad magic, unknown version.
        assert!(NpyHeader::decode(b"\x93NUMPZ\x01\x00\x00\x00").is_err());
        let mut f = npy(
            (1, 0),
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }",
            &[0; 4],
        );
        f[6] = 4;
        assert!(matches!(
            NpyHeader::decode(&f).unwrap_err().kind,
            NpyErrorKind::Unsupported(_)
        ));
    }

    /// Fuzz finding (npy_header): with no rows the array holds no bytes whatever its row shape,
    /// so a header with 0 rows of 2^80 bytes decoded, and `row_bytes` (called by `decode_rows`)
    /// overflowed: a panic in a debug build, a wrapped row size in a release one.
    #[test]
    fn zero_rows_of_an_overflowing_row_size_is_refused() {
        let f = npy(
            (1, 0),
            "{'descr': '<f8', 'fortran_order': False, 'shape': (0, 1099511627776, 1099511627776), }",
            &[],
        );
        let e = NpyHeader::decode(&f).unwrap_err();
        assert!(matches!(e.kind, NpyErrorKind::Malformed(_)), "{e}");
        // The largest row that fits still decodes, with no rows.
        let f = npy(
            (1, 0),
            "{'descr': '<f8', 'fortran_order': False, 'shape': (0, 2305843009213693951), }",
            &[],
        );
        let h = NpyHeader::decode(&f).unwrap();
        assert_eq!(h.row_bytes(), 2305843009213693951 * 8);
        let mut out = Vec::new();
        h.decode_rows(0, &[], &mut out).unwrap();
        assert!(out.is_empty());
    }

    /// Fuzz finding (npy_header): a Fortran-order row with a zero dimension holds no bytes, but
    /// the row-major strides of its other dimensions overflowed in `decode_rows`.
    #[test]
    fn fortran_rows_of_zero_items_with_huge_dimensions_decode_to_nothing() {
        let f = npy(
            (1, 0),
            "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 0, 1099511627776, 1099511627776), }",
            &[],
        );
        let h = NpyHeader::decode(&f).unwrap();
        assert_eq!(h.row_bytes(), 0);
        let mut out = Vec::new();
        h.decode_rows(1, &[], &mut out).unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn header_sizes_that_overflow_are_typed_errors_at_the_shape() {
        // Each would wrap a u64 somewhere later: items per row with zero rows (this one decoded
        // before and then panicked in `row_bytes`), row bytes, rows × row bytes, and the end of
        // the data (data offset + data bytes).
        for (descr, shape) in [
            ("<f4", "(0, 4294967296, 4294967296)"),
            ("<f4", "(0, 18446744073709551615, 2)"),
            ("<f8", "(1, 2305843009213693952)"),
            ("<f4", "(4611686018427387904, 4)"),
            ("|u1", "(18446744073709551615,)"),
            ("|u1", "(18446744073709551600,)"),
        ] {
            let h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
            let f = npy((1, 0), &h, &[]);
            let at = h.find("'shape'").unwrap() as u64 + 10 + "'shape': ".len() as u64;
            let e = NpyHeader::decode(&f).unwrap_err();
            assert!(matches!(e.kind, NpyErrorKind::Malformed(_)), "{shape}: {e}");
            assert_eq!(e.offset, at, "{shape}: {e}");
            assert!(e.to_string().contains("too large"), "{e}");
        }
        // The largest sizes that fit still decode, and their sizes are exact.
        let f = npy(
            (1, 0),
            "{'descr': '|u1', 'fortran_order': False, 'shape': (18446744073709551487,), }",
            &[],
        );
        let h = NpyHeader::decode(&f).unwrap();
        assert_eq!(h.data_offset() + h.data_bytes(), u64::MAX);
        assert_eq!(h.row_bytes(), 1);
        // A zero-row array of a sane item shape is fine, and reads no rows.
        let f = npy(
            (1, 0),
            "{'descr': '<f4', 'fortran_order': True, 'shape': (0, 3, 2), }",
            &[],
        );
        let (h, out) = read_all(f, 4).unwrap();
        assert_eq!(
            (h.items_per_row(), h.row_bytes(), h.data_bytes()),
            (6, 24, 0)
        );
        assert!(out.is_empty());
    }

    #[test]
    fn fortran_segments_clamp_rows_past_the_end() {
        let f = npy(
            (1, 0),
            "{'descr': '<i2', 'fortran_order': True, 'shape': (3, 4), }",
            &[0u8; 24],
        );
        let h = NpyHeader::decode(&f).unwrap();
        let d = h.data_offset();
        let all: Vec<_> = h.fortran_segments(0, 3).collect();
        assert_eq!(all, [(d, 6), (d + 6, 6), (d + 12, 6), (d + 18, 6)]);
        assert_eq!(
            h.fortran_segments(2, u64::MAX).collect::<Vec<_>>()[0],
            (d + 4, 2)
        );
        for (first, n) in [(u64::MAX, u64::MAX), (3, 1), (u64::MAX, 0)] {
            assert!(h.fortran_segments(first, n).all(|(_, len)| len == 0));
        }
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let data: Vec<u8> = (0..24u8).collect();
        let f = npy(
            (1, 0),
            "{'descr': '<i2', 'fortran_order': True, 'shape': (3, 4), }",
            &data,
        );
        for n in 0..f.len() {
            let cut = f[..n].to_vec();
            let r = read_all(cut.clone(), 2);
            assert!(r.is_err(), "truncation to {n} not detected");
            // Without the up-front length check, reading the rows fails too.
            if let Ok(mut r) = NpyReader::new(Cursor::new(cut)) {
                let mut out = Vec::new();
                let mut res = Ok(1);
                while matches!(res, Ok(k) if k > 0) {
                    res = r.read_rows(2, &mut out);
                }
                let e = res.unwrap_err();
                assert!(matches!(e.kind, NpyErrorKind::Truncated { .. }), "{n}: {e}");
            }
        }
        assert!(read_all(f, 2).is_ok());
    }

    #[test]
    fn every_bit_flip_of_the_header_is_an_error_or_a_valid_header() {
        let f = npy(
            (1, 0),
            "{'descr': '<i2', 'fortran_order': False, 'shape': (3, 4), }",
            &[0u8; 24],
        );
        let hlen = NpyHeader::header_len(&f).unwrap() as usize;
        for bit in 0..hlen * 8 {
            let mut d = f.clone();
            d[bit / 8] ^= 1 << (bit % 8);
            // Never a panic; if it decodes, the row reader stays in bounds.
            if let Ok((h, out)) = read_all(d, 2) {
                assert_eq!(out.len() as u64, h.data_bytes());
            }
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let base = npy(
            (3, 0),
            "{'descr': '>f8', 'fortran_order': True, 'shape': (2, 2, 2), }",
            &[0u8; 64],
        );
        for _ in 0..2000 {
            let mut d = base.clone();
            for _ in 0..4 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let i = (x as usize) % d.len();
                d[i] = (x >> 32) as u8;
            }
            let _ = read_all(d, 1);
        }
    }

    #[test]
    fn python2_long_suffix_and_double_quotes_parse() {
        let f = npy(
            (1, 0),
            "{\"descr\": \"<u2\", \"fortran_order\": False, \"shape\": (2L, 1L)}",
            &[1, 0, 2, 0],
        );
        let (h, out) = read_all(f, 1).unwrap();
        assert_eq!(h.shape, vec![2, 1]);
        assert_eq!(out, vec![1, 0, 2, 0]);
    }
}
