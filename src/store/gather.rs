//! Reading a snapshot: a gather (or a lookahead) of indices × fields is split into parts, each
//! part resolved against the snapshot's tables (`resolve.rs`), then handed to the read engine
//! (`read/`), which plans, reads and finishes it; a record found damaged in a cached copy is
//! read again here. The snapshot calls down into `read/`, never the other way round
//! (docs/ARCHITECTURE.md, "Import rules").

use crate::error::{Error, Result};
use crate::store::read::batch::{Batch, FieldNames, Values};
use crate::store::read::{self, Engine, ReadConfig};
use crate::store::resolve::resolve;
use crate::store::snapshot::Snapshot;
use std::sync::Arc;

/// Values (indices × fields) a gather resolves, plans and finishes at once. A bigger gather runs
/// in parts of this size whose results are joined, so what a gather holds beyond its result is
/// bounded (about 200 bytes per value of a part, ~13 MiB) whatever the number of indices.
pub(crate) const PART_VALUES: usize = 1 << 16;

/// Records of an announced batch probed for residency before its reads are planned.
const LOOKAHEAD_PROBES: usize = 2;

/// The records of a part of a gather of `fields`.
fn per_part(fields: &[usize]) -> usize {
    (PART_VALUES / fields.len().max(1)).max(1)
}

impl Snapshot {
    /// The read engine for `config` on this snapshot: a snapshot of a dataset on an object
    /// store reads with its remote backend unless `config` names a custom one.
    pub(crate) fn engine(&self, config: &ReadConfig) -> Result<Engine> {
        match (&self.native, config.custom_backend()) {
            (Some(native), None) => {
                Engine::new(&config.clone().with_custom_backend(Arc::clone(native)))
            }
            _ => Engine::new(config),
        }
    }
}

/// Reads `indices` × `fields` (snapshot field numbers) from `snap` in caller order, through
/// `engine`, with the fields' fixed shapes attached so [`Batch::typed`] checks them: every batch
/// a dataset or snapshot hands out is made here. Every index is checked; every record's checksum
/// is verified unless the engine's configuration turns it off. Big requests run in parts of
/// [`PART_VALUES`] values, in order: the first failing record in caller order is the one
/// reported.
pub(crate) fn gather(
    snap: &Snapshot,
    indices: &[u64],
    fields: &[usize],
    engine: &Engine,
) -> Result<Batch> {
    let batch = gather_parts(snap, indices, fields, engine)?;
    let shapes = fields
        .iter()
        .map(|&f| {
            snap.meta
                .fields
                .get(f)
                .map(|m| m.shape.clone())
                .ok_or_else(|| Error::UnknownField {
                    field: format!("#{f}"),
                })
        })
        .collect::<Result<_>>()?;
    Ok(batch.with_shapes(shapes))
}

/// [`gather`] without the shapes: the parts, joined.
fn gather_parts(
    snap: &Snapshot,
    indices: &[u64],
    fields: &[usize],
    engine: &Engine,
) -> Result<Batch> {
    let per_part = per_part(fields);
    if indices.len() <= per_part {
        let (values, names) = gather_part(snap, indices, fields, engine)?;
        return Ok(Batch::new(values, indices.to_vec(), names));
    }
    let mut joined = Values::default();
    let mut names = None;
    for part in indices.chunks(per_part) {
        let (values, n) = gather_part(snap, part, fields, engine)?;
        joined.append(values);
        names.get_or_insert(n);
    }
    let names = match names {
        Some(n) => n,
        None => resolve(snap, &[], fields)?.fields,
    };
    Ok(Batch::new(joined, indices.to_vec(), names))
}

/// One piece of a gather: its values and the batch's field names. A record found damaged in
/// bytes the backend can fetch again (a cache entry) is read once more.
fn gather_part(
    snap: &Snapshot,
    indices: &[u64],
    fields: &[usize],
    engine: &Engine,
) -> Result<(Values, FieldNames)> {
    let mut result = gather_part_once(snap, indices, fields, engine, true);
    // Each retry follows a backend dropping the copy of a file not dropped before in this
    // gather: damage that a retry meets again (bytes damaged on the store itself) ends it, so
    // there are at most as many retries as damaged cached copies, never one per chunk.
    let mut dropped: Vec<std::path::PathBuf> = Vec::new();
    for _ in 0..snap.chunk_count() {
        let path = match &result {
            Err(Error::ChecksumMismatch { path, .. } | Error::Decompress { path, .. }) => path,
            _ => break,
        };
        if dropped.contains(path) || !engine.backend.refetch(path) {
            break;
        }
        snap.copy_dropped(path);
        dropped.push(path.clone());
        if let Err(e) = &result {
            tracing::warn!(error = %e, "a cached copy was damaged; reading it again");
        }
        result = gather_part_once(snap, indices, fields, engine, false);
    }
    result
}

/// `zero_copy: false` keeps the batch off the mappings (a retry after a damaged cache entry:
/// the backend serves it from elsewhere).
fn gather_part_once(
    snap: &Snapshot,
    indices: &[u64],
    fields: &[usize],
    engine: &Engine,
    zero_copy: bool,
) -> Result<(Values, FieldNames)> {
    let res = {
        let _span = tracing::trace_span!("zrecord.resolve", records = indices.len()).entered();
        // Tables read on demand: the batch's missing pages in one step, before resolving.
        snap.load_pages(indices, fields)?;
        resolve(snap, indices, fields)?
    };
    let values = read::read(&res, engine, zero_copy)?;
    Ok((values, Arc::clone(&res.fields)))
}

/// Announces the reads a gather of `indices` × `fields` will make to a backend that wants
/// them ([`ReadBackend::lookahead`](crate::ReadBackend::lookahead)): the same resolution, plan
/// and jobs as [`gather`], no buffers, no reads.
pub(crate) fn lookahead(
    snap: &Snapshot,
    indices: &[u64],
    fields: &[usize],
    engine: &Engine,
    session: u64,
) -> Result<()> {
    // A custom backend (an object store's) has nothing to hide for local chunks (a remote
    // dataset's cached ones included); zrecord's own backends have the read window.
    let local_window = engine.effective.is_some();
    if !engine.backend.wants_lookahead() || !(local_window || snap.any_object()) {
        return Ok(());
    }
    for part in indices.chunks(per_part(fields)) {
        // Warm data has nothing to hide: a batch whose first and middle records are resident
        // is left alone, for the price of resolving those two and one `mincore` each (8
        // probes, as `auto`'s zero-copy choice makes, cost warm 1 KiB loaders ~13% more CPU).
        // A wrong guess costs either a readahead of resident pages or a batch read as without
        // lookahead.
        // After a run of warm batches only some are probed (`Engine::probe_lookahead`).
        if local_window && !engine.direct_io {
            if !engine.probe_lookahead() {
                continue;
            }
            let step = part.len().div_ceil(LOOKAHEAD_PROBES).max(1);
            let sample: Vec<u64> = part.iter().step_by(step).copied().collect();
            if read::probe(&resolve(snap, &sample, fields)?, engine)? {
                continue;
            }
        }
        read::announce(&resolve(snap, part, fields)?, engine, session)?;
    }
    Ok(())
}
