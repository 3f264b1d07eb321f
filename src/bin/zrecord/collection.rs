//! `zrecord collection`: commit parts (datasets) to a collection, local or on an object store,
//! and show what it holds; `zrecord gc`: remove the parts no manifest names.

use crate::Res;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::Duration;
use zrecord::collection::{commit, commit_url, gc, CommitOptions, GcOptions};
use zrecord::remote::{local_path, TransferOptions};
use zrecord::Dataset;

#[derive(Subcommand)]
pub enum CollectionCmd {
    /// Add parts to a collection, creating it if needed: each part is checked against the
    /// collection's schema and moved under ROOT/parts/ (on an object store: pushed under
    /// URL/parts/<id>, or given as a URL already there), then the next manifest is created
    /// (racing committers rebase; a part already committed is not added twice).
    Commit(CommitArgs),
    /// Print a collection's manifest number, its parts (id, records, generation) and total.
    Info(InfoArgs),
}

#[derive(Args)]
pub struct CommitArgs {
    /// The collection's directory (created if it does not exist), or its URL
    /// (s3://bucket/prefix, gs://…, az://…).
    root: String,
    /// The parts, in order: their records follow the collection's in this order. Dataset
    /// directories; for a collection at a URL also URLs of datasets pushed under URL/parts/.
    #[arg(required = true)]
    parts: Vec<String>,
    /// For a collection at a URL: only one committer writes to it, so a store that ignores
    /// conditional creates (Garage) may be committed to (no probe).
    #[arg(long)]
    single_writer: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct InfoArgs {
    /// The collection's directory or URL.
    root: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
#[command(
    after_help = "A part no manifest names (any manifest, not only the latest: a reader may \
    still be on an older one) is removed once its newest file (object) is older than \
    --older-than. A part a live commit holds is kept whatever the limit (locally by its lock; \
    on an object store by the commit's lease under URL/_collection/leases/, dead 10 minutes \
    after its holder stopped refreshing it). A part nobody holds is protected by the limit \
    only: for parts pushed under URL/parts/ by writers that a commit takes later by URL, it \
    must exceed the time from the start of a push to the start of its commit. Leftovers of \
    failed commits older than the limit go too."
)]
pub struct GcArgs {
    /// The collection's directory or URL.
    root: String,
    /// Remove only what is older than this: a number and a unit, s, m, h, d or w (30s, 2h, 7d).
    #[arg(long, required = true, value_parser = parse_age)]
    older_than: Duration,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// A duration: a number and a unit (`30s`, `15m`, `2h`, `7d`, `1w`).
fn parse_age(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (30s, 2h, 7d)"))?;
    let secs = match unit.trim() {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 604_800,
        _ => {
            return Err(format!(
                "{text:?}: the unit must be s, m, h, d or w (30s, 2h, 7d)"
            ))
        }
    };
    n.checked_mul(secs)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("{text:?} is too long"))
}

/// Runs `zrecord gc`.
pub fn run_gc(a: &GcArgs) -> Res {
    let r = gc(&a.root, a.older_than, &GcOptions::default())?;
    if a.json {
        let out = serde_json::json!({
            "root": a.root,
            "removed": r.removed,
            "kept": r.kept,
            "bytes_freed": r.bytes_freed,
            "leftovers": r.leftovers,
            "manifests": r.manifests,
        });
        println!("{out}");
        return Ok(());
    }
    println!(
        "{}: removed {} part(s){}{}, {} leftover(s), {} bytes freed; kept {} part(s) ({} \
         manifests read)",
        a.root,
        r.removed.len(),
        if r.removed.is_empty() { "" } else { ": " },
        r.removed.join(", "),
        r.leftovers,
        r.bytes_freed,
        r.kept.len(),
        r.manifests
    );
    Ok(())
}

/// Runs `zrecord collection …`.
pub fn run(c: &CollectionCmd) -> Res {
    match c {
        CollectionCmd::Commit(a) => {
            let r = match local_path(&a.root) {
                None => {
                    let t = TransferOptions::default().single_writer(a.single_writer);
                    commit_url(&a.root, &a.parts, CommitOptions::default(), &t)?
                }
                Some(root) => commit(root, &a.parts, CommitOptions::default())?,
            };
            if a.json {
                let out = serde_json::json!({
                    "root": a.root,
                    "manifest": r.number,
                    "ids": r.ids,
                    "added": r.added,
                    "parts": r.parts,
                    "len": r.len,
                    "attempts": r.attempts,
                });
                println!("{out}");
            } else if r.added.is_empty() {
                println!(
                    "{}: every part was already committed; manifest {} ({} parts, {} records)",
                    a.root, r.number, r.parts, r.len
                );
            } else {
                println!(
                    "{}: manifest {}: added {} part(s) ({}); {} parts, {} records",
                    a.root,
                    r.number,
                    r.added.len(),
                    r.added.join(", "),
                    r.parts,
                    r.len
                );
            }
            Ok(())
        }
        CollectionCmd::Info(a) => {
            let snap = Dataset::open(&a.root)?.snapshot();
            if !snap.is_collection() {
                return Err(format!("{} is a dataset, not a collection", a.root.display()).into());
            }
            let parts: Vec<serde_json::Value> = snap
                .part_ids()
                .iter()
                .zip(snap.parts())
                .map(|(id, p)| {
                    serde_json::json!({"id": id, "len": p.len(), "generation": p.generation()})
                })
                .collect();
            if a.json {
                let out = serde_json::json!({
                    "root": a.root.display().to_string(),
                    "manifest": snap.generation(),
                    "len": snap.len(),
                    "parts": parts,
                });
                println!("{out}");
                return Ok(());
            }
            println!("{}", a.root.display());
            println!("  manifest    {}", snap.generation());
            println!("  records     {}", snap.len());
            println!("  parts       {}", snap.parts().len());
            for (id, p) in snap.part_ids().iter().zip(snap.parts()) {
                println!(
                    "    {id:<40} {:>12} records  generation {}",
                    p.len(),
                    p.generation()
                );
            }
            Ok(())
        }
    }
}
