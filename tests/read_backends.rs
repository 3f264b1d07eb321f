//! Every read backend (io_uring, pread pool, mmap, auto), with and without O_DIRECT and checksum
//! verification, returns the same bytes for the same batch: the expected ones.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::needless_range_loop
)]

use zrecord::{Backend, Codec, DType, Dataset, Field, ReadConfig, Schema, Writer, WriterConfig};

/// Record sizes that cross every boundary the engine cares about: empty, tiny, around a page,
/// around the 1 MiB coalescing limit, and big.
const SIZES: &[usize] = &[
    0,
    1,
    63,
    64,
    65,
    4095,
    4096,
    4097,
    65_536,
    (1 << 20) - 1,
    1 << 20,
    3 << 20,
];

fn value(i: u64, field: usize) -> Vec<u8> {
    let len = SIZES[(i as usize * 7 + field * 3) % SIZES.len()];
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ field as u64;
    (0..len)
        .map(|j| {
            if field == 1 && j % 5 != 0 {
                // Compressible for the deflate field, with some entropy.
                return (j % 11) as u8;
            }
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn build(dir: &std::path::Path, n: u64) -> Vec<Vec<Vec<u8>>> {
    let schema = Schema::new()
        .field(Field::new("raw", DType::U8))
        .field(Field::new("packed", DType::U8).codec(Codec::Deflate))
        .chunk_size_bytes(8 << 20);
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    let mut model = Vec::new();
    for i in 0..n {
        let rec = vec![value(i, 0), value(i, 1)];
        w.append(&rec).unwrap();
        model.push(rec);
    }
    w.commit().unwrap();
    // Some modifications and a delete, so patches and moved records are read too.
    for i in (0..n).step_by(9) {
        let v = value(i + 1000, 0);
        w.modify(i, "raw", &v).unwrap();
        model[i as usize][0] = v;
    }
    w.delete(3).unwrap();
    let last = model.pop().unwrap();
    model[3] = last;
    w.commit().unwrap();
    model
}

fn batches(n: u64) -> Vec<Vec<u64>> {
    let mut x = 42u64;
    let mut out = vec![
        (0..n).collect::<Vec<_>>(), // sequential: coalescing
        (0..n).rev().collect(),     // reverse order
        vec![5, 5, 5, 0, 5],        // duplicates
        vec![],                     // empty
    ];
    for _ in 0..6 {
        out.push(
            (0..37)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x % n
                })
                .collect(),
        );
    }
    out
}

#[test]
fn every_backend_returns_the_same_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let model = build(&dir, 60);
    let n = model.len() as u64;
    if !zrecord::uring_available() {
        println!("io_uring is unavailable here: Backend::Uring runs on the pread fallback");
    }
    if let Some(b) = zrecord::diagnostics::forced_backend().unwrap() {
        println!("ZRECORD_IO forces every dataset onto {b}");
    }
    for backend in [Backend::Uring, Backend::Psync, Backend::Mmap, Backend::Auto] {
        for direct in [false, true] {
            for verify in [true, false] {
                let opts = ReadConfig::default()
                    .with_backend(backend)
                    .with_direct_io(direct)
                    .with_verify_checksums(verify);
                let ds = Dataset::open_with(&dir, opts).unwrap();
                for idx in batches(n) {
                    let b = ds.gather_blocking(&idx).unwrap();
                    assert_eq!(b.len(), idx.len());
                    assert_eq!(b.indices(), &idx[..]);
                    for (r, &i) in idx.iter().enumerate() {
                        for f in 0..2 {
                            let got = b.get(r, f).unwrap();
                            let want = &model[i as usize][f];
                            assert!(
                                got == &want[..],
                                "{backend} direct={direct} verify={verify}: record {i} field {f}: \
                                 got {} bytes, want {}",
                                got.len(),
                                want.len()
                            );
                        }
                    }
                }
                // Single-record reads agree too.
                for i in [0, n / 2, n - 1] {
                    let rec = ds.get(i).unwrap();
                    assert_eq!(&rec[0][..], &model[i as usize][0][..]);
                    assert_eq!(&rec[1][..], &model[i as usize][1][..]);
                }
            }
        }
    }
}

#[test]
fn slab_values_are_64_byte_aligned() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    build(&dir, 20);
    for backend in [Backend::Uring, Backend::Psync] {
        let ds = Dataset::open_with(&dir, ReadConfig::default().with_backend(backend)).unwrap();
        if matches!(ds.backend(), Some(Backend::Mmap | Backend::Auto)) {
            println!(
                "ZRECORD_IO={} forces zero-copy slices: alignment not promised",
                ds.backend_name()
            );
            return;
        }
        let b = ds.gather_blocking(&[1, 2, 3, 4, 5, 6, 7]).unwrap();
        for r in 0..b.len() {
            for f in 0..2 {
                let v = b.get(r, f).unwrap();
                if !v.is_empty() {
                    assert_eq!(
                        v.as_ptr() as usize % 64,
                        0,
                        "{backend} record {r} field {f}"
                    );
                }
            }
        }
    }
}

#[test]
fn out_of_range_and_unknown_fields_are_errors_on_every_backend() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    build(&dir, 10);
    for backend in [Backend::Uring, Backend::Psync, Backend::Mmap, Backend::Auto] {
        let ds = Dataset::open_with(&dir, ReadConfig::default().with_backend(backend)).unwrap();
        let n = ds.len();
        assert!(matches!(
            ds.gather_blocking(&[0, n]),
            Err(zrecord::Error::IndexOutOfRange { index, len }) if index == n && len == n
        ));
        assert!(matches!(
            ds.gather_fields_blocking(&[0], &["nope"]),
            Err(zrecord::Error::UnknownField { .. })
        ));
        let b = ds.gather_fields_blocking(&[1, 0], &["packed"]).unwrap();
        assert_eq!(b.fields().count(), 1);
    }
}

/// A gather bigger than the engine's part size (65,536 values) is read in parts and joined:
/// every backend still returns every value in caller order, duplicates and empty values
/// included.
#[test]
fn a_gather_of_many_parts_returns_every_value() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let schema = Schema::new()
        .field(Field::new("raw", DType::U8))
        .field(Field::new("packed", DType::U8).codec(Codec::Deflate));
    let mut w = Writer::create(&dir, &schema, WriterConfig::default()).unwrap();
    let value = |i: u64, f: u64| -> Vec<u8> {
        let len = ((i * 7 + f * 3) % 23) as usize; // 0..22 bytes, some empty
        (0..len)
            .map(|j| (i as u8).wrapping_add(j as u8 * (f as u8 + 1)))
            .collect()
    };
    let n = 5_000u64;
    for i in 0..n {
        w.append(&[value(i, 0), value(i, 1)]).unwrap();
    }
    w.commit().unwrap();
    drop(w);
    // 100,000 indices × 2 fields: four parts.
    let mut x = 7u64;
    let idx: Vec<u64> = (0..100_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        })
        .collect();
    for backend in [Backend::Uring, Backend::Psync, Backend::Mmap, Backend::Auto] {
        let ds = Dataset::open_with(&dir, ReadConfig::default().with_backend(backend)).unwrap();
        let b = ds.gather_blocking(&idx).unwrap();
        assert_eq!(b.indices(), &idx[..]);
        for (r, &i) in idx.iter().enumerate() {
            for f in 0..2 {
                assert!(
                    b.get(r, f).unwrap() == &value(i, f as u64)[..],
                    "{backend}: record {i} field {f} at {r}"
                );
            }
        }
    }
}
