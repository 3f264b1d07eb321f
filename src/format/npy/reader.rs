//! [`NpyReader`]: rows of a `.npy` file from any `Read + Seek`, a block at a time.

use super::{NpyError, NpyErrorKind, NpyHeader};
use std::io::{Read, Seek, SeekFrom};

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
