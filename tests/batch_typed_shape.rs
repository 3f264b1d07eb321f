//! `Batch::typed` checks a value against its field's dtype and its declared shape: a value whose
//! length is not `product(shape)` items is a `ShapeMismatch` naming the field and the record,
//! whatever `meta.json` claims and whichever gather produced the batch; absent values stay empty.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::Path;

use zrecord::diagnostics::Meta;
use zrecord::{DType, Dataset, Error, Field, ReadConfig, Schema, Writer, WriterConfig};

/// A dataset of 4 records: field "x" holds four f32 (16 bytes) in records 0, 1 and 3 and is
/// absent in record 2; field "y" is one u8.
fn dataset(dir: &Path) {
    let schema = Schema::new()
        .field(Field::new("x", DType::F32))
        .field(Field::new("y", DType::U8).shape(vec![]));
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    for i in 0..4u8 {
        let x: Vec<f32> = if i == 2 {
            Vec::new()
        } else {
            (0..4).map(|j| f32::from(i * 10 + j)).collect()
        };
        w.append(&[bytemuck::cast_slice(&x).to_vec(), vec![i]])
            .unwrap();
    }
    w.commit().unwrap();
}

/// Rewrites `meta.json` with field "x" declaring `shape`, with a valid checksum.
fn declare(dir: &Path, shape: Option<Vec<u64>>) {
    let path = dir.join("meta.json");
    let mut meta = Meta::decode(&std::fs::read(&path).unwrap()).unwrap();
    meta.fields[0].shape = shape;
    std::fs::write(&path, meta.encode()).unwrap();
}

fn assert_shape_mismatch(result: zrecord::Result<&[f32]>, record: u64) {
    match result {
        Err(Error::ShapeMismatch { field, reason }) => {
            assert_eq!(field, "x");
            assert!(reason.contains(&format!("record {record}")), "{reason}");
            assert!(reason.contains("[3]"), "{reason}");
            assert!(reason.contains("16 bytes"), "{reason}");
        }
        other => panic!("expected a shape mismatch for record {record}, got {other:?}"),
    }
}

#[test]
fn a_value_longer_than_its_shape_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    dataset(&dir);
    declare(&dir, Some(vec![3]));
    let ds = Dataset::open(&dir).unwrap();
    let indices = [3, 2, 0];
    let batches = [
        ds.gather_blocking(&indices).unwrap(),
        ds.gather_fields_blocking(&indices, &["x"]).unwrap(),
        futures::executor::block_on(ds.gather(&indices)).unwrap(),
        futures::executor::block_on(ds.gather_fields(&indices, &["y", "x"])).unwrap(),
        ds.snapshot()
            .gather_with(&indices, &ReadConfig::default())
            .unwrap(),
    ];
    for batch in &batches {
        let x = batch.field_position("x").unwrap();
        // 16 bytes are four f32, not the declared three: refused, naming the dataset record.
        assert_shape_mismatch(batch.typed::<f32>(0, x), 3);
        assert_shape_mismatch(batch.typed::<f32>(2, x), 0);
        // An absent value is empty under any shape.
        assert!(batch.typed::<f32>(1, x).unwrap().is_empty());
        // The dtype is checked first, as before.
        assert!(matches!(
            batch.typed::<u32>(0, x),
            Err(Error::DtypeMismatch { .. })
        ));
    }
    // A field whose values fit its shape (a scalar: shape []) still reads.
    let y = batches[0].field_position("y").unwrap();
    assert_eq!(batches[0].typed::<u8>(0, y).unwrap(), &[3]);
}

#[test]
fn values_that_fit_their_shape_read_as_before() {
    for shape in [None, Some(vec![4]), Some(vec![2, 2]), Some(vec![1, 4, 1])] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ds");
        dataset(&dir);
        declare(&dir, shape.clone());
        let ds = Dataset::open(&dir).unwrap();
        let batch = ds.gather_blocking(&[1, 2]).unwrap();
        assert_eq!(
            batch.typed::<f32>(0, 0).unwrap(),
            &[10.0, 11.0, 12.0, 13.0],
            "{shape:?}"
        );
        assert!(batch.typed::<f32>(1, 0).unwrap().is_empty(), "{shape:?}");
    }
}

#[test]
fn a_value_shorter_than_its_shape_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    dataset(&dir);
    declare(&dir, Some(vec![2, 3]));
    let ds = Dataset::open(&dir).unwrap();
    let batch = ds.gather_blocking(&[1]).unwrap();
    match batch.typed::<f32>(0, 0) {
        Err(Error::ShapeMismatch { field, reason }) => {
            assert_eq!(field, "x");
            assert!(reason.contains("record 1"), "{reason}");
            assert!(reason.contains("24 bytes"), "{reason}");
        }
        other => panic!("expected a shape mismatch, got {other:?}"),
    }
}
