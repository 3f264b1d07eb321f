//! The column layout of a batch served from the chunk mappings ([`crate::ReadConfig::with_columns`]):
//! each field's values end to end, in record order, in a buffer of the field's own, so a NumPy
//! or Arrow column is one [`Bytes`] with no copy of its own.
//!
//! A field is served one of three ways:
//!
//! - **A view.** Its values are raw and lie back to back in one mapping already (records read in
//!   file order): the column is a slice of the mapping, checked where it lies.
//! - **One copy, folded into the check.** Every value is raw: each is checked and appended to a
//!   buffer that grows by each value, so no byte of it is zero-filled first, and each record's
//!   bytes are read from memory once (the check brings a block into the core's cache, the copy
//!   takes it from there).
//! - **Decoded.** Some value is compressed: the buffer is zero-filled and every value is
//!   inflated, decoded or copied into its place by the finishing pool, as in the slotted layout.
//!
//! A batch of one field whose buffer nothing else holds becomes writable memory in the Python
//! package (`bytes::Bytes::try_into_mut`), which is why each field has a buffer of its own.

use super::finish::{checksum, run_parallel, Finisher, Task, DATA_BYTES};
use super::resolved::{Resolved, Want};
use crate::error::Result;
use crate::format::dtype::StoredCodec;
use crate::io::mmap::SharedMap;
use crate::store::read::batch::{Span, Values, EMPTY};
use bytes::Bytes;

/// The mapping index of an absent value (no stored bytes), in the mapped path's `which`.
pub(super) const NONE: u32 = u32::MAX;

/// Values ahead whose first bytes the copy loop prefetches (random records are cache misses).
const AHEAD: usize = 8;

/// Bytes checked then copied at a time within a long value: the check leaves them in the
/// core's first-level cache for the copy. (64 KiB records from the page cache, one core: 4 KiB
/// blocks cost 1.10–1.15× a plain copy, 16 KiB 1.15–1.3×, whole records 1.2×.)
const BLOCK: usize = 4 << 10;

/// Lays the batch out in columns. `maps` are the batch's mappings and `which[i]` the mapping of
/// `res.wants[i]` ([`NONE`] for an absent value). Owner `f` of the result is field `f`'s buffer
/// (empty for a field served as a view); mapping `k` is owner `fields + k`.
pub(super) fn gather(
    res: &Resolved<'_>,
    fin: &Finisher,
    verify: bool,
    maps: &[SharedMap],
    which: &[u32],
) -> Result<Values> {
    let wants = &res.wants;
    let nf = res.fields.len().max(1);
    let mut spans = vec![EMPTY; wants.len()];
    let mut owners: Vec<Bytes> = Vec::with_capacity(nf + maps.len());
    for f in 0..nf {
        // The positions of field `f`'s values, in record order.
        let of_field = || (f..wants.len()).step_by(nf);
        let stored = |i: usize| -> Result<Option<&[u8]>> {
            let (Some(w), Some(&k)) = (wants.get(i), which.get(i)) else {
                return Ok(None);
            };
            if k == NONE {
                return Ok(None);
            }
            let map = maps
                .get(k as usize)
                .ok_or_else(|| res.misplaced(w, "its mapping"))?;
            map.bytes()
                .get(w.e.offset as usize..w.e.end() as usize)
                .map(Some)
                .ok_or_else(|| res.misplaced(w, "its stored bytes"))
        };
        if let Some(k) = view_of(res, maps, which, of_field()) {
            let mut tasks = Vec::new();
            for i in of_field() {
                let (Some(w), Some(bytes)) = (wants.get(i), stored(i)?) else {
                    continue;
                };
                if let Some(s) = spans.get_mut(i) {
                    *s = Span {
                        owner: (nf + k) as u32,
                        start: w.e.offset as usize,
                        len: bytes.len(),
                    };
                }
                if verify {
                    tasks.push(Task {
                        w,
                        stored: bytes,
                        dst: None,
                    });
                }
            }
            run_parallel(fin, res, &tasks, &mut [], verify)?;
            owners.push(Bytes::new());
            continue;
        }
        let total: usize = of_field()
            .filter_map(|i| wants.get(i))
            .map(|w| w.e.logical_len as usize)
            .sum();
        let raw = of_field()
            .filter_map(|i| wants.get(i))
            .all(|w| w.e.physical_len == 0 || w.e.codec == StoredCodec::Raw);
        let mut at = 0usize;
        let mut place = |i: usize, len: usize| {
            if let Some(s) = spans.get_mut(i) {
                *s = match len {
                    0 => EMPTY,
                    _ => Span {
                        owner: f as u32,
                        start: at,
                        len,
                    },
                };
            }
            let start = at;
            at += len;
            start
        };
        if raw {
            // Checked and appended value by value: the buffer grows by each, never zero-filled.
            let mut col: Vec<u8> = Vec::with_capacity(total);
            let mut values: Vec<(usize, &Want, &[u8])> = Vec::new();
            for i in of_field() {
                if let Some(w) = wants.get(i) {
                    values.push((i, w, stored(i)?.unwrap_or_default()));
                }
            }
            for (n, &(i, w, bytes)) in values.iter().enumerate() {
                if let Some(&(_, _, ahead)) = values.get(n + AHEAD) {
                    crate::io::prefetch_lines(ahead, DATA_BYTES);
                }
                place(i, bytes.len());
                copy_checked(res, w, bytes, &mut col, verify)?;
            }
            owners.push(Bytes::from(col));
            continue;
        }
        // Some value is compressed: decode (and copy the raw ones) into a zero-filled buffer,
        // on the finishing pool.
        let mut col = vec![0u8; total];
        let mut tasks = Vec::new();
        for i in of_field() {
            let Some(w) = wants.get(i) else { continue };
            let len = w.e.logical_len as usize;
            let start = place(i, len);
            if let Some(bytes) = stored(i)? {
                tasks.push(Task {
                    w,
                    stored: bytes,
                    dst: Some((start, len)),
                });
            }
        }
        run_parallel(fin, res, &tasks, &mut col, verify)?;
        owners.push(Bytes::from(col));
    }
    owners.extend(maps.iter().map(|m| m.bytes().clone()));
    Ok(Values { owners, spans })
}

/// Checks `bytes` (the raw stored value of `w`) and appends it to `col`, a block at a time:
/// each block is read from memory once, by the check, and copied from the cache.
fn copy_checked(
    res: &Resolved<'_>,
    w: &Want,
    bytes: &[u8],
    col: &mut Vec<u8>,
    verify: bool,
) -> Result<()> {
    if !verify {
        col.extend_from_slice(bytes);
        return Ok(());
    }
    if bytes.len() <= BLOCK {
        checksum(res, w, bytes)?;
        col.extend_from_slice(bytes);
        return Ok(());
    }
    let mut crc = 0u32;
    for block in bytes.chunks(BLOCK) {
        crc = crate::checksum::crc32c_append(crc, block);
        col.extend_from_slice(block);
    }
    if crc != w.e.data_crc {
        // The column is dropped with the error; report it the one way every path does.
        return checksum(res, w, bytes);
    }
    Ok(())
}

/// The mapping that serves field `positions` as a view: every present value raw, in one
/// mapping, each starting where the one before ended, the first aligned for the field's dtype.
/// `None` if any is not, or no value is present.
fn view_of(
    res: &Resolved<'_>,
    maps: &[SharedMap],
    which: &[u32],
    positions: impl Iterator<Item = usize>,
) -> Option<usize> {
    let mut run: Option<(u32, u64)> = None;
    let mut first: Option<&Want> = None;
    for i in positions {
        let (w, &k) = (res.wants.get(i)?, which.get(i)?);
        if w.e.physical_len == 0 {
            continue;
        }
        if k == NONE || w.e.codec != StoredCodec::Raw {
            return None;
        }
        run = match run {
            None => {
                first = Some(w);
                Some((k, w.e.end()))
            }
            Some((m, end)) if m == k && end == w.e.offset => Some((m, w.e.end())),
            Some(_) => return None,
        };
    }
    let (k, _) = run?;
    let (w, map) = (first?, maps.get(k as usize)?);
    (map.bytes().as_ptr() as usize)
        .wrapping_add(w.e.offset as usize)
        .is_multiple_of(res.item_bytes(w))
        .then_some(k as usize)
}

/// The slab of a batch read through the I/O backends in columns: each field's values end to
/// end in record order, each field's run starting 64-byte aligned; and each value's start, in
/// `wants` order (`wants` record-major, `fields` per record), as [`slab`] gives for the slotted
/// layout.
///
/// [`slab`]: crate::store::read::batch::slab
pub(super) fn slab(wants: &[Want], fields: usize) -> (Vec<u8>, Vec<usize>) {
    const ALIGN: usize = crate::store::read::batch::SLOT_ALIGN;
    let nf = fields.max(1);
    let mut starts = vec![0usize; wants.len()];
    let mut total = 0usize;
    for f in 0..nf {
        total = total.next_multiple_of(ALIGN);
        for i in (f..wants.len()).step_by(nf) {
            if let (Some(s), Some(w)) = (starts.get_mut(i), wants.get(i)) {
                *s = total;
                total += w.e.logical_len as usize;
            }
        }
    }
    let buf = vec![0u8; total + ALIGN];
    let pad = buf.as_ptr().align_offset(ALIGN).min(ALIGN);
    for s in &mut starts {
        *s += pad;
    }
    (buf, starts)
}

/// The values of a batch of several fields read into one column-major [`slab`] (`starts` in
/// `wants` order), each field copied into a buffer of its own: a field's array is then memory
/// nothing else holds (writable in the Python package), as on the mapped path. One more copy,
/// on the path that waited for reads.
pub(super) fn split(out: &[u8], wants: &[Want], starts: &[usize], fields: usize) -> Result<Values> {
    let nf = fields.max(1);
    let mut spans = vec![EMPTY; wants.len()];
    let mut owners = Vec::with_capacity(nf);
    for f in 0..nf {
        let positions = (f..wants.len()).step_by(nf);
        let first = positions
            .clone()
            .find_map(|i| starts.get(i))
            .copied()
            .unwrap_or(0);
        let mut len = 0usize;
        for i in positions {
            let (Some(w), Some(s)) = (wants.get(i), spans.get_mut(i)) else {
                continue;
            };
            let n = w.e.logical_len as usize;
            if n > 0 {
                *s = Span {
                    owner: f as u32,
                    start: len,
                    len: n,
                };
            }
            len += n;
        }
        let col = out.get(first..first + len).ok_or_else(|| {
            crate::error::Error::internal(format!(
                "column {f} of a batch ({len} bytes at {first}) is not inside its slab"
            ))
        })?;
        owners.push(Bytes::copy_from_slice(col));
    }
    Ok(Values { owners, spans })
}
