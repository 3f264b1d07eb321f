//! `zrecord rebalance`: the manual compaction. Rewrites every live record, in index order, into
//! fresh chunks, commits that atomically, and prints the utilization before and after. With
//! `--retrain-dictionaries`, every `zstd_dict` field is compressed again with a dictionary
//! trained on records sampled across the dataset.

use crate::Res;
use clap::Args;
use std::path::PathBuf;
use zrecord::{RebalanceOptions, Writer, WriterConfig};

#[derive(Args)]
pub struct RebalanceArgs {
    /// The dataset directory.
    dir: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Train a new dictionary for every `zstd_dict` field on records sampled across the whole
    /// dataset and compress all of the field's records with it (the old dictionaries are
    /// removed after the commit).
    #[arg(long)]
    retrain_dictionaries: bool,
}

/// Runs `zrecord rebalance`.
pub fn run(a: &RebalanceArgs) -> Res {
    let mut w = Writer::open(&a.dir, WriterConfig::default())?;
    let started = std::time::Instant::now();
    let r =
        w.rebalance_with(RebalanceOptions::default().retrain_dictionaries(a.retrain_dictionaries))?;
    let secs = started.elapsed().as_secs_f64();
    if a.json {
        let out = serde_json::json!({
            "generation": r.generation,
            "records": r.records,
            "live_bytes": r.live_bytes,
            "live_bytes_before": r.live_bytes_before,
            "rewritten": r.rewritten,
            "chunk_bytes_before": r.chunk_bytes_before,
            "chunk_bytes_after": r.chunk_bytes_after,
            "chunks_before": r.chunks_before,
            "chunks_after": r.chunks_after,
            "utilization_before": r.utilization_before(),
            "utilization_after": r.utilization_after(),
            "capacity_utilization_before": r.capacity_utilization_before(),
            "capacity_utilization_after": r.capacity_utilization_after(),
            "seconds": secs,
        });
        println!("{out}");
        return Ok(());
    }
    if r.rewritten {
        println!(
            "{}: {} records rewritten in {secs:.2} s, generation {}",
            a.dir.display(),
            r.records,
            r.generation
        );
    } else {
        println!(
            "{}: nothing to reclaim (every stored byte is live): nothing rewritten, generation {} kept",
            a.dir.display(),
            r.generation
        );
    }
    println!(
        "utilization (live bytes / chunk bytes): {:.3} -> {:.3}  ({} -> {} bytes in {} -> {} chunks, {} live)",
        r.utilization_before(),
        r.utilization_after(),
        r.chunk_bytes_before,
        r.chunk_bytes_after,
        r.chunks_before,
        r.chunks_after,
        r.live_bytes
    );
    Ok(())
}
