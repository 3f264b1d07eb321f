//! Quickstart: write a synthetic image dataset, then run a toy training loop over random
//! batches of it and print the throughput.
//!
//! ```text
//! cargo run --release --example quickstart [-- DIR]
//! ```
//!
//! Without `DIR` the dataset goes to a temporary directory that is removed at exit.

use std::time::Instant;

use std::sync::Arc;

use zrecord::pipeline::{DatasetSource, Loader};
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

    // 2. Train: a shuffled loader, batches of 256, two prefetch workers, every byte consumed.
    let ds = Dataset::open(&dir)?;
    let source = Arc::new(DatasetSource::new(&ds));
    let builder = || {
        Loader::builder(Arc::clone(&source))
            .seed(17)
            .epochs(None)
            .batch_size(BATCH as u64)
            .num_workers(2)
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()?;
    let (records, bytes, loss, checkpoint, secs) = rt.block_on(async {
        let mut loader = builder().build()?;
        let (mut records, mut bytes, mut loss) = (0u64, 0u64, 0f64);
        let mut checkpoint = None;
        let t = Instant::now();
        for step in 0..STEPS {
            let Some(batch) = loader.next().await else {
                break;
            };
            let batch = batch?.data;
            for r in 0..batch.len() {
                let img = batch.typed::<u8>(r, 0)?;
                let caption = batch.get(r, 1).unwrap_or_default();
                let label = batch.typed::<i64>(r, 2)?.first().copied().unwrap_or(0);
                let mean = img.iter().map(|&p| u64::from(p)).sum::<u64>() as f64 / img.len() as f64;
                loss += (mean / 255.0 - label as f64 / 10.0).powi(2);
                bytes += (img.len() + caption.len() + 8) as u64;
                records += 1;
            }
            if step + 1 == STEPS / 2 {
                // What a trainer saves with its weights.
                checkpoint = Some(serde_json::to_string(&loader.state())?);
            }
        }
        Ok::<_, Box<dyn std::error::Error>>((
            records,
            bytes,
            loss,
            checkpoint,
            t.elapsed().as_secs_f64(),
        ))
    })?;
    println!(
        "trained {STEPS} steps of {BATCH}: {:.0} records/s, {:.1} MB/s, {:.3} ms/step, loss {:.4}",
        records as f64 / secs,
        bytes as f64 / secs / 1e6,
        secs * 1e3 / STEPS as f64,
        loss / records as f64
    );

    // 3. Resume from the mid-run checkpoint: the next batch is exactly step STEPS/2 + 1's.
    if let Some(json) = checkpoint {
        let state = serde_json::from_str(&json)?;
        let (resumed, replay) = rt.block_on(async {
            let mut resumed = builder().resume(&state)?;
            let mut replay = builder().build()?;
            for _ in 0..STEPS / 2 {
                replay.next().await;
            }
            let a = resumed.next().await.transpose()?.map(|b| b.indices());
            let b = replay.next().await.transpose()?.map(|b| b.indices());
            Ok::<_, zrecord::Error>((a, b))
        })?;
        println!(
            "resumed from a {}-byte checkpoint: next batch {} the uninterrupted run's",
            json.len(),
            if resumed == replay && resumed.is_some() {
                "equals"
            } else {
                "DIFFERS FROM"
            }
        );
    }
    Ok(())
}
