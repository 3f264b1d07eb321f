//! Any sequence of record batches — random columns, lengths, nulls, and slices (offsets ≠ 0) — appended with `Writer::append_record_batch` reads back equal, byte for byte, to a plain `Vec<Vec<u8>>`-per-field model built from the same values.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use arrow_array::builder::{BinaryViewBuilder, LargeBinaryBuilder, ListBuilder, StringBuilder};
use arrow_array::builder::{BooleanBuilder, FixedSizeListBuilder, Int16Builder, UInt8Builder};
use arrow_array::{ArrayRef, RecordBatch, UInt32Array};
use proptest::prelude::*;
use std::sync::Arc;
use zrecord::{DType, Dataset, Field, Schema, Writer, WriterConfig};

/// A column kind, with the field it goes into.
#[derive(Clone, Copy, Debug)]
enum Kind {
    U32,
    /// `FixedSizeList<u8, k>`.
    Fsl(usize),
    Utf8,
    LargeBinary,
    /// `List<i16>`.
    ListI16,
    BinaryView,
    Bool,
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::U32),
        (1usize..5).prop_map(Kind::Fsl),
        Just(Kind::Utf8),
        Just(Kind::LargeBinary),
        Just(Kind::ListI16),
        Just(Kind::BinaryView),
        Just(Kind::Bool),
    ]
}

impl Kind {
    /// The field of a column; a fixed-shape one only if the column has no null (a null of a
    /// fixed-shape field is refused), else variable length.
    fn field(self, name: &str, nulls: bool) -> Field {
        match self {
            Kind::U32 if nulls => Field::new(name, DType::U32),
            Kind::U32 => Field::new(name, DType::U32).shape(vec![]),
            Kind::Fsl(_) if nulls => Field::new(name, DType::U8),
            Kind::Fsl(k) => Field::new(name, DType::U8).shape(vec![k as u64]),
            Kind::Utf8 | Kind::LargeBinary | Kind::BinaryView => Field::new(name, DType::Bytes),
            Kind::ListI16 => Field::new(name, DType::I16),
            Kind::Bool if nulls => Field::new(name, DType::Bool),
            Kind::Bool => Field::new(name, DType::Bool).shape(vec![]),
        }
    }

    /// A row's value as the model stores it, from `seed` (`None`: a null row).
    fn value(self, seed: Option<u64>) -> Option<Vec<u8>> {
        let s = seed?;
        let len = (s % 40) as usize;
        let byte = |i: usize| (s.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8;
        Some(match self {
            Kind::U32 => (s as u32).to_le_bytes().to_vec(),
            Kind::Fsl(k) => (0..k).map(byte).collect(),
            Kind::Utf8 => (0..len).map(|i| b'a' + byte(i) % 26).collect(),
            Kind::LargeBinary | Kind::BinaryView => (0..len).map(byte).collect(),
            Kind::ListI16 => (0..len % 9)
                .flat_map(|i| (byte(i) as i16 - 100).to_le_bytes())
                .collect(),
            Kind::Bool => vec![(s % 2) as u8],
        })
    }

    /// The Arrow column of `rows`.
    fn column(self, rows: &[Option<Vec<u8>>]) -> ArrayRef {
        match self {
            Kind::U32 => Arc::new(UInt32Array::from(
                rows.iter()
                    .map(|r| {
                        r.as_ref()
                            .map(|b| u32::from_le_bytes(b[..4].try_into().unwrap()))
                    })
                    .collect::<Vec<_>>(),
            )),
            Kind::Fsl(k) => {
                let mut b = FixedSizeListBuilder::new(UInt8Builder::new(), k as i32);
                for r in rows {
                    match r {
                        Some(v) => b.values().append_slice(v),
                        // A null row's slots hold whatever the builder puts there.
                        None => (0..k).for_each(|_| b.values().append_null()),
                    }
                    b.append(r.is_some());
                }
                Arc::new(b.finish())
            }
            Kind::Utf8 => {
                let mut b = StringBuilder::new();
                for r in rows {
                    b.append_option(r.as_ref().map(|v| std::str::from_utf8(v).unwrap()));
                }
                Arc::new(b.finish())
            }
            Kind::LargeBinary => {
                let mut b = LargeBinaryBuilder::new();
                rows.iter().for_each(|r| b.append_option(r.as_ref()));
                Arc::new(b.finish())
            }
            Kind::BinaryView => {
                let mut b = BinaryViewBuilder::new();
                rows.iter().for_each(|r| b.append_option(r.as_ref()));
                Arc::new(b.finish())
            }
            Kind::ListI16 => {
                let mut b = ListBuilder::new(Int16Builder::new());
                for r in rows {
                    if let Some(v) = r {
                        for c in v.chunks(2) {
                            b.values().append_value(i16::from_le_bytes([c[0], c[1]]));
                        }
                    }
                    b.append(r.is_some());
                }
                Arc::new(b.finish())
            }
            Kind::Bool => {
                let mut b = BooleanBuilder::new();
                rows.iter()
                    .for_each(|r| b.append_option(r.as_ref().map(|v| v[0] == 1)));
                Arc::new(b.finish())
            }
        }
    }
}

/// Kinds of the columns, rows (per row, per column: a value seed or a null), and the slices of
/// the batch to append, in order.
type Case = (Vec<Kind>, Vec<Vec<Option<u64>>>, Vec<(usize, usize)>);

fn case() -> impl Strategy<Value = Case> {
    (prop::collection::vec(kind(), 1..5), 0usize..30).prop_flat_map(|(kinds, n)| {
        let row = prop::collection::vec(prop::option::weighted(0.75, any::<u64>()), kinds.len());
        let slice = (0..=n).prop_flat_map(move |off| (Just(off), 0..=n - off));
        (
            Just(kinds),
            prop::collection::vec(row, n),
            prop::collection::vec(slice, 1..4),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn record_batches_read_back_as_the_model((kinds, seeds, slices) in case()) {
        let names: Vec<String> = (0..kinds.len()).map(|i| format!("c{i}")).collect();
        // Per column, per row: the model's value (None: null).
        let values: Vec<Vec<Option<Vec<u8>>>> = kinds
            .iter()
            .enumerate()
            .map(|(c, k)| seeds.iter().map(|row| k.value(row[c])).collect())
            .collect();
        let batch = RecordBatch::try_from_iter(
            names.iter().zip(&kinds).zip(&values).map(|((n, k), v)| (n.clone(), k.column(v))),
        )
        .unwrap();
        let schema = names
            .iter()
            .zip(&kinds)
            .zip(&values)
            .fold(Schema::new(), |s, ((n, k), v)| s.field(k.field(n, v.iter().any(Option::is_none))));
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ds");
        let mut w = Writer::create(&dir, &schema, WriterConfig::default()).unwrap();
        let mut model: Vec<Vec<Vec<u8>>> = Vec::new();
        for &(off, len) in &slices {
            let start = w.len();
            let range = w.append_record_batch(&batch.slice(off, len)).unwrap();
            prop_assert_eq!(range, start..start + len as u64);
            for r in off..off + len {
                model.push(values.iter().map(|col| col[r].clone().unwrap_or_default()).collect());
            }
        }
        w.commit().unwrap();
        drop(w);

        let ds = Dataset::open(&dir).unwrap();
        prop_assert_eq!(ds.len(), model.len() as u64);
        let indices: Vec<u64> = (0..ds.len()).collect();
        let got = ds.gather_blocking(&indices).unwrap();
        for (i, rec) in model.iter().enumerate() {
            for (f, want) in rec.iter().enumerate() {
                prop_assert_eq!(got.get(i, f).unwrap(), &want[..], "record {} field {}", i, f);
            }
        }
    }
}
