//! Decoding `.npy` files end to end: round trips, every dtype, Fortran order, and bad bytes as
//! typed errors, never panics.

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
