//! `zrecord collection`: commit parts (datasets) to a collection, and show what it holds.

use crate::Res;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use zrecord::collection::{commit, CommitOptions};
use zrecord::Dataset;

#[derive(Subcommand)]
pub enum CollectionCmd {
    /// Add parts (dataset directories) to a collection, creating it if needed: each part is
    /// checked against the collection's schema and moved under ROOT/parts/, then the next
    /// manifest is created (racing committers rebase; a part already committed is not added
    /// twice).
    Commit(CommitArgs),
    /// Print a collection's manifest number, its parts (id, records, generation) and total.
    Info(InfoArgs),
}

#[derive(Args)]
pub struct CommitArgs {
    /// The collection's directory (created if it does not exist).
    root: PathBuf,
    /// The parts, in order: their records follow the collection's in this order.
    #[arg(required = true)]
    parts: Vec<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct InfoArgs {
    /// The collection's directory.
    root: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs `zrecord collection …`.
pub fn run(c: &CollectionCmd) -> Res {
    match c {
        CollectionCmd::Commit(a) => {
            let r = commit(&a.root, &a.parts, CommitOptions::default())?;
            if a.json {
                let out = serde_json::json!({
                    "root": a.root.display().to_string(),
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
                    a.root.display(),
                    r.number,
                    r.parts,
                    r.len
                );
            } else {
                println!(
                    "{}: manifest {}: added {} part(s) ({}); {} parts, {} records",
                    a.root.display(),
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
