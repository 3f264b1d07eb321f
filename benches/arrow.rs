//! The Arrow seam: rows/s and MB/s of `Writer::append_record_batch` against the plain `append`
//! loop on the same data.
//!
//! One iteration appends 1,000,000 rows — a `u32` label, a 64-byte `FixedSizeList<u8, 64>`
//! embedding and a ~150-byte `Utf8` caption (about 218 MB) — to a fresh dataset and commits.
//! `append_loop` hands `Writer::append` the same values as slices of prebuilt `Vec`s (the cost of
//! building those from Arrow is left out: that is the best a hand-written loop does);
//! `append_record_batch` takes record batches of 8,192 rows (what an engine hands a sink).
//! The throughput is in bytes of record values; rows/s = bytes/s ÷ 218.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use arrow_array::{
    ArrayRef, FixedSizeListArray, RecordBatch, StringArray, UInt32Array, UInt8Array,
};
use arrow_schema::{DataType, Field as ArrowField};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::sync::Arc;
use zrecord::{DType, Field, Schema, Writer, WriterConfig};

const ROWS: usize = 1_000_000;
const BATCH_ROWS: usize = 8192;

/// A caption of 120 to 180 bytes, different per row.
fn caption(i: usize) -> String {
    let len = 120 + (i * 7919) % 61;
    let words = [
        "a", "photo", "of", "the", "cat", "sitting", "on", "red", "mat", "near", "window",
    ];
    let mut s = format!("{i}:");
    let mut k = i;
    while s.len() < len {
        s.push(' ');
        s.push_str(words[k % words.len()]);
        k = k.wrapping_mul(31).wrapping_add(7);
    }
    s.truncate(len);
    s
}

fn schema() -> Schema {
    Schema::new()
        .field(Field::new("label", DType::U32).shape(vec![]))
        .field(Field::new("embedding", DType::U8).shape(vec![64]))
        .field(Field::new("caption", DType::Bytes))
}

fn batches() -> Vec<RecordBatch> {
    (0..ROWS)
        .step_by(BATCH_ROWS)
        .map(|start| {
            let rows = start..(start + BATCH_ROWS).min(ROWS);
            let labels = UInt32Array::from_iter_values(rows.clone().map(|i| (i % 1000) as u32));
            let emb = UInt8Array::from_iter_values(
                rows.clone()
                    .flat_map(|i| (0..64).map(move |k| (i + k) as u8)),
            );
            let emb = FixedSizeListArray::try_new(
                Arc::new(ArrowField::new_list_field(DataType::UInt8, false)),
                64,
                Arc::new(emb),
                None,
            )
            .unwrap();
            let captions = StringArray::from_iter_values(rows.map(caption));
            RecordBatch::try_from_iter([
                ("label", Arc::new(labels) as ArrayRef),
                ("embedding", Arc::new(emb) as ArrayRef),
                ("caption", Arc::new(captions) as ArrayRef),
            ])
            .unwrap()
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let batches = batches();
    let records: Vec<[Vec<u8>; 3]> = (0..ROWS)
        .map(|i| {
            [
                ((i % 1000) as u32).to_le_bytes().to_vec(),
                (0..64).map(|k| (i + k) as u8).collect(),
                caption(i).into_bytes(),
            ]
        })
        .collect();
    let bytes: usize = records.iter().flatten().map(Vec::len).sum();
    let mut group = c.benchmark_group("arrow_1M_rows");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(bytes as u64));
    let run = |b: &mut criterion::Bencher, f: &dyn Fn(&mut Writer)| {
        b.iter_batched(
            || tempfile::tempdir_in(bench_dir()).unwrap(),
            |tmp| {
                let mut w =
                    Writer::create(tmp.path().join("ds"), &schema(), WriterConfig::default())
                        .unwrap();
                f(&mut w);
                assert_eq!(w.len(), ROWS as u64);
                w.commit().unwrap();
                tmp
            },
            criterion::BatchSize::PerIteration,
        );
    };
    group.bench_function(BenchmarkId::new("append_loop", ROWS), |b| {
        run(b, &|w| {
            for r in &records {
                w.append(r).unwrap();
            }
        })
    });
    group.bench_function(BenchmarkId::new("append_record_batch", ROWS), |b| {
        run(b, &|w| {
            for batch in &batches {
                w.append_record_batch(batch).unwrap();
            }
        })
    });
    group.finish();
}

/// Where the datasets go: `ZRECORD_BENCH_DIR` if set (put it on the disk you measure), else the
/// system temp dir.
fn bench_dir() -> std::path::PathBuf {
    std::env::var_os("ZRECORD_BENCH_DIR")
        .map(Into::into)
        .unwrap_or_else(std::env::temp_dir)
}

criterion_group!(benches, bench);
criterion_main!(benches);
