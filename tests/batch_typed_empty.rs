//! An absent (zero-length) value of a typed field views as an empty slice of any element type,
//! so `pad_stack_field` works on a batch holding empty sequences.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use zrecord::pipeline::{pad_stack_field, PadConfig};
use zrecord::{DType, Dataset, Field, Schema, Writer, WriterConfig};

fn ids(i: u32) -> Vec<u32> {
    // Every third record is empty.
    (0..(i % 3) * 2).map(|j| i * 100 + j).collect()
}

#[test]
fn empty_typed_values_are_empty_slices() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let schema = Schema::new()
        .field(Field::new("u", DType::U32))
        .field(Field::new("l", DType::I64))
        .field(Field::new("f", DType::F32));
    let mut w = Writer::create(&dir, &schema, WriterConfig::default()).unwrap();
    for i in 0..9u32 {
        let u = ids(i);
        let l: Vec<i64> = u.iter().map(|&x| -i64::from(x)).collect();
        let f: Vec<f32> = u.iter().map(|&x| x as f32 + 0.5).collect();
        w.append(&[
            bytemuck::cast_slice(&u).to_vec(),
            bytemuck::cast_slice(&l).to_vec(),
            bytemuck::cast_slice(&f).to_vec(),
        ])
        .unwrap();
    }
    w.commit().unwrap();
    let ds = Dataset::open(&dir).unwrap();
    let batch = ds.gather_blocking(&[0, 1, 2, 3, 4, 5]).unwrap();
    for (r, &i) in batch.indices().iter().enumerate() {
        let want = ids(i as u32);
        assert_eq!(batch.typed::<u32>(r, 0).unwrap(), &want[..], "record {i}");
        assert_eq!(batch.typed::<i64>(r, 1).unwrap().len(), want.len());
        assert_eq!(batch.typed::<f32>(r, 2).unwrap().len(), want.len());
    }
    assert!(batch.typed::<u32>(0, 0).unwrap().is_empty());
    assert!(batch.typed::<i64>(3, 1).unwrap().is_empty());
    assert!(batch.typed::<f32>(0, 2).unwrap().is_empty());

    let padded = pad_stack_field::<u32>(&batch, 0, PadConfig::new(7)).unwrap();
    assert_eq!(padded.cols, 4);
    assert_eq!(padded.lengths, vec![0, 2, 4, 0, 2, 4]);
    assert_eq!(padded.row(0).unwrap(), &[7, 7, 7, 7]);
    assert_eq!(padded.row(1).unwrap(), &[100, 101, 7, 7]);
    assert!(pad_stack_field::<i64>(&batch, 1, PadConfig::new(0)).is_ok());
    assert!(pad_stack_field::<f32>(&batch, 2, PadConfig::new(0.0)).is_ok());
}
