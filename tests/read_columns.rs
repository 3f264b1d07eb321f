//! `ReadConfig::with_columns`: every field of every gathered batch is one column, exactly each
//! record's value end to end in record order, on every backend, for raw, deflate and zstd
//! records, ragged and absent values, duplicates and runs read in file order (served as views);
//! and a damaged raw byte is still a `ChecksumMismatch` naming its record and field, whichever
//! way the column was laid out (a view, a copy folded into the check, a long value checked block
//! by block, a read into the slab).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::os::unix::fs::FileExt as _;
use zrecord::{
    Backend, Codec, DType, Dataset, Error, Field, ReadConfig, Schema, Writer, WriterConfig,
};

const N: u64 = 400;

/// Record `i`'s value of field `f`: 0 a fixed 16 × u32, 1 ragged bytes (some absent), 2 a
/// deflate field, 3 a zstd field, 4 long raw values (past the copy's 16 KiB block).
fn value(i: u64, f: usize) -> Vec<u8> {
    let len = match f {
        0 => 64,
        1 => (i % 7) as usize * 5,
        2 | 3 => 100 + (i % 3) as usize * 40,
        _ => 40_000 + (i % 5) as usize,
    };
    (0..len)
        .map(|k| match f {
            2 | 3 => ((k % 11) as u64 ^ i) as u8,
            _ => {
                let x = (i * 8 + f as u64)
                    .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    .wrapping_add((k as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9));
                (x ^ x >> 31 ^ x >> 47) as u8
            }
        })
        .collect()
}

fn write(dir: &std::path::Path) {
    let schema = Schema::new()
        .field(Field::new("fixed", DType::U32).shape(vec![16]))
        .field(Field::new("ragged", DType::U8))
        .field(Field::new("deflate", DType::U8).codec(Codec::Deflate))
        .field(Field::new("zstd", DType::U8).codec(Codec::Zstd { level: 3 }))
        .field(Field::new("long", DType::U8))
        .chunk_size_bytes(1 << 20);
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    for i in 0..N {
        w.append(&(0..5).map(|f| value(i, f)).collect::<Vec<_>>())
            .unwrap();
    }
    w.commit().unwrap();
}

fn backends() -> [Backend; 4] {
    [Backend::Uring, Backend::Psync, Backend::Mmap, Backend::Auto]
}

fn columns(backend: Backend) -> ReadConfig {
    ReadConfig::default()
        .with_backend(backend)
        .with_columns(true)
}

#[test]
fn every_field_is_one_column_of_every_value() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    write(&dir);
    let names = ["fixed", "ragged", "deflate", "zstd", "long"];
    let batches: Vec<Vec<u64>> = vec![
        (100..140).collect(),                   // file order: views where raw
        vec![5, 0, 399, 5, 17, 18, 19, 150, 2], // shuffled, a duplicate
        vec![7],                                // one record
        (0..N).rev().step_by(3).collect(),      // reverse
        vec![],                                 // empty
    ];
    for backend in backends() {
        let ds = Dataset::open_with(&dir, columns(backend)).unwrap();
        for indices in &batches {
            for fields in [names.to_vec(), vec!["long", "fixed"], vec!["ragged"]] {
                let batch = ds.gather_fields_blocking(indices, &fields).unwrap();
                for (f, name) in fields.iter().enumerate() {
                    let schema_f = names.iter().position(|n| n == name).unwrap();
                    let want: Vec<u8> = indices.iter().flat_map(|&i| value(i, schema_f)).collect();
                    let col = batch
                        .column(f)
                        .unwrap_or_else(|| panic!("{backend:?} {name} {indices:?}: no column"));
                    assert_eq!(&col[..], &want[..], "{backend:?} {name} {indices:?}");
                    for (r, &i) in indices.iter().enumerate() {
                        assert_eq!(batch.value_len(r, f), Some(value(i, schema_f).len()));
                        assert_eq!(batch.get(r, f).unwrap(), &value(i, schema_f)[..]);
                    }
                }
                if let Some(f) = fields.iter().position(|n| *n == "fixed") {
                    // Every u32 value is aligned for a typed view.
                    for r in 0..indices.len() {
                        assert_eq!(batch.typed::<u32>(r, f).unwrap().len(), 16);
                    }
                }
            }
        }
    }
}

/// Flips one byte of record `victim`'s value of field `f`, in whichever chunk file holds it.
fn damage(dir: &std::path::Path, victim: u64, f: usize) {
    let needle = value(victim, f);
    for entry in std::fs::read_dir(dir.join("chunk")).unwrap() {
        let chunk = entry.unwrap().path();
        let data = std::fs::read(&chunk).unwrap();
        if let Some(at) = data.windows(needle.len()).position(|w| w == &needle[..]) {
            let at = at + needle.len() / 2;
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&chunk)
                .unwrap();
            file.write_all_at(&[data[at] ^ 0x40], at as u64).unwrap();
            file.sync_all().unwrap();
            return;
        }
    }
    panic!("record {victim} field {f} not found raw in any chunk");
}

/// A dataset of field `f` alone: its values lie back to back in the chunks, so a batch read in
/// file order from the mappings is a view of them.
fn write_one(dir: &std::path::Path, f: usize) {
    let name = ["fixed", "ragged", "deflate", "zstd", "long"][f];
    let dtype = if f == 0 { DType::U32 } else { DType::U8 };
    let schema = Schema::new()
        .field(Field::new(name, dtype))
        .chunk_size_bytes(1 << 20);
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    for i in 0..N {
        w.append(&[value(i, f)]).unwrap();
    }
    w.commit().unwrap();
}

#[test]
fn a_field_alone_in_file_order_and_shuffled() {
    for f in [0usize, 1, 4] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("d");
        write_one(&dir, f);
        for backend in backends() {
            let ds = Dataset::open_with(&dir, columns(backend)).unwrap();
            for indices in [(20..60).collect::<Vec<u64>>(), vec![9, 3, 3, 200, 1]] {
                let batch = ds.gather_blocking(&indices).unwrap();
                let want: Vec<u8> = indices.iter().flat_map(|&i| value(i, f)).collect();
                assert_eq!(&batch.column(0).unwrap()[..], &want[..], "{backend:?} {f}");
            }
        }
    }
}

#[test]
fn a_damaged_byte_is_caught_in_every_layout() {
    // A field alone, read in file order: the column is a view, checked where it lies.
    for f in [1usize, 4] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("d");
        write_one(&dir, f);
        damage(&dir, 151, f);
        for backend in backends() {
            let ds = Dataset::open_with(&dir, columns(backend)).unwrap();
            match ds.gather_blocking(&(140..160).collect::<Vec<u64>>()) {
                Err(Error::ChecksumMismatch { index: 151, .. }) => {}
                other => panic!("{backend:?} {f}: {other:?}"),
            }
        }
    }
    // Raw fields: a view (file order), a copy (shuffled) and a long value (checked by block).
    for (f, name) in [(1usize, "ragged"), (4, "long"), (0, "fixed")] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("d");
        write(&dir);
        let victim = 151u64; // ragged: 151 % 7 != 0, so present
        damage(&dir, victim, f);
        for backend in backends() {
            let ds = Dataset::open_with(&dir, columns(backend)).unwrap();
            for indices in [(140..160).collect::<Vec<u64>>(), vec![3, victim, 9, 300]] {
                match ds.gather_fields_blocking(&indices, &[name]) {
                    Err(Error::ChecksumMismatch { index, field, .. }) => {
                        assert_eq!((index, field.as_str()), (victim, name), "{backend:?}");
                    }
                    other => panic!("{backend:?} {name} {indices:?}: {other:?}"),
                }
                // The records around it still read.
                let fine = ds.gather_fields_blocking(&[3, 9, 300], &[name]).unwrap();
                assert_eq!(
                    fine.column(0).unwrap().len(),
                    [3, 9, 300]
                        .iter()
                        .map(|&i| value(i, f).len())
                        .sum::<usize>()
                );
            }
        }
    }
}
