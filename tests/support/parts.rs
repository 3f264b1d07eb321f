//! Single-field parts for the collection tests: one written from a record function, and every
//! record of a dataset read back. Included with `#[path = "support/parts.rs"] mod parts;`.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::Path;

use zrecord::{DType, Dataset, Field, Schema, Writer, WriterConfig};

/// A committed dataset at `dir` of one field `x` of `dtype`, in chunks of `chunk_bytes` (`None`:
/// the default), holding `record(i)` for `i` in `0..n`.
pub fn write(
    dir: &Path,
    dtype: DType,
    chunk_bytes: Option<u64>,
    n: u32,
    record: impl Fn(u32) -> Vec<u8>,
) {
    let mut schema = Schema::new().field(Field::new("x", dtype));
    if let Some(bytes) = chunk_bytes {
        schema = schema.chunk_size_bytes(bytes);
    }
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    for i in 0..n {
        w.append(&[record(i)]).unwrap();
    }
    w.commit().unwrap();
}

/// Every record of `ds`'s first field, in index order.
pub fn records(ds: &Dataset) -> Vec<Vec<u8>> {
    let all: Vec<u64> = (0..ds.len()).collect();
    ds.gather_blocking(&all)
        .unwrap()
        .into_records()
        .into_iter()
        .map(|r| r[0].to_vec())
        .collect()
}
