//! `zrecord verify`: every checksum and structural invariant of a dataset.
//!
//! Opening checks `meta.json` (its checksum, version and invariants), that every offset table,
//! patch log and chunk file it names exists and is at least as long as committed, and every
//! patch entry. Then every record of every field is read in batches with checksums on: each
//! offset entry's own CRC and bounds, each stored value's CRC32C, each deflate stream's length,
//! and each value's length against its field's dtype and shape. A batch that fails is re-read
//! value by value, so every damaged value is reported, not just the first.

use crate::progress;
use crate::Res;
use clap::Args;
use std::path::PathBuf;
use zrecord::{Backend, Dataset, ReadOptions, Snapshot};

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
    /// The dataset directory.
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
    let opts = ReadOptions::default().with_backend(Backend::Uring);
    // A dataset that cannot be opened has one problem: the one that stopped the open, which
    // names its file (meta.json, a table, a patch log or a chunk).
    let ds = Dataset::open_with(&a.dir, opts.clone())?;
    let snap = ds.snapshot();
    let len = snap.len();
    let names: Vec<String> = snap.meta().fields.iter().map(|f| f.name.clone()).collect();
    let bar = progress::records_bar(len, "verify");
    let mut problems = Problems {
        count: 0,
        bar: &bar,
    };
    let mut bytes = 0u64;
    let mut start = 0u64;
    while start < len {
        let end = (start + BATCH).min(len);
        let idx: Vec<u64> = (start..end).collect();
        match snap.gather_with(&idx, &opts) {
            Ok(b) => bytes += b.total_bytes() as u64,
            Err(_) => {
                // Find every damaged value of the batch, one at a time.
                for &i in &idx {
                    for name in &names {
                        match snap.gather_fields_with(&[i], &[name.as_str()], &opts) {
                            Ok(b) => bytes += b.total_bytes() as u64,
                            Err(e) => problems.report(&e.to_string()),
                        }
                    }
                }
            }
        }
        for &i in &idx {
            check_shapes(&snap, i, &mut problems);
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

/// Checks each value's length of record `i` against its field's dtype and shape.
fn check_shapes(snap: &Snapshot, i: u64, problems: &mut Problems<'_>) {
    for (f, meta) in snap.meta().fields.iter().enumerate() {
        // A damaged entry was reported by the read already.
        let Ok(loc) = snap.locate(f, i) else { continue };
        let len = u64::from(loc.logical_len);
        if len == 0 {
            continue;
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
            let file = loc
                .chunk
                .map_or("?".to_string(), |p| p.display().to_string());
            problems.report(&format!(
                "value does not fit its field in {file} at byte {} (field {:?}, record {i}): \
                 {reason}",
                loc.offset, meta.name
            ));
        }
    }
}
