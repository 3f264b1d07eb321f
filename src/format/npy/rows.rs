//! Rows: the stored bytes of rows turned into little-endian, row-major bytes (Fortran-order
//! arrays transposed, big-endian items swapped), and where a Fortran-order array stores them.

use super::{NpyError, NpyHeader};

#[cfg_attr(
    not(feature = "diagnostics"),
    allow(
        dead_code,
        reason = "the fuzz targets and tests call these through `zrecord::diagnostics`"
    )
)]
impl NpyHeader {
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
