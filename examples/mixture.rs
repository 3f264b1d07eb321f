//! Training on a mixture, stopped, and resumed on another number of ranks.
//!
//! Three datasets (web text, code, math) are concatenated and mixed 70/20/10. Four ranks (here
//! simulated in one process) train for a while, each stopping at its own step as a real job's
//! ranks do when one fails; their checkpoints are merged and three ranks finish the epoch. The
//! example prints each source's count and checks that no mix position is repeated or lost.
//!
//! ```sh
//! cargo run --release --example mixture
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::executor::block_on;
use zrecord::pipeline::{
    Concat, DatasetSource, Exhausted, Loader, LoaderBuilder, LoaderState, MixConfig,
    PrefetchConfig, ShardConfig,
};
use zrecord::{DType, Dataset, Field, Schema, Writer, WriterConfig};

type Src = Concat<DatasetSource>;

/// Writes a dataset of `n` token sequences tagged with `source`.
fn write(dir: &std::path::Path, source: u8, n: u64) -> zrecord::Result<Dataset> {
    let schema = Schema::new().field(Field::new("tokens", DType::U16));
    let mut w = Writer::create(dir, &schema, WriterConfig::default())?;
    for i in 0..n {
        let len = 8 + (i * 7 % 24) as usize;
        let tokens: Vec<u8> = (0..len)
            .flat_map(|t| (u16::from(source) * 1000 + t as u16).to_le_bytes())
            .collect();
        w.append(&[tokens])?;
    }
    w.commit()?;
    drop(w);
    Dataset::open(dir)
}

/// Mix positions delivered, and records per source.
#[derive(Default)]
struct Seen {
    positions: BTreeMap<(u64, u64), u32>,
    per_source: [u64; 3],
}

impl Seen {
    fn record(
        &mut self,
        src: &Src,
        b: &zrecord::pipeline::LoaderBatch<zrecord::Batch>,
    ) -> zrecord::Result<()> {
        for s in &b.batch.samples {
            *self.positions.entry((s.epoch, s.position)).or_default() += 1;
            let (part, _) = src.locate(s.index)?;
            if let Some(n) = self.per_source.get_mut(part) {
                *n += 1;
            }
        }
        Ok(())
    }
}

fn builder(src: &Arc<Src>, ranks: u64, rank: u64) -> LoaderBuilder<Src> {
    LoaderBuilder::new(Arc::clone(src))
        .mix(
            MixConfig::new(vec![0.7, 0.2, 0.1])
                .exhausted(Exhausted::Restart)
                .epoch_len(Some(6_000)),
        )
        .seed(2026)
        .shard(ShardConfig::new(ranks, rank))
        .batch_size(32)
        .prefetch(PrefetchConfig::default().num_workers(2))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tmp = std::env::temp_dir().join(format!("zrecord-mixture-{}", std::process::id()));
    let names = ["web", "code", "math"];
    let sizes = [4_000u64, 1_500, 500];
    let parts = names
        .iter()
        .zip(sizes)
        .enumerate()
        .map(|(s, (name, n))| {
            let ds = write(&tmp.join(name), s as u8, n)?;
            Ok(Arc::new(DatasetSource::new(&ds)))
        })
        .collect::<zrecord::Result<Vec<_>>>()?;
    let src = Arc::new(Concat::new(parts)?);

    let mut seen = Seen::default();

    // Four ranks train; each stops at its own step.
    let mut states: Vec<LoaderState> = Vec::new();
    for (rank, steps) in [(0u64, 30), (1, 27), (2, 33), (3, 12)] {
        let mut loader = builder(&src, 4, rank).build()?;
        for _ in 0..steps {
            match block_on(loader.next()) {
                Some(b) => seen.record(&src, &b?)?,
                None => break,
            }
        }
        states.push(loader.state());
    }
    let before: u64 = seen.per_source.iter().sum();
    println!("4 ranks stopped after {before} records (steps 30, 27, 33, 12)");

    // Three ranks resume from the four checkpoints and finish the epoch.
    for rank in 0..3 {
        let merged = builder(&src, 3, rank).merge_checkpoints(&states)?;
        let json = serde_json::to_string(&merged)?;
        if rank == 0 {
            println!(
                "merged checkpoint for rank 0 of 3: {} bytes of JSON",
                json.len()
            );
        }
        let mut loader: Loader<Src> = builder(&src, 3, rank).resume(&merged)?;
        while let Some(b) = block_on(loader.next()) {
            seen.record(&src, &b?)?;
        }
    }

    let Seen {
        positions,
        per_source,
    } = seen;
    let total: u64 = per_source.iter().sum();
    println!("3 ranks finished the epoch: {total} records in all");
    for ((name, n), weight) in names.iter().zip(per_source).zip([70.0, 20.0, 10.0]) {
        println!(
            "  {name:>4}: {n:>5} records ({:.1}% of the mix, weight {weight:.0}%)",
            100.0 * n as f64 / total as f64,
        );
    }
    let repeated = positions.values().filter(|&&n| n > 1).count();
    let missing = 6_000 - positions.len();
    println!(
        "mix positions delivered: {}, repeated: {repeated}, missing: {missing}",
        positions.len()
    );
    std::fs::remove_dir_all(&tmp)?;
    if repeated > 0 || missing > 0 {
        return Err("a mix position was repeated or lost".into());
    }
    println!("every mix position exactly once");
    Ok(())
}
