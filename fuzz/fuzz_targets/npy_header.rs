//! `.npy` headers: `NpyHeader::header_len` and `NpyHeader::decode` never panic on any prefix of a
//! file, and when the header decodes, `decode_rows` on the bytes after it neither panics nor
//! returns anything but exactly `n * row_bytes` bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zrecord::diagnostics::NpyHeader;

fuzz_target!(|data: &[u8]| {
    let len = NpyHeader::header_len(data);
    let Ok(h) = NpyHeader::decode(data) else {
        return;
    };
    assert_eq!(
        len.ok(),
        Some(h.data_offset()),
        "header_len disagrees with decode"
    );
    let _ = h.check_file_len(data.len() as u64);
    let _ = h.stored_as_decoded();
    let _ = h.data_bytes();
    let rest = usize::try_from(h.data_offset())
        .ok()
        .and_then(|o| data.get(o..))
        .unwrap_or_default();
    // The rows the rest holds whole (at most the header's row count), then the rest as it is.
    let row_bytes = h.row_bytes();
    let n = if row_bytes == 0 {
        h.rows().min(4)
    } else {
        (rest.len() as u64 / row_bytes).min(h.rows())
    };
    let whole = rest.get(..(n * row_bytes) as usize).unwrap_or_default();
    let mut out = Vec::new();
    if h.decode_rows(n, whole, &mut out).is_ok() {
        assert_eq!(out.len(), whole.len(), "decode_rows changed the byte count");
    }
    for (off, len) in h.fortran_segments(0, n).take(64) {
        let _ = (off, len);
    }
    let mut out = Vec::new();
    let _ = h.decode_rows(h.rows(), rest, &mut out);
    let _ = h.decode_rows(1, rest, &mut out);
});
