//! `Batch::column(f)` never lies: when it returns bytes, they are exactly every record's value
//! of field `f` end to end, in record order, on every backend and for raw and deflate records;
//! `value_len` gives each record's share; `shape` is the field's declared shape.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use zrecord::{Backend, Codec, DType, Dataset, Field, ReadConfig, Schema, Writer, WriterConfig};

fn value(i: u64, f: usize) -> Vec<u8> {
    let len = match f {
        0 => 64,                   // a whole slot: back to back in the slab
        1 => (i % 5) as usize * 3, // ragged, some absent
        _ => 1024,
    };
    (0..len)
        .map(|k| (i as usize * 31 + k * 7 + f) as u8)
        .collect()
}

#[test]
fn column_is_every_value_end_to_end_or_none() {
    for codec in [Codec::Raw, Codec::Deflate] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("d");
        let schema = Schema::new()
            .field(Field::new("a", DType::U8).shape(vec![64]).codec(codec))
            .field(Field::new("b", DType::U8).codec(codec))
            .field(Field::new("c", DType::U8).shape(vec![1024]).codec(codec))
            .chunk_size_bytes(16 << 10);
        let mut w = Writer::create(&dir, &schema, WriterConfig::default()).unwrap();
        for i in 0..300u64 {
            w.append(&[value(i, 0), value(i, 1), value(i, 2)]).unwrap();
        }
        w.commit().unwrap();
        for backend in [Backend::Uring, Backend::Psync, Backend::Mmap, Backend::Auto] {
            let ds = Dataset::open_with(&dir, ReadConfig::default().with_backend(backend)).unwrap();
            let indices: Vec<u64> = vec![5, 0, 299, 5, 17, 18, 19, 150, 2];
            let fields = [vec!["a", "b", "c"], vec!["c"], vec!["a"]];
            let mut some = 0;
            for names in &fields {
                let batch = ds.gather_fields_blocking(&indices, names).unwrap();
                for (f, name) in names.iter().enumerate() {
                    let schema_f = ["a", "b", "c"].iter().position(|n| n == name).unwrap();
                    let want: Vec<u8> = indices.iter().flat_map(|&i| value(i, schema_f)).collect();
                    for (r, &i) in indices.iter().enumerate() {
                        assert_eq!(batch.value_len(r, f), Some(value(i, schema_f).len()));
                    }
                    let shape = batch.shape(f).map(<[u64]>::to_vec);
                    let declared = match schema_f {
                        0 => Some(vec![64]),
                        1 => None,
                        _ => Some(vec![1024]),
                    };
                    assert_eq!(shape, declared, "{backend:?} {name}");
                    if let Some(col) = batch.column(f) {
                        some += 1;
                        assert_eq!(&col[..], &want[..], "{codec:?} {backend:?} field {name}");
                    }
                }
                assert_eq!(batch.column(names.len()), None);
                assert_eq!(batch.value_len(indices.len(), 0), None);
            }
            // A single field of whole 64-byte slots read into the slab is one column.
            if backend == Backend::Psync || codec == Codec::Deflate {
                assert!(some >= 2, "{codec:?} {backend:?}: {some} columns");
            }
            // In columns, on every backend.
            let copied = Dataset::open_with(
                &dir,
                ReadConfig::default()
                    .with_backend(backend)
                    .with_columns(true),
            )
            .unwrap();
            for name in ["c", "a"] {
                let batch = copied.gather_fields_blocking(&indices, &[name]).unwrap();
                let schema_f = if name == "c" { 2 } else { 0 };
                let want: Vec<u8> = indices.iter().flat_map(|&i| value(i, schema_f)).collect();
                let col = batch
                    .column(0)
                    .unwrap_or_else(|| panic!("{codec:?} {backend:?} {name}"));
                assert_eq!(&col[..], &want[..]);
            }
        }
    }
}
