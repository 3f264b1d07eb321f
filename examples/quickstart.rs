//! Quickstart: write a synthetic image dataset, then run a toy training loop over random
//! batches of it and print the throughput.
//!
//! ```text
//! cargo run --release --example quickstart [-- DIR]
//! ```
//!
//! Without `DIR` the dataset goes to a temporary directory that is removed at exit.

use std::time::Instant;

use zrecord::{Codec, DType, Dataset, Field, Schema, Writer, WriterConfig};

const RECORDS: u64 = 20_000;
const SIDE: usize = 64;
const BATCH: usize = 256;
const STEPS: usize = 400;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tmp;
    let dir = match std::env::args_os().nth(1) {
        Some(d) => std::path::PathBuf::from(d),
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().join("quickstart.zr")
        }
    };

    // 1. Write: one record = a 3×64×64 u8 "image" and an i64 label.
    let schema = Schema::new()
        .field(Field::new("image", DType::U8).shape(vec![3, SIDE as u64, SIDE as u64]))
        .field(
            Field::new("caption", DType::U8).codec(Codec::Deflate), // variable-length, compressed
        )
        .field(Field::new("label", DType::I64).shape(vec![]));
    let t = Instant::now();
    let mut w = Writer::create(&dir, &schema, WriterConfig::default())?;
    let mut image = vec![0u8; 3 * SIDE * SIDE];
    for i in 0..RECORDS {
        for (j, px) in image.iter_mut().enumerate() {
            *px = (i as usize).wrapping_mul(31).wrapping_add(j) as u8;
        }
        let caption = format!("synthetic image number {i}, class {}", i % 10).repeat(3);
        let label = (i % 10) as i64;
        w.append(&[&image[..], caption.as_bytes(), &label.to_le_bytes()])?;
    }
    w.commit()?;
    drop(w);
    let secs = t.elapsed().as_secs_f64();
    println!(
        "wrote {RECORDS} records to {} in {secs:.2} s ({:.0} records/s)",
        dir.display(),
        RECORDS as f64 / secs
    );

    // 2. Train: random batches of 256, every byte consumed.
    let ds = Dataset::open(&dir)?;
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut indices = vec![0u64; BATCH];
    let (mut records, mut bytes, mut loss) = (0u64, 0u64, 0f64);
    let t = Instant::now();
    for _ in 0..STEPS {
        for ix in indices.iter_mut() {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            *ix = rng % ds.len();
        }
        let batch = ds.gather_blocking(&indices)?;
        for r in 0..batch.len() {
            let img = batch.typed::<u8>(r, 0)?;
            let label = batch.typed::<i64>(r, 2)?.first().copied().unwrap_or(0);
            let caption = batch.get(r, 1).unwrap_or_default();
            let mean = img.iter().map(|&p| u64::from(p)).sum::<u64>() as f64 / img.len() as f64;
            loss += (mean / 255.0 - label as f64 / 10.0).powi(2);
            bytes += (img.len() + caption.len() + 8) as u64;
            records += 1;
        }
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "trained {STEPS} steps of {BATCH}: {:.0} records/s, {:.1} MB/s, {:.3} ms/batch, loss {:.4}",
        records as f64 / secs,
        bytes as f64 / secs / 1e6,
        secs * 1e3 / STEPS as f64,
        loss / records as f64
    );
    Ok(())
}
