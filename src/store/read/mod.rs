//! The read engine: a batch's resolved values (checked offset entries in caller order) become
//! the values of a [`Batch`](batch::Batch). The store splits a gather into parts, resolves
//! each against the snapshot (`store/gather.rs`, `store/resolve.rs`) and calls down: [`read`]
//! for a gather, [`probe`] and [`announce`] for lookahead. Nothing here names the snapshot.
//!
//! ```text
//! batch.rs     Batch (the gathered records: slab, spans, field names) and Element
//! resolved.rs  Resolved and Want: the checked entries, their parts, chunks and dictionaries
//! mapped.rs    zero-copy from the chunks' mappings, when the backend's policy says so; or
//! plan.rs      entries → coalesced, aligned reads and landing spots (pure)
//! backend.rs   the ReadBackend trait: a backend executes the reads
//! finish.rs    CRC32C, inflate, copy into the slab, on the caller and the finishing pool
//! engine.rs    zrecord's backends (io_uring, pread pool, mmap, auto) and their pools
//! window.rs    the read window: reads of a loader's announced batches, started ahead
//! chunks.rs    chunk files opened lazily, closed LRU under the descriptor budget
//! config.rs    ReadConfig, Backend, ZRECORD_IO
//! ```
//!
//! No two files import each other: `mod.rs` drives the others; `mapped` uses `finish` and
//! `resolved`; `finish` uses `resolved`; `resolved` uses `chunks`; `engine` uses `backend`,
//! `config`, `finish` and `window`; `window` uses `backend` and `plan`; `config` uses `backend`;
//! `mod.rs`, `mapped` and `columns` use `batch`, which uses none of them.

mod backend;
pub mod batch;
pub(crate) mod chunks;
mod columns;
mod config;
mod engine;
mod finish;
mod mapped;
mod plan;
pub(crate) mod resolved;
mod window;

pub use backend::{ReadBackend, ZeroCopy};
pub use chunks::ChunkAt;
pub use config::{
    forced_backend, Backend, ReadConfig, DEFAULT_MAX_BYTES_IN_FLIGHT, DEFAULT_QUEUE_DEPTH,
    DEFAULT_THREADS,
};
pub(crate) use engine::Engine;
pub use engine::{read_backend, uring_available};

use crate::error::Result;
use crate::io::coalesce::Coalesce;
use crate::io::job::ReadJob;
use crate::store::read::batch::{slab, Span, Values, SLOT_ALIGN};
use bytes::Bytes;
use finish::{run_parallel, Task};
use plan::{Extent, DIRECT_ALIGN, OUT, STAGING};
use resolved::Resolved;

/// Reads the resolved values `res` through `engine`: from the chunks' mappings when the
/// backend's zero-copy policy says so (and `may_map`: `false` after a damaged cache entry, so
/// the backend serves the values from elsewhere), else through the backend's reads. Every
/// record's checksum is verified unless the engine's configuration turns it off.
pub(crate) fn read(res: &Resolved<'_>, engine: &Engine, may_map: bool) -> Result<Values> {
    let verify = engine.verify_checksums;
    let mapped = may_map
        && !engine.direct_io
        && match engine.backend.zero_copy() {
            ZeroCopy::Always => true,
            ZeroCopy::WhenResident => {
                let resident = mapped::resident(res)?;
                if !resident {
                    // The read window probes every announced batch again.
                    engine.probed(false);
                }
                resident
            }
            ZeroCopy::Never => false,
        };
    let zero_copy = match mapped {
        true => {
            let _span = tracing::trace_span!("zrecord.mapped", values = res.wants.len()).entered();
            mapped::gather(res, &engine.pools().finish, verify, engine.columns)?
        }
        false => None,
    };
    match zero_copy {
        Some(v) => Ok(v),
        None => {
            let _span = tracing::trace_span!(
                "zrecord.read",
                backend = engine.backend.name(),
                values = res.wants.len()
            )
            .entered();
            gather_io(res, engine)
        }
    }
}

/// The plan's ops in jobs of at most `max_job_files` files (each (chunk, mode) is one run of
/// ops), with each job's file count: a job holds permits for its files while in flight, and
/// keeps them open until it completes, whatever the budget closes meanwhile.
fn job_ranges(ops: &[plan::Op]) -> Vec<(std::ops::Range<usize>, usize)> {
    let max_files = chunks::max_job_files();
    let mut out = Vec::new();
    let mut start = 0;
    while start < ops.len() {
        let mut end = start;
        let mut files = 0;
        let mut current = None;
        while let Some(op) = ops.get(end) {
            if current != Some((op.chunk, op.direct)) {
                if files == max_files {
                    break;
                }
                files += 1;
                current = Some((op.chunk, op.direct));
            }
            end += 1;
        }
        out.push((start..end, files));
        start = end;
    }
    out
}

/// The job of `plan`'s ops `range`, landing in `bufs`.
fn build_job(
    res: &Resolved<'_>,
    plan: &plan::Plan,
    range: std::ops::Range<usize>,
    bufs: Vec<Vec<u8>>,
) -> Result<ReadJob> {
    let ops = plan.ops.get(range).unwrap_or_default();
    let mut job = ReadJob {
        bufs,
        ..ReadJob::default()
    };
    let mut current = None;
    let base = ops.first().map_or(0, |op| op.pieces.start);
    for op in ops {
        if current != Some((op.chunk, op.direct)) {
            current = Some((op.chunk, op.direct));
            let chunk = res.chunk_at(op.chunk).ok_or_else(|| {
                crate::Error::internal(format!("a read names chunk {:?}", op.chunk))
            })?;
            let file = match op.direct {
                true => chunk.direct()?.ok_or_else(|| {
                    crate::Error::internal("O_DIRECT refused after it was granted".into())
                })?,
                false => chunk.file()?,
            };
            job.files.push(file);
        }
        job.ops.push(crate::io::job::ReadOp {
            file: job.files.len() - 1,
            offset: op.offset,
            need: op.need,
            pieces: op.pieces.start - base..op.pieces.end - base,
        });
        job.pieces
            .extend_from_slice(plan.pieces.get(op.pieces.clone()).unwrap_or_default());
    }
    Ok(job)
}

/// The extents of `res`'s records with their slots (`starts`): which read with `O_DIRECT`,
/// which land in staging.
fn extents(res: &Resolved<'_>, engine: &Engine, starts: &[usize]) -> Result<Vec<Extent>> {
    let mut direct_of = plan::PerChunk::<bool>::new();
    let mut rule_of = plan::PerChunk::<Coalesce>::new();
    let mut extents = Vec::with_capacity(res.wants.len());
    for (w, &slot) in res
        .wants
        .iter()
        .zip(starts.iter().chain(std::iter::repeat(&0)))
    {
        let direct = engine.direct_io
            && w.e.physical_len > 0
            && direct_of.get(w.key(), || Ok(res.chunk(w)?.direct()?.is_some()))?;
        extents.push(Extent {
            chunk: w.key(),
            offset: w.e.offset,
            len: w.e.physical_len as usize,
            staged: w.e.codec.compressed(),
            direct,
            slot,
            // An empty record reads nothing (its chunk may be gone): no chunk asked.
            rule: match w.e.physical_len == 0 {
                true => Coalesce::LOCAL,
                false => rule_of.get(w.key(), || {
                    Ok(match res.chunk(w)?.is_object() {
                        true => res
                            .parts
                            .get(w.key().part as usize)
                            .map_or(Coalesce::LOCAL, |p| p.chunks.object_reads),
                        false => Coalesce::LOCAL,
                    })
                })?,
            },
        });
    }
    Ok(extents)
}

/// Whether the sample `res` of an announced batch is resident (its stored bytes in the page
/// cache), recorded for [`Engine::probe_lookahead`]: a resident batch has nothing to announce.
pub(crate) fn probe(res: &Resolved<'_>, engine: &Engine) -> Result<bool> {
    let resident = mapped::resident(res)?;
    engine.probed(resident);
    Ok(resident)
}

/// Announces the reads a gather of the resolved values `res` will make to `engine`'s backend
/// ([`ReadBackend::lookahead`]): the same plan and jobs as [`read`], no buffers, no reads.
pub(crate) fn announce(res: &Resolved<'_>, engine: &Engine, session: u64) -> Result<()> {
    let local_window = engine.effective.is_some();
    // Slots change where bytes land, not which reads are made.
    let plan = plan::plan(&extents(res, engine, &[])?);
    for (range, files) in job_ranges(&plan.ops) {
        // For the read window, the job's descriptors count like a gather's while it is
        // announced (the window bounds what it keeps on its own); none free now: the batch
        // is not announced. A custom backend's (an object store's) objects hold none.
        let _permit = match !local_window {
            true => None,
            false => match chunks::try_job_permit(files) {
                Some(p) => Some(p),
                None => continue,
            },
        };
        engine
            .backend
            .lookahead(session, &build_job(res, &plan, range, Vec::new())?);
    }
    Ok(())
}

/// The I/O path: the plan's reads through the backend, raw records straight into their slots,
/// deflate records and `O_DIRECT` spans through staging; then checked and finished.
fn gather_io(res: &Resolved<'_>, engine: &Engine) -> Result<Values> {
    let wants = &res.wants;
    let verify = engine.verify_checksums;
    let (out, starts) = match engine.columns {
        true => columns::slab(wants, res.fields.len()),
        false => slab(wants.iter().map(|w| w.e.logical_len as usize), SLOT_ALIGN),
    };

    let extents = extents(res, engine, &starts)?;
    let mut plan = plan::plan(&extents);

    // Buffers: the slab, and staging aligned for O_DIRECT when used.
    let align = if engine.direct_io {
        DIRECT_ALIGN
    } else {
        SLOT_ALIGN
    };
    let staging = vec![0u8; plan.staging_len + if plan.staging_len > 0 { align } else { 0 }];
    let pad = staging.as_ptr().align_offset(align).min(align);
    for p in plan.pieces.iter_mut().filter(|p| p.buf == STAGING) {
        p.at += pad;
    }
    let mut bufs = vec![out, staging];
    for (range, files) in job_ranges(&plan.ops) {
        let _permit = chunks::job_permit(files);
        let job = build_job(res, &plan, range, std::mem::take(&mut bufs))?;
        let mut done = engine.backend.read(job)?;
        bufs = std::mem::take(&mut done.bufs);
    }
    let mut bufs = bufs.into_iter();
    let mut out = bufs.next().unwrap_or_default();
    let staging = bufs.next().unwrap_or_default();
    let landed = |l: Option<plan::Landing>| {
        l.map(|l| match l.buf {
            OUT => (OUT, l.at),
            _ => (STAGING, l.at + pad),
        })
    };

    // Check in place what landed in its slot; then check, inflate or copy out of staging.
    if verify {
        let mut in_place = Vec::new();
        for ((w, &l), &slot) in wants.iter().zip(&plan.landing).zip(&starts) {
            // A repeat landed in its first copy's slot, checked once there.
            let Some((OUT, at)) = landed(l).filter(|&(_, at)| at == slot) else {
                continue;
            };
            let stored = out
                .get(at..at + w.e.physical_len as usize)
                .ok_or_else(|| res.misplaced(w, "its stored bytes"))?;
            in_place.push(Task {
                w,
                stored,
                dst: None,
            });
        }
        run_parallel(&engine.pools().finish, res, &in_place, &mut [], true)?;
    }
    // A raw record asked for again was read once, into its first copy's slot.
    for ((w, &l), &slot) in wants.iter().zip(&plan.landing).zip(&starts) {
        let Some((OUT, at)) = landed(l).filter(|&(_, at)| at != slot) else {
            continue;
        };
        let len = w.e.physical_len as usize;
        if at.max(slot) + len > out.len() {
            return Err(res.misplaced(w, "its repeated bytes"));
        }
        out.copy_within(at..at + len, slot);
    }
    let mut staged = Vec::new();
    for ((w, &l), &slot) in wants.iter().zip(&plan.landing).zip(&starts) {
        let Some((STAGING, at)) = landed(l) else {
            continue;
        };
        let stored = staging
            .get(at..at + w.e.physical_len as usize)
            .ok_or_else(|| res.misplaced(w, "its staged bytes"))?;
        staged.push(Task {
            w,
            stored,
            dst: Some((slot, w.e.logical_len as usize)),
        });
    }
    run_parallel(&engine.pools().finish, res, &staged, &mut out, verify)?;
    drop(staged);
    if engine.columns && res.fields.len() > 1 {
        return columns::split(&out, wants, &starts, res.fields.len());
    }
    let spans = wants
        .iter()
        .zip(&starts)
        .map(|(w, &start)| Span {
            owner: 0,
            start,
            len: w.e.logical_len as usize,
        })
        .collect();
    Ok(Values {
        owners: vec![Bytes::from(out)],
        spans,
    })
}
