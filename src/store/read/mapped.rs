//! The zero-copy path: raw records are slices of the chunks' mappings, deflate records are
//! inflated from the mapping into a slab. Runs when the backend's [`ZeroCopy`] policy says so.
//!
//! [`ZeroCopy`]: super::backend::ZeroCopy

use super::finish::{run_parallel, Finisher, Task};
use super::resolve::{Resolved, Want};
use crate::error::Result;
use crate::format::dtype::Codec;
use crate::io::mmap::SharedMap;
use crate::store::batch::{slab, Span, Values, EMPTY, SLOT_ALIGN};
use bytes::Bytes;

/// Records probed with `mincore` per batch under [`ZeroCopy::WhenResident`].
///
/// [`ZeroCopy::WhenResident`]: super::backend::ZeroCopy::WhenResident
const PROBES: usize = 8;

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
pub(crate) fn gather(res: &Resolved<'_>, fin: &Finisher, verify: bool) -> Result<Option<Values>> {
    let wants = &res.wants;
    let mut maps: Vec<Option<SharedMap>> = Vec::with_capacity(wants.len());
    let mut last: Option<(u16, SharedMap)> = None;
    for w in wants {
        if w.e.physical_len == 0 {
            maps.push(None);
            continue;
        }
        let map = match &last {
            Some((c, m)) if *c == w.e.chunk => m.clone(),
            _ => {
                let Some(m) = res.chunk(w)?.map()? else {
                    return Ok(None);
                };
                last = Some((w.e.chunk, m.clone()));
                m
            }
        };
        maps.push(Some(map));
    }
    let copied: Vec<bool> = wants
        .iter()
        .zip(&maps)
        .map(|(w, m)| {
            m.as_ref().is_some_and(|m| {
                w.e.codec == Codec::Deflate
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
    // Owner 0 is the slab; each chunk mapping the batch touches gets one owner.
    let mut owners: Vec<Bytes> = vec![Bytes::new()];
    let mut owner_chunks: Vec<u16> = vec![u16::MAX];
    let mut last = (u16::MAX, 0u32);
    let mut spans = Vec::with_capacity(wants.len());
    let mut tasks = Vec::with_capacity(wants.len());
    let mut slots = starts.iter();
    for (pos, (w, map)) in wants.iter().zip(&maps).enumerate() {
        let Some(map) = map else {
            spans.push(EMPTY);
            continue;
        };
        let (start, end) = (w.e.offset as usize, w.e.end() as usize);
        let stored = map
            .bytes()
            .get(start..end)
            .ok_or_else(|| res.misplaced(w, "its stored bytes"))?;
        if !copied.get(pos).copied().unwrap_or(false) {
            let owner = if last.0 == w.e.chunk && last.1 != 0 {
                last.1
            } else {
                let o = match owner_chunks.iter().position(|&c| c == w.e.chunk) {
                    Some(o) => o as u32,
                    None => {
                        owners.push(map.bytes().clone());
                        owner_chunks.push(w.e.chunk);
                        (owners.len() - 1) as u32
                    }
                };
                last = (w.e.chunk, o);
                o
            };
            spans.push(Span {
                owner,
                start,
                len: end - start,
            });
            if verify {
                tasks.push(Task {
                    w,
                    stored,
                    dst: None,
                });
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
    if let Some(o) = owners.first_mut() {
        *o = Bytes::from(buf);
    }
    Ok(Some(Values { owners, spans }))
}
