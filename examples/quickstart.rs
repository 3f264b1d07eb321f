//! Quickstart: write a synthetic image dataset, run a toy training loop over two shuffled epochs
//! of it, checkpoint in the middle of the second epoch, resume from the checkpoint, and print the
//! throughput (records/s and MB/s).
//!
//! ```text
//! cargo run --release --example quickstart [-- DIR]
//! ```
//!
//! Without `DIR` the dataset goes to a temporary directory that is removed at exit.

use std::time::Instant;

use std::sync::Arc;

use zrecord::pipeline::{DatasetSource, Loader, PrefetchConfig};
use zrecord::{Codec, DType, Dataset, Field, Schema, Writer, WriterConfig};

const RECORDS: u64 = 20_000;
const SIDE: usize = 64;
const BATCH: usize = 256;
const EPOCHS: u64 = 2;

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

    // 2. Train: a shuffled loader, batches of 256, two prefetch workers, two epochs, every
    //    byte consumed; a checkpoint is taken in the middle of the second epoch.
    let ds = Dataset::open(&dir)?;
    let source = Arc::new(DatasetSource::new(&ds));
    let builder = || {
        Loader::builder(Arc::clone(&source))
            .seed(17)
            .epochs(Some(EPOCHS))
            .batch_size(BATCH as u64)
            .prefetch(PrefetchConfig::default().num_workers(2))
    };
    let steps_per_epoch = RECORDS.div_ceil(BATCH as u64);
    let checkpoint_step = steps_per_epoch + steps_per_epoch / 2;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()?;
    let run = rt.block_on(async {
        let mut loader = builder().build()?;
        let mut run = Run::default();
        let t = Instant::now();
        while let Some(batch) = loader.next().await {
            let batch = batch?;
            run.epochs = run.epochs.max(batch.epoch() + 1);
            if run.checkpoint.is_some() {
                run.after_checkpoint.push(batch.indices());
            }
            let batch = batch.data;
            for r in 0..batch.len() {
                let img = batch.typed::<u8>(r, 0)?;
                let caption = batch.get(r, 1).unwrap_or_default();
                let label = batch.typed::<i64>(r, 2)?.first().copied().unwrap_or(0);
                let mean = img.iter().map(|&p| u64::from(p)).sum::<u64>() as f64 / img.len() as f64;
                run.loss += (mean / 255.0 - label as f64 / 10.0).powi(2);
                run.bytes += (img.len() + caption.len() + 8) as u64;
                run.records += 1;
            }
            run.steps += 1;
            if run.steps == checkpoint_step {
                // What a trainer saves with its weights.
                run.checkpoint = Some(serde_json::to_string(&loader.state())?);
            }
        }
        run.secs = t.elapsed().as_secs_f64();
        Ok::<_, Box<dyn std::error::Error>>(run)
    })?;
    println!(
        "trained {} epochs, {} steps of {BATCH}: {:.0} records/s, {:.1} MB/s, {:.3} ms/step, loss {:.4}",
        run.epochs,
        run.steps,
        run.records as f64 / run.secs,
        run.bytes as f64 / run.secs / 1e6,
        run.secs * 1e3 / run.steps as f64,
        run.loss / run.records as f64
    );

    // 3. Resume from the mid-epoch checkpoint: the resumed loader yields exactly the batches the
    //    uninterrupted run yielded after it.
    if let Some(json) = &run.checkpoint {
        let state = serde_json::from_str(json)?;
        let resumed = rt.block_on(async {
            let mut resumed = builder().resume(&state)?;
            let mut rest = Vec::new();
            while let Some(b) = resumed.next().await {
                rest.push(b?.indices());
            }
            Ok::<_, zrecord::Error>(rest)
        })?;
        println!(
            "checkpoint at step {checkpoint_step} (epoch 2 of {EPOCHS}, mid-epoch): {} bytes of JSON",
            json.len()
        );
        println!(
            "resumed from it: {} remaining batches, {} the uninterrupted run's",
            resumed.len(),
            if resumed == run.after_checkpoint && !resumed.is_empty() {
                "identical to"
            } else {
                "DIFFERENT FROM"
            }
        );
    }
    Ok(())
}

/// What the training loop measured.
#[derive(Default)]
struct Run {
    epochs: u64,
    steps: u64,
    records: u64,
    bytes: u64,
    loss: f64,
    secs: f64,
    checkpoint: Option<String>,
    after_checkpoint: Vec<Vec<u64>>,
}
