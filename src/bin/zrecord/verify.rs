//! `zrecord verify`: every checksum and structural invariant of a dataset.
//!
//! Opening checks `meta.json` (its checksum, version and invariants), that every offset table,
//! patch log and chunk file it names exists and is at least as long as committed, and every
//! patch entry. Then each field's offset table is scanned front to back with large sequential
//! reads ([`zrecord::Snapshot::scan`]): each entry's own CRC and bounds, and each value's length
//! against its field's dtype and shape. Then every record of every field is read in batches
//! with checksums on: each stored value's CRC32C and each deflate stream's length. A batch that
//! fails is re-read value by value, so every damaged value is reported, not just the first.
//! A collection is verified part by part: opening it checks every part against its manifest,
//! then every part's tables and records are checked as a dataset's.

use crate::progress;
use crate::Res;
use clap::Args;
use std::path::PathBuf;
use zrecord::{Backend, Dataset, ReadConfig, Snapshot};

/// Problems listed before the rest are only counted.
const MAX_LISTED: usize = 100;
/// Records per batch.
const BATCH: u64 = 1024;

#[derive(Args)]
#[command(
    after_help = "Exit status 0 if everything checks out. Otherwise each problem is \
    listed on stderr (file, record index, field and byte offset; the first 100, then a count) \
    and the exit status is 1."
)]
pub struct VerifyArgs {
    /// The dataset directory, or its URL on an object store (s3://bucket/prefix, gs://bucket/prefix, az://container/prefix).
    dir: PathBuf,
}

/// The problems found, listed as they are found, up to [`MAX_LISTED`].
struct Problems<'a> {
    count: u64,
    bar: &'a indicatif::ProgressBar,
}

impl Problems<'_> {
    fn report(&mut self, what: &str) {
        self.count += 1;
        if self.count <= MAX_LISTED as u64 {
            self.bar.suspend(|| eprintln!("zrecord: {what}"));
        }
    }
}

/// Runs `zrecord verify`.
pub fn run(a: &VerifyArgs) -> Res {
    let opts = ReadConfig::default().with_backend(Backend::Uring);
    // A dataset that cannot be opened has one problem: the one that stopped the open, which
    // names its file (meta.json, a table, a patch log or a chunk).
    let ds = Dataset::open_with(&a.dir, opts.clone())?;
    let snap = ds.snapshot();
    let len = snap.len();
    let names: Vec<String> = snap.meta().fields.iter().map(|f| f.name.clone()).collect();
    let bar = progress::records_bar(len * names.len() as u64, "verify: offset tables");
    let mut problems = Problems {
        count: 0,
        bar: &bar,
    };
    // The tables, sequentially: every entry checked, every value's length against its field.
    // A collection's parts one after the other (every part was checked against its manifest
    // when the collection opened); `i` is the global index.
    let parts: Vec<&Snapshot> = match snap.is_collection() {
        true => snap.parts().iter().map(|p| &**p).collect(),
        false => vec![&*snap],
    };
    for f in 0..names.len() {
        let mut i = 0u64;
        for part in &parts {
            for entry in part.scan(f)? {
                match entry {
                    Ok(e) => check_shape(&snap, f, i, u64::from(e.logical_len), &mut problems),
                    Err(e) => problems.report(&e.to_string()),
                }
                if i.is_multiple_of(65536) {
                    bar.set_position(f as u64 * len + i);
                }
                i += 1;
            }
        }
    }
    bar.set_message("verify: records");
    bar.set_length(len);
    bar.set_position(0);
    let mut bytes = 0u64;
    let mut start = 0u64;
    while start < len {
        let end = (start + BATCH).min(len);
        let idx: Vec<u64> = (start..end).collect();
        match snap.gather_with(&idx, &opts) {
            Ok(b) => bytes += b.total_bytes() as u64,
            Err(_) => {
                // Find every damaged value of the batch, one at a time. Damaged entries were
                // reported by the table scan already.
                for &i in &idx {
                    for name in &names {
                        match snap.gather_fields_with(&[i], &[name.as_str()], &opts) {
                            Ok(b) => bytes += b.total_bytes() as u64,
                            Err(zrecord::Error::OffsetCorrupt { .. }) => {}
                            Err(e) => problems.report(&e.to_string()),
                        }
                    }
                }
            }
        }
        bar.set_position(end);
        start = end;
    }
    bar.finish_and_clear();
    if problems.count > 0 {
        if problems.count > MAX_LISTED as u64 {
            eprintln!(
                "zrecord: ... and {} more problems",
                problems.count - MAX_LISTED as u64
            );
        }
        return Err(format!(
            "{}: {} problem(s) found in {len} records × {} field(s)",
            a.dir.display(),
            problems.count,
            names.len()
        )
        .into());
    }
    println!(
        "{}: {len} records × {} field(s), {bytes} bytes, every checksum and invariant verified",
        a.dir.display(),
        names.len()
    );
    Ok(())
}

/// Checks the length of record `i`'s value of field `f` against the field's dtype and shape.
fn check_shape(snap: &Snapshot, f: usize, i: u64, len: u64, problems: &mut Problems<'_>) {
    let Some(meta) = snap.meta().fields.get(f) else {
        return;
    };
    if len == 0 {
        return;
    }
    let item = meta.dtype.item_bytes();
    let want = meta
        .shape
        .as_ref()
        .map(|s| s.iter().product::<u64>() * item);
    let bad = if !len.is_multiple_of(item) {
        Some(format!(
            "{len} bytes is not a whole number of {} items",
            meta.dtype
        ))
    } else {
        want.filter(|&w| w != len).map(|w| {
            format!(
                "{len} bytes, but shape {:?} of {} needs {w}",
                meta.shape.as_deref().unwrap_or_default(),
                meta.dtype
            )
        })
    };
    if let Some(reason) = bad {
        // Rare: the record's location is looked up only to name it.
        let (file, offset) = match snap.locate(f, i) {
            Ok(loc) => (
                loc.chunk
                    .map_or("?".to_string(), |p| p.display().to_string()),
                loc.offset,
            ),
            Err(_) => ("?".to_string(), 0),
        };
        problems.report(&format!(
            "value does not fit its field in {file} at byte {offset} (field {:?}, record {i}): \
             {reason}",
            meta.name
        ));
    }
}
