//! Variable-length token sequences: length bucketing + `pad_stack`, and the padding it saves.
//!
//! ```text
//! cargo run --release --example variable_length
//! ```
//!
//! Writes 20,000 `u32` token sequences of skewed lengths (8–1024 tokens) to a temporary dataset,
//! then runs one shuffled epoch twice, batches of 64 collated by `pad_stack` (right padding,
//! rows rounded up to a multiple of 8): once without bucketing, once with length bucketing
//! (buffers of 2,048 records sorted by length, cut into packs of 64). The bucket key is the
//! record length from the offset table, so bucketing reads no data. It prints the padding of
//! each run and what bucketing saves.

use std::sync::Arc;
use std::time::Instant;

use zrecord::pipeline::{
    pad_stack_field, BucketConfig, DatasetSource, Loader, PadConfig, PoolingType, PrefetchConfig,
    SamplerConfig, SamplerMode,
};
use zrecord::{DType, Dataset, Field, Schema, Writer, WriterConfig};

const RECORDS: u64 = 20_000;
const BATCH: u64 = 64;
const PAD_ID: u32 = 0;

/// Totals of one epoch.
#[derive(Default)]
struct Totals {
    batches: u64,
    tokens: u64,
    cells: u64,
    secs: f64,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("tokens.zr");

    // 1. Token sequences with a long-tailed length distribution, like tokenised documents.
    let schema = Schema::new().field(Field::new("tokens", DType::U32));
    let mut w = Writer::create(&dir, &schema, WriterConfig::default())?;
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut total_tokens = 0u64;
    for i in 0..RECORDS {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Log-uniform between 8 and 1024 tokens.
        let len = (8.0 * 128f64.powf((x % 10_000) as f64 / 10_000.0)) as u32;
        let tokens: Vec<u8> = (0..len)
            .flat_map(|t| (1 + (t * 31 + i as u32) % 50_000).to_le_bytes())
            .collect();
        total_tokens += u64::from(len);
        w.append(&[tokens])?;
    }
    w.commit()?;
    drop(w);
    println!(
        "wrote {RECORDS} token sequences ({total_tokens} tokens, mean length {:.0}) to {}",
        total_tokens as f64 / RECORDS as f64,
        dir.display()
    );

    let ds = Dataset::open(&dir)?;
    let source = Arc::new(DatasetSource::new(&ds));
    let run = |bucket: Option<BucketConfig>| -> Result<Totals, Box<dyn std::error::Error>> {
        let mut builder = Loader::builder(Arc::clone(&source))
            .sampler(
                SamplerConfig::default()
                    .mode(SamplerMode::Shuffled)
                    .seed(3)
                    .epochs(Some(1)),
            )
            .batch_size(BATCH)
            .prefetch(PrefetchConfig::default().num_workers(2));
        if let Some(b) = bucket {
            builder = builder.bucket(b);
        }
        // Collate on the prefetch workers: the trainer receives padded batches.
        let mut loader = builder
            .transform(|batch: zrecord::Batch, _| {
                pad_stack_field::<u32>(
                    &batch,
                    0,
                    PadConfig::new(PAD_ID).pad_to_multiple_of(Some(8)),
                )
            })
            .build()?;
        let mut t = Totals::default();
        let start = Instant::now();
        let mut first = true;
        futures::executor::block_on(async {
            while let Some(b) = loader.next().await {
                let p = b?.data;
                if first {
                    first = false;
                    let last = p.pooling_mask(PoolingType::Last);
                    println!(
                        "  first batch: {} × {} tokens, lengths {:?}…, {} last-token marks",
                        p.rows,
                        p.cols,
                        p.lengths.get(..4).unwrap_or_default(),
                        last.iter().filter(|&&m| m == 1).count()
                    );
                }
                t.batches += 1;
                t.tokens += p.lengths.iter().sum::<usize>() as u64;
                t.cells += p.data.len() as u64;
            }
            Ok::<(), zrecord::Error>(())
        })?;
        t.secs = start.elapsed().as_secs_f64();
        Ok(t)
    };

    println!("\nshuffled, no bucketing:");
    let plain = run(None)?;
    report(&plain);
    println!("\nshuffled, length-bucketed (buffer 2048, packs of {BATCH}):");
    let bucketed = run(Some(
        BucketConfig::default()
            .buffer_size(2048)
            .pack_size(BATCH)
            .seed(3),
    ))?;
    report(&bucketed);

    let saved = plain.cells.saturating_sub(bucketed.cells);
    println!(
        "\nbucketing saved {saved} padded cells ({:.1}% of the unbucketed batch cells): \
         {:.2}× less compute on padding, same {} tokens seen",
        100.0 * saved as f64 / plain.cells as f64,
        (plain.cells - plain.tokens) as f64 / (bucketed.cells - bucketed.tokens).max(1) as f64,
        bucketed.tokens
    );
    Ok(())
}

fn report(t: &Totals) {
    let pad = t.cells - t.tokens;
    println!(
        "  {} batches, {} tokens in {} cells: {} padding ({:.1}% of cells), {:.0} tokens/s",
        t.batches,
        t.tokens,
        t.cells,
        pad,
        100.0 * pad as f64 / t.cells as f64,
        t.tokens as f64 / t.secs
    );
}
