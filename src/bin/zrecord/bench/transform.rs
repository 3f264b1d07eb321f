//! `zrecord bench transform`: the limit of the transform stage on one core. Every record of a
//! dataset's image field is gathered once (untimed), then decoded, cropped (a random window, or
//! a random resized crop)
//! and flipped by the same `Map` a loader runs, in a tight loop on this thread, as JSON: images
//! per second and CPU seconds. Issue #32's limit is this times the cores.

use super::cpu_seconds;
use crate::Res;
use clap::Args;
use std::path::PathBuf;
use std::time::Instant;
use zrecord::transform::{image, Map, RecordKey};
use zrecord::Dataset;

#[derive(Args, Clone)]
pub struct TransformArgs {
    /// The dataset (its `--field` holds JPEG or PNG bytes).
    dir: PathBuf,
    /// The image field.
    #[arg(long, default_value = "image")]
    field: String,
    /// Output side of the crop.
    #[arg(long, default_value_t = 224)]
    size: u32,
    /// The crop: `random-crop` (a window, issue #32's workload) or `random-resized-crop`.
    #[arg(long, default_value = "random-crop", value_parser = ["random-crop", "random-resized-crop"])]
    crop: String,
    /// Records per batch handed to the transform.
    #[arg(long, default_value_t = 256)]
    batch: u64,
    /// At most this many records (0: all).
    #[arg(long, default_value_t = 0)]
    records: u64,
    /// Passes over the records (each its own epoch, so its own crops).
    #[arg(long, default_value_t = 1)]
    epochs: u64,
}

pub(super) fn transform(a: &TransformArgs) -> Res {
    let ds = Dataset::open(&a.dir)?;
    let n = match a.records {
        0 => ds.len(),
        r => r.min(ds.len()),
    };
    let map = Map::new().field(
        a.field.clone(),
        [
            image::decode(),
            image::random_resized_crop(a.size),
            image::random_flip(),
        ],
    );
    let field = [a.field.as_str()];
    let batches: Vec<(Vec<u64>, zrecord::Batch)> = (0..n)
        .step_by(a.batch.max(1) as usize)
        .map(|start| {
            let idx: Vec<u64> = (start..(start + a.batch).min(n)).collect();
            let b = ds.gather_fields_blocking(&idx, &field)?;
            Ok((idx, b))
        })
        .collect::<zrecord::Result<_>>()?;
    let (t, cpu) = (Instant::now(), cpu_seconds());
    let mut images = 0u64;
    for epoch in 0..a.epochs {
        for (idx, b) in &batches {
            let keys: Vec<RecordKey> = idx
                .iter()
                .map(|&index| RecordKey { epoch, index })
                .collect();
            let out = map.apply(b.clone(), 0, &keys)?;
            images += out.len() as u64;
        }
    }
    let secs = t.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu;
    println!(
        "{}",
        serde_json::json!({
            "images": images,
            "size": a.size,
            "crop": a.crop,
            "seconds": secs,
            "cpu_seconds": cpu,
            "images_per_s": images as f64 / secs,
            "cpu_us_per_image": cpu * 1e6 / images.max(1) as f64,
        })
    );
    Ok(())
}
