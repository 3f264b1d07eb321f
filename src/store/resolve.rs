//! Resolving a batch against a snapshot: every (index, field) of the request becomes a checked
//! offset entry, read from the snapshot's tables (the table entries prefetched a window at a
//! time), with the parts, chunks and dictionaries the read engine needs to read and finish it
//! ([`Resolved`]), so `read/` never goes back to the snapshot.

use crate::error::{Error, Result};
use crate::format::codec::Dictionary;
use crate::store::read::resolved::{Dictionaries, PartRes, Resolved, Want};
use crate::store::snapshot::Snapshot;
use std::collections::HashMap;
use std::sync::Arc;

/// Records whose table entries are prefetched in one burst before any of them is decoded.
const ENTRY_WINDOW: usize = 256;

/// A snapshot's dictionaries are its tables'.
impl Dictionaries for Snapshot {
    fn dictionary(&self, field: usize, n: u8) -> Option<&Arc<Dictionary>> {
        self.tables.get(field)?.dictionary(n)
    }
}

/// What a batch reads of `snap` (a plain dataset, or one part of a collection).
fn part_res(snap: &Snapshot) -> PartRes<'_> {
    PartRes {
        chunks: &snap.chunks,
        dictionaries: snap,
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
            parts.push(part_res(snap));
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
                            parts.push(part_res(part));
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
