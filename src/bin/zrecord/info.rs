//! `zrecord info`: what a dataset holds and how well it uses its chunk files.
//!
//! Lengths come from the offset tables alone (no record data is read), each scanned front to
//! back with large sequential reads ([`zrecord::Snapshot::scan`]): every entry is decoded and
//! checked, so a damaged table makes `info` fail (run `zrecord verify` to list the damage).

use crate::progress;
use crate::Res;
use clap::Args;
use std::path::PathBuf;
use zrecord::Dataset;

#[derive(Args)]
pub struct InfoArgs {
    /// The dataset directory, or its URL on an object store (s3://bucket/prefix, gs://bucket/prefix, az://container/prefix).
    dir: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Live bytes of one field.
#[derive(Default)]
struct FieldBytes {
    logical: u64,
    stored: u64,
    present: u64,
}

/// Runs `zrecord info`.
pub fn run(a: &InfoArgs) -> Res {
    let ds = Dataset::open(&a.dir)?;
    let snap = ds.snapshot();
    let meta = snap.meta();
    let len = snap.len();
    let nfields = meta.fields.len();
    // One sequential pass over each field's table (large reads, not a page fault per entry).
    let bar = progress::records_bar(len * nfields as u64, "scanning offset tables");
    let mut per_field: Vec<FieldBytes> = (0..nfields).map(|_| FieldBytes::default()).collect();
    // A collection's parts are scanned one after the other.
    let parts: Vec<&zrecord::Snapshot> = match snap.is_collection() {
        true => snap.parts().iter().map(|p| &**p).collect(),
        false => vec![&*snap],
    };
    for (f, acc) in per_field.iter_mut().enumerate() {
        let mut i = 0u64;
        for part in &parts {
            for entry in part.scan(f)? {
                let e = entry?;
                acc.stored += u64::from(e.physical_len);
                acc.logical += u64::from(e.logical_len);
                acc.present += u64::from(e.physical_len > 0);
                if i.is_multiple_of(65536) {
                    bar.set_position(f as u64 * len + i);
                }
                i += 1;
            }
        }
    }
    let chunks: usize = parts.iter().map(|p| p.meta().chunks.len()).sum();
    bar.finish_and_clear();
    let logical: u64 = per_field.iter().map(|f| f.logical).sum();
    let stored: u64 = per_field.iter().map(|f| f.stored).sum();
    let chunk_bytes = snap.chunk_bytes();
    let ratio = (stored > 0).then(|| logical as f64 / stored as f64);
    let utilization = (chunk_bytes > 0).then(|| stored as f64 / chunk_bytes as f64);

    if a.json {
        let fields: Vec<serde_json::Value> = meta
            .fields
            .iter()
            .zip(&per_field)
            .map(|(f, b)| {
                serde_json::json!({
                    "name": f.name,
                    "dtype": f.dtype.name(),
                    "shape": f.shape,
                    "codec": f.codec.to_string(),
                    "present": b.present,
                    "logical_bytes": b.logical,
                    "stored_bytes": b.stored,
                    "table_generation": f.table.generation,
                    "patches": f.table.patch_len,
                })
            })
            .collect();
        let out = serde_json::json!({
            "path": a.dir.display().to_string(),
            "format": meta.format,
            "version": meta.version,
            "generation": meta.generation,
            "len": len,
            "fields": fields,
            "chunks": chunks,
            "parts": snap.is_collection().then(|| snap.parts().len()),
            "chunk_size_bytes": meta.chunk_size_bytes,
            "chunk_bytes": chunk_bytes,
            "logical_bytes": logical,
            "stored_bytes": stored,
            "compression_ratio": ratio,
            "utilization": utilization,
        });
        println!("{out}");
        return Ok(());
    }

    let fmt_ratio = |r: Option<f64>| r.map_or("n/a".to_string(), |r| format!("{r:.3}"));
    println!("{}", a.dir.display());
    println!(
        "  format      {} v{}, generation {}",
        meta.format, meta.version, meta.generation
    );
    println!("  records     {len}");
    println!("  fields      {nfields}");
    for (f, b) in meta.fields.iter().zip(&per_field) {
        let shape = f
            .shape
            .as_ref()
            .map_or("variable".to_string(), |s| format!("{s:?}"));
        println!(
            "    {:<16} {:<5} shape {:<14} codec {:<7} {} present, {} bytes ({} stored)",
            f.name, f.dtype, shape, f.codec, b.present, b.logical, b.stored
        );
    }
    if snap.is_collection() {
        println!(
            "  collection  manifest {}, {} parts",
            meta.generation,
            snap.parts().len()
        );
    }
    println!(
        "  chunks      {chunks} ({chunk_bytes} bytes, sealed at {} bytes)",
        meta.chunk_size_bytes
    );
    println!("  bytes       {logical} logical, {stored} stored");
    println!(
        "  compression {} (logical / stored bytes)",
        fmt_ratio(ratio)
    );
    println!(
        "  utilization {} (live stored bytes / chunk bytes)",
        fmt_ratio(utilization)
    );
    Ok(())
}
