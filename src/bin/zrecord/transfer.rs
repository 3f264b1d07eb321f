//! `zrecord push` and `zrecord pull`: publish a local dataset or collection to an object store,
//! and fetch one back. Thin over `zrecord::remote::{push, pull}`; credentials, endpoint and region come from
//! the environment (`AWS_ENDPOINT`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
//! `AWS_ALLOW_HTTP`, …).

use crate::args::parse_size_usize;
use crate::Res;
use clap::Args;
use std::path::PathBuf;
use zrecord::remote::{TransferOptions, TransferReport};

/// Options shared by push and pull.
#[derive(Args)]
pub struct TransferFlags {
    /// Objects transferred at once.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Objects larger than this go in parts of this size (at least 5MiB).
    #[arg(long, default_value = "16MiB", value_parser = parse_size_usize)]
    part_size: usize,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
#[command(
    after_help = "Data objects go first, each under a key naming its content (a BLAKE3 hash \
    of all its bytes), so a push that was interrupted uploads only what is missing when run \
    again. The commit manifest goes last, into the next commit slot, created only if absent \
    (If-None-Match: *): where the store's conditional create is atomic (AWS S3, GCS, Azure), of \
    two pushes racing to the same URL exactly one commits, the other fails. A push first probes \
    the store and refuses one that ignores conditional creates (Garage 2.5.0), where racing \
    pushes could both commit and one update be lost, unless --single-writer says only one \
    writer publishes to the URL. A collection's root is pushed as a collection: each part of \
    its latest manifest to URL/parts/<id>, then a manifest listing exactly those parts, in \
    order. If the store's collection lists the same parts, nothing is done; a prefix of them, \
    the rest is appended; anything else is refused. Two pushes of one collection at once both \
    succeed, one reporting the other's manifest as already done."
)]
pub struct PushArgs {
    /// The local dataset directory, or a collection's root.
    dir: PathBuf,
    /// Where to publish it: s3://bucket/prefix, gs://bucket/prefix or az://container/prefix.
    url: String,
    /// Only one writer publishes to this URL: publish even to a store that ignores conditional
    /// creates (no probe).
    #[arg(long)]
    single_writer: bool,
    #[command(flatten)]
    flags: TransferFlags,
}

#[derive(Args)]
#[command(
    after_help = "Files are checked on disk against the manifest's sizes and checksums; \
    meta.json is written last, so an interrupted pull leaves no dataset, and running it again \
    skips the files already in place and checked. Pulls into one directory run one at a time \
    (each holds its writer.lock); a pull into a complete copy checks every file and downloads \
    a damaged one again. A collection's URL is pulled as a local collection: each part of its \
    latest manifest into DIR/parts/<id> as above, then the local manifest naming exactly those \
    parts, in order (a local collection listing a prefix of them is appended to; one listing \
    anything else is refused)."
)]
pub struct PullArgs {
    /// The dataset's or collection's URL: s3://bucket/prefix, gs://bucket/prefix or
    /// az://container/prefix.
    url: String,
    /// The local directory to create it in (for a collection: its root).
    dir: PathBuf,
    #[command(flatten)]
    flags: TransferFlags,
}

fn options(f: &TransferFlags) -> TransferOptions {
    TransferOptions::default()
        .concurrency(f.concurrency)
        .part_size(f.part_size)
}

fn print(verb: &str, r: &TransferReport, secs: f64, json: bool) {
    if json {
        let out = serde_json::json!({
            "url": r.url,
            "generation": r.generation,
            "slot": r.slot,
            "transferred_objects": r.transferred.0,
            "transferred_bytes": r.transferred.1,
            "skipped_objects": r.skipped.0,
            "skipped_bytes": r.skipped.1,
            "already_done": r.already_done,
            "parts": r.parts,
            "seconds": secs,
        });
        println!("{out}");
        return;
    }
    let state = if r.already_done {
        " (already done)"
    } else {
        ""
    };
    let what = match r.parts {
        Some(parts) => format!(
            "collection of {parts} part(s), local manifest {}, manifest {} on the store",
            r.generation, r.slot
        ),
        None => format!("generation {}, commit slot {}", r.generation, r.slot),
    };
    println!(
        "{verb} {}: {what}{state}; {} objects ({} bytes) transferred, {} ({} bytes) already \
         there; {secs:.2} s",
        r.url, r.transferred.0, r.transferred.1, r.skipped.0, r.skipped.1
    );
}

/// Runs `zrecord push`.
pub fn push(a: &PushArgs) -> Res {
    let started = std::time::Instant::now();
    let options = options(&a.flags).single_writer(a.single_writer);
    let r = zrecord::remote::push(&a.dir, &a.url, &options)?;
    print(
        "pushed to",
        &r,
        started.elapsed().as_secs_f64(),
        a.flags.json,
    );
    Ok(())
}

/// Runs `zrecord pull`.
pub fn pull(a: &PullArgs) -> Res {
    let started = std::time::Instant::now();
    let r = zrecord::remote::pull(&a.url, &a.dir, &options(&a.flags))?;
    print(
        "pulled from",
        &r,
        started.elapsed().as_secs_f64(),
        a.flags.json,
    );
    Ok(())
}
