//! Resolving a batch: every (index, field) of the request becomes a checked offset entry, with
//! what later stages need to name it in an error (its field, its chunk), so planning and
//! finishing never go back to the snapshot.

use super::chunks::{ChunkHandle, ChunkSet};
use super::plan::ChunkKey;
use crate::error::{Error, Result};
use crate::format::codec::Dictionary;
use crate::format::dtype::{DType, StoredCodec};
use crate::format::entry::Entry;
use crate::store::snapshot::{FieldTable, Snapshot};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Records whose table entries are prefetched in one burst before any of them is decoded.
const ENTRY_WINDOW: usize = 256;

/// One value to produce: record `index` (global), field `field` (a position in
/// [`Resolved::fields`]), whose entry is in part `part` (a position in [`Resolved::parts`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Want {
    pub(crate) field: usize,
    pub(crate) index: u64,
    pub(crate) part: u32,
    pub(crate) e: Entry,
}

impl Want {
    /// The chunk holding the value's stored bytes, as the plan names it.
    pub(crate) fn key(&self) -> ChunkKey {
        ChunkKey {
            part: self.part,
            chunk: self.e.chunk,
        }
    }
}

/// What a batch reads of one part (of a collection; a plain dataset is its own one part): its
/// chunks, and its tables (by snapshot field number, [`Resolved::field_ids`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PartRes<'a> {
    pub(crate) chunks: &'a ChunkSet,
    pub(crate) tables: &'a [FieldTable],
}

impl<'a> PartRes<'a> {
    fn of(snap: &'a Snapshot) -> PartRes<'a> {
        PartRes {
            chunks: &snap.chunks,
            tables: &snap.tables,
        }
    }
}

/// A batch's values in caller order (record-major, then field), checked against the snapshot.
#[derive(Debug)]
pub(crate) struct Resolved<'a> {
    pub(crate) wants: Vec<Want>,
    /// The batch's fields: name and dtype, by position.
    pub(crate) fields: Arc<[(String, DType)]>,
    /// The parts the batch's records are in, in order of first use: one for a plain dataset.
    pub(crate) parts: Vec<PartRes<'a>>,
    /// The batch's fields' snapshot field numbers, by position.
    pub(crate) field_ids: Vec<usize>,
}

impl Resolved<'_> {
    /// The chunk `key` names (resolving checked that the commit names it).
    pub(crate) fn chunk_at(&self, key: ChunkKey) -> Option<&Arc<ChunkHandle>> {
        self.parts
            .get(key.part as usize)
            .and_then(|p| p.chunks.get(key.chunk))
    }

    /// The chunk holding `w`'s stored bytes (resolving checked that the commit names it).
    pub(crate) fn chunk(&self, w: &Want) -> Result<&Arc<ChunkHandle>> {
        self.chunk_at(w.key()).ok_or_else(|| {
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
        self.parts
            .get(w.part as usize)
            .and_then(|p| p.tables.get(*self.field_ids.get(w.field)?))
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
        self.parts
            .get(w.part as usize)
            .map(|p| p.chunks.path(w.e.chunk))
            .unwrap_or_default()
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
///
/// A collection's records are found in their parts (a binary search of the parts' first
/// indices) and resolved there; the batch stays one batch: its wants name their part, and
/// [`Resolved::parts`] holds the parts it touches.
pub(crate) fn resolve<'a>(
    snap: &'a Snapshot,
    indices: &[u64],
    fields: &[usize],
) -> Result<Resolved<'a>> {
    let names = fields
        .iter()
        .map(|&f| {
            snap.meta
                .fields
                .get(f)
                .map(|m| (m.name.clone(), m.dtype))
                .ok_or_else(|| Error::UnknownField {
                    field: format!("#{f}"),
                })
        })
        .collect::<Result<Arc<[_]>>>()?;
    let mut wants = Vec::with_capacity(indices.len().saturating_mul(fields.len()));
    let mut parts = Vec::new();
    match &snap.parts {
        None => {
            for &f in fields {
                snap.table(f)?;
            }
            parts.push(PartRes::of(snap));
            resolve_in(indices, fields, |_| Ok((0, snap, None)), &mut wants)?;
        }
        Some(all) => {
            // Each part the batch touches gets a position in `parts` on first use: found
            // through a table by part number (a hash map past 2^16 parts).
            const NONE: u32 = u32::MAX;
            let small = all.snaps.len() <= 1 << 16;
            let mut slot_of: Vec<u32> = vec![NONE; if small { all.snaps.len() } else { 0 }];
            let mut slot_map: HashMap<usize, u32> = HashMap::new();
            resolve_in(
                indices,
                fields,
                |index| {
                    let (k, part, local) = snap.part_of(index)?;
                    let known = match small {
                        true => slot_of.get(k).copied().filter(|&s| s != NONE),
                        false => slot_map.get(&k).copied(),
                    };
                    let slot = match known {
                        Some(s) => s,
                        None => {
                            for &f in fields {
                                part.table(f)?;
                            }
                            let s = u32::try_from(parts.len())
                                .ok()
                                .filter(|&s| s != NONE)
                                .ok_or_else(|| Error::internal("a batch over 2^32 parts".into()))?;
                            parts.push(PartRes::of(part));
                            match slot_of.get_mut(k) {
                                Some(x) => *x = s,
                                None => {
                                    slot_map.insert(k, s);
                                }
                            }
                            s
                        }
                    };
                    Ok((slot, part, Some(local)))
                },
                &mut wants,
            )?;
        }
    }
    Ok(Resolved {
        wants,
        fields: names,
        parts,
        field_ids: fields.to_vec(),
    })
}

/// The resolve loop: `locate(index)` says which part (its position in the batch's parts), which
/// snapshot, and the index there (`None`: the same index, a plain dataset); entries are
/// prefetched a window at a time, then decoded in caller order (so the first failing record in
/// caller order is the one reported).
fn resolve_in<'a>(
    indices: &[u64],
    fields: &[usize],
    mut locate: impl FnMut(u64) -> Result<(u32, &'a Snapshot, Option<u64>)>,
    wants: &mut Vec<Want>,
) -> Result<()> {
    let mut located: Vec<Result<(u32, &'a Snapshot, u64)>> = Vec::with_capacity(ENTRY_WINDOW);
    for window in indices.chunks(ENTRY_WINDOW) {
        located.clear();
        for &index in window {
            let at = locate(index).map(|(slot, part, local)| (slot, part, local.unwrap_or(index)));
            if let Ok((_, part, local)) = &at {
                for &field in fields {
                    part.prefetch_entry(field, *local);
                }
            }
            located.push(at);
        }
        for (&index, at) in window.iter().zip(located.drain(..)) {
            let (slot, part, local) = at?;
            for (pos, &field) in fields.iter().enumerate() {
                let e = part.entry(field, local)?;
                wants.push(Want {
                    field: pos,
                    index,
                    part: slot,
                    e,
                });
            }
        }
    }
    Ok(())
}
