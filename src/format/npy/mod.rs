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
//!
//! # Where things are
//!
//! One file per job: `header.rs` decodes the header (magic, version, the dictionary's keys,
//! checked sizes) with `literal.rs`, the parser of the Python literal NumPy writes, and
//! `descr.rs`, the dtype string's mapping to a zrecord [`DType`]; `rows.rs` turns stored rows
//! into little-endian, row-major bytes (the Fortran transpose, byte swaps); `reader.rs` reads
//! rows from a file a block at a time; `error.rs` holds [`NpyError`].

#[cfg(test)]
use super::dtype::DType;

mod descr;
mod error;
mod header;
mod literal;
mod reader;
mod rows;
#[cfg(test)]
mod tests;

pub use error::{NpyError, NpyErrorKind};
pub use header::NpyHeader;
pub use reader::NpyReader;

/// The magic string every `.npy` file starts with.
pub const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// The largest header this reader accepts, in bytes. NumPy's own default limit is 10,000; a
/// header of a numeric dtype is never near either.
pub const MAX_HEADER_BYTES: u64 = 1 << 20;
