//! Resolving a batch: every (index, field) of the request becomes a checked offset entry, with
//! what later stages need to name it in an error (its field, its chunk), so planning and
//! finishing never go back to the snapshot.

use super::chunks::{ChunkHandle, ChunkSet};
use crate::error::{Error, Result};
use crate::format::codec::Dictionary;
use crate::format::dtype::{DType, StoredCodec};
use crate::format::entry::Entry;
use crate::store::snapshot::{FieldTable, Snapshot};
use std::path::PathBuf;
use std::sync::Arc;

/// Records whose table entries are prefetched in one burst before any of them is decoded.
const ENTRY_WINDOW: usize = 256;

/// One value to produce: record `index`, field `field` (a position in [`Resolved::fields`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Want {
    pub(crate) field: usize,
    pub(crate) index: u64,
    pub(crate) e: Entry,
}

/// A batch's values in caller order (record-major, then field), checked against the snapshot.
#[derive(Debug)]
pub(crate) struct Resolved<'a> {
    pub(crate) wants: Vec<Want>,
    /// The batch's fields: name and dtype, by position.
    pub(crate) fields: Arc<[(String, DType)]>,
    pub(crate) chunks: &'a ChunkSet,
    /// The batch's fields' tables, by position (their zstd dictionaries).
    pub(crate) tables: Vec<&'a FieldTable>,
}

impl Resolved<'_> {
    /// The chunk holding `w`'s stored bytes (resolving checked that the commit names it).
    pub(crate) fn chunk(&self, w: &Want) -> Result<&Arc<ChunkHandle>> {
        self.chunks.get(w.e.chunk).ok_or_else(|| {
            Error::internal(format!(
                "record {} names chunk {}, which resolving found",
                w.index, w.e.chunk
            ))
        })
    }

    /// The zstd dictionary `w`'s entry names (resolving checked the commit holds it).
    pub(crate) fn dictionary(&self, w: &Want) -> Result<Option<&Arc<Dictionary>>> {
        let StoredCodec::ZstdDict(n) = w.e.codec else {
            return Ok(None);
        };
        self.tables
            .get(w.field)
            .and_then(|t| t.dictionary(n))
            .map(Some)
            .ok_or_else(|| {
                Error::internal(format!(
                    "record {} names dictionary {n}, which resolving found",
                    w.index
                ))
            })
    }

    /// The name of `w`'s field.
    pub(crate) fn field_name(&self, w: &Want) -> String {
        self.fields
            .get(w.field)
            .map(|(n, _)| n.clone())
            .unwrap_or_default()
    }

    /// The item size of `w`'s field's dtype.
    pub(crate) fn item_bytes(&self, w: &Want) -> usize {
        self.fields
            .get(w.field)
            .map_or(1, |(_, d)| d.item_bytes() as usize)
    }

    /// The path of `w`'s chunk.
    pub(crate) fn chunk_path(&self, w: &Want) -> PathBuf {
        self.chunks.path(w.e.chunk)
    }

    /// The error for a slot or slice that does not fit where planning put it: a bug, never
    /// the data's fault (every length was checked against the chunk when resolving).
    pub(crate) fn misplaced(&self, w: &Want, what: &str) -> Error {
        Error::internal(format!(
            "record {} of field {:?}: {what} does not fit where it was planned",
            w.index,
            self.field_name(w)
        ))
    }
}

/// Resolves `indices` × `fields` (snapshot field numbers) against `snap`: every index in range,
/// every entry intact and inside a committed chunk. For random indices each table entry is a
/// cache miss, often a TLB miss too: a window's entries are prefetched in a tight loop first,
/// so their misses and page walks overlap (a prefetch waiting on its page walk holds up
/// retirement, so prefetches spread between decodes, 8 ahead, overlapped few of them), then
/// decoded.
pub(crate) fn resolve<'a>(
    snap: &'a Snapshot,
    indices: &[u64],
    fields: &[usize],
) -> Result<Resolved<'a>> {
    let mut wants = Vec::with_capacity(indices.len().saturating_mul(fields.len()));
    let prefetch = |index: u64| {
        for &field in fields {
            if let Some(t) = snap.tables.get(field) {
                t.prefetch(index);
            }
        }
    };
    for window in indices.chunks(ENTRY_WINDOW) {
        for &index in window {
            prefetch(index);
        }
        for &index in window {
            for (pos, &field) in fields.iter().enumerate() {
                let e = snap.entry(field, index)?;
                wants.push(Want {
                    field: pos,
                    index,
                    e,
                });
            }
        }
    }
    let names = fields
        .iter()
        .map(|&f| snap.table(f).map(|t| (t.meta.name.clone(), t.meta.dtype)))
        .collect::<Result<Arc<[_]>>>()?;
    let tables = fields
        .iter()
        .map(|&f| snap.table(f))
        .collect::<Result<Vec<_>>>()?;
    Ok(Resolved {
        wants,
        fields: names,
        chunks: &snap.chunks,
        tables,
    })
}
