//! The zero-copy path: raw records are slices of the chunks' mappings, deflate records are
//! inflated from the mapping into a slab. Runs when the backend's [`ZeroCopy`] policy says so.
//!
//! [`ZeroCopy`]: super::backend::ZeroCopy

use super::columns::NONE;
use super::finish::{run_parallel, Finisher, Task, DATA_BYTES};
use super::plan::PerChunk;
use super::resolved::{Resolved, Want};
use crate::error::Result;
use crate::io::mmap::SharedMap;
use crate::store::read::batch::{slab, Span, Values, EMPTY, SLOT_ALIGN};
use bytes::Bytes;

/// Records probed with `mincore` per batch under [`ZeroCopy::WhenResident`].
///
/// [`ZeroCopy::WhenResident`]: super::backend::ZeroCopy::WhenResident
const PROBES: usize = 8;

/// Bytes a batch read without verification prefetches (the first [`DATA_BYTES`] of each record,
/// from the first): about what stays in a core's L2 until the caller reads it.
const UNVERIFIED_PREFETCH: usize = 256 << 10;

/// True if a sample of the batch's records is in the page cache: the batch is served from the
/// mappings. One cold record among them sends the whole batch to the I/O backend.
pub(crate) fn resident(res: &Resolved<'_>) -> Result<bool> {
    let present: Vec<&Want> = res.wants.iter().filter(|w| w.e.physical_len > 0).collect();
    let step = present.len().div_ceil(PROBES).max(1);
    for w in present.iter().step_by(step) {
        let Some(map) = res.chunk(w)?.map()? else {
            return Ok(false);
        };
        if !map.resident(w.e.offset, w.e.physical_len as usize) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Serves the batch from the mappings; `None` if a chunk cannot be mapped (the caller reads it
/// through the backend instead).
///
/// A raw record whose place in the chunk is not aligned to its dtype's item size is copied into
/// the slab instead, so typed views work on every value.
///
/// Without verification nothing reads a zero-copy record here, but its caller is about to: the
/// first KiB of each is prefetched (up to [`UNVERIFIED_PREFETCH`] bytes a batch), so the
/// caller's reads find them in cache instead of waiting on each record's misses in turn.
/// With `columns`, each field is laid out end to end in a buffer of its own
/// ([`super::columns`]).
pub(crate) fn gather(
    res: &Resolved<'_>,
    fin: &Finisher,
    verify: bool,
    columns: bool,
) -> Result<Option<Values>> {
    let wants = &res.wants;
    // The batch's mappings, each asked of its chunk once (`PerChunk` remembers which), and per
    // value the index of its mapping (`NONE` for an absent value).
    let mut maps: Vec<SharedMap> = Vec::new();
    let mut index_of = PerChunk::<u32>::new();
    let mut which: Vec<u32> = Vec::with_capacity(wants.len());
    for w in wants {
        if w.e.physical_len == 0 {
            which.push(NONE);
            continue;
        }
        let k = index_of.get(w.key(), || {
            Ok(match res.chunk(w)?.map()? {
                Some(m) => {
                    maps.push(m);
                    (maps.len() - 1) as u32
                }
                None => NONE,
            })
        })?;
        if k == NONE {
            return Ok(None);
        }
        which.push(k);
    }
    if columns {
        return super::columns::gather(res, fin, verify, &maps, &which).map(Some);
    }
    let map_of = |k: u32| maps.get(k as usize);
    let copied: Vec<bool> = wants
        .iter()
        .zip(&which)
        .map(|(w, &k)| {
            map_of(k).is_some_and(|m| {
                w.e.codec.compressed()
                    || !(m.bytes().as_ptr() as usize)
                        .wrapping_add(w.e.offset as usize)
                        .is_multiple_of(res.item_bytes(w))
            })
        })
        .collect();
    let (mut buf, starts) = slab(
        wants
            .iter()
            .zip(&copied)
            .filter(|(_, &c)| c)
            .map(|(w, _)| w.e.logical_len as usize),
        SLOT_ALIGN,
    );
    // Owner 0 is the slab; mapping k is owner k + 1.
    let mut spans = Vec::with_capacity(wants.len());
    let mut tasks = Vec::with_capacity(wants.len());
    let mut slots = starts.iter();
    let mut prefetched = 0usize;
    for (pos, (w, &k)) in wants.iter().zip(&which).enumerate() {
        let Some(map) = map_of(k) else {
            spans.push(EMPTY);
            continue;
        };
        let (start, end) = (w.e.offset as usize, w.e.end() as usize);
        let stored = map
            .bytes()
            .get(start..end)
            .ok_or_else(|| res.misplaced(w, "its stored bytes"))?;
        if !copied.get(pos).copied().unwrap_or(false) {
            spans.push(Span {
                owner: k + 1,
                start,
                len: end - start,
            });
            if verify {
                tasks.push(Task {
                    w,
                    stored,
                    dst: None,
                });
            } else if prefetched < UNVERIFIED_PREFETCH {
                crate::io::prefetch_lines(stored, DATA_BYTES);
                prefetched += stored.len().min(DATA_BYTES);
            }
            continue;
        }
        let at = slots.next().copied().unwrap_or(0);
        let len = w.e.logical_len as usize;
        spans.push(Span {
            owner: 0,
            start: at,
            len,
        });
        tasks.push(Task {
            w,
            stored,
            dst: Some((at, len)),
        });
    }
    run_parallel(fin, res, &tasks, &mut buf, verify)?;
    drop(tasks);
    let owners = std::iter::once(Bytes::from(buf))
        .chain(maps.iter().map(|m| m.bytes().clone()))
        .collect();
    Ok(Some(Values { owners, spans }))
}
