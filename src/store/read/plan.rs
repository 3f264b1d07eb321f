//! Planning a batch's reads: a pure function from the stored extents of its records to
//! coalesced, aligned reads and the place each record lands. No I/O, no snapshot: the property
//! test below checks it alone.

use crate::io::coalesce::{Coalesce, Runs};
use crate::io::job::{Piece, SKIP};
use std::ops::Range;

/// Alignment of `O_DIRECT` offsets, lengths and buffers.
pub(crate) const DIRECT_ALIGN: usize = 4096;
/// Alignment of staged records.
pub(crate) const SLOT_ALIGN: usize = 64;

/// The buffer raw records land in: the batch's slab.
pub(crate) const OUT: usize = 0;
/// The buffer deflate records and `O_DIRECT` spans land in, to be inflated or sliced.
pub(crate) const STAGING: usize = 1;

/// A chunk of a batch: chunk `chunk` of part `part` (a position in the batch's parts; a plain
/// dataset is one part, 0). A collection's parts each number their own chunks from 0, so a
/// chunk id alone does not name a file; the pair does, and the plan sorts and coalesces by it:
/// one plan, one set of jobs for a batch over any number of parts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ChunkKey {
    pub(crate) part: u32,
    pub(crate) chunk: u16,
}

/// A record's stored bytes: `len` bytes at `offset` in chunk `chunk`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Extent {
    pub(crate) chunk: ChunkKey,
    pub(crate) offset: u64,
    pub(crate) len: usize,
    /// The bytes need work after reading (inflate): they land in staging, not in the slot.
    pub(crate) staged: bool,
    /// The chunk is read with `O_DIRECT`.
    pub(crate) direct: bool,
    /// The record's slot in the output slab (used when not staged and not direct).
    pub(crate) slot: usize,
    /// How the chunk's reads coalesce: [`Coalesce::LOCAL`] for a local file, the dataset's
    /// rule for an object on a store (the same for every extent of a chunk).
    pub(crate) rule: Coalesce,
}

/// One read: a contiguous range of a chunk, scattered into `pieces`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Op {
    pub(crate) chunk: ChunkKey,
    pub(crate) direct: bool,
    pub(crate) offset: u64,
    /// Bytes that must arrive (a direct range is rounded up past the record's end).
    pub(crate) need: usize,
    pub(crate) pieces: Range<usize>,
}

/// Where a record's stored bytes are once the plan is read: `buf` ([`OUT`] or [`STAGING`]) at
/// `at`. A repeat of a record (asked for again in the batch) lands where its first copy does:
/// for a raw record, [`OUT`] at that copy's slot, not its own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Landing {
    pub(crate) buf: usize,
    pub(crate) at: usize,
}

/// The reads of a batch.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) ops: Vec<Op>,
    pub(crate) pieces: Vec<Piece>,
    /// By extent; `None` for an empty one.
    pub(crate) landing: Vec<Option<Landing>>,
    /// Bytes of staging the plan uses (relative to a [`DIRECT_ALIGN`]-aligned base).
    pub(crate) staging_len: usize,
}

/// Plans the reads of `extents`: sorted by (part, chunk, offset), then coalesced by the one
/// rule ([`Coalesce::runs`]) each chunk's extents name: [`Coalesce::LOCAL`] for local files,
/// the dataset's for objects on a store (gaps read into [`SKIP`] pieces). Raw records are read straight
/// into their slots, deflate records into 64-byte-aligned staging; direct records as
/// 4 KiB-aligned spans into 4 KiB-aligned staging, spans that overlap or touch merged. A
/// record longer than the rule's largest read is read in parts. A record asked for twice or
/// more is read once: its repeats land where its first copy does (a raw one in that copy's
/// slot, for the caller to copy into its own).
pub(crate) fn plan(extents: &[Extent]) -> Plan {
    let mut order: Vec<usize> = (0..extents.len())
        .filter(|&i| extents.get(i).is_some_and(|x| x.len > 0))
        .collect();
    order.sort_unstable_by_key(|&i| extents.get(i).map(|x| (x.chunk, x.direct, x.offset)));
    // Exact repeats are next to each other now: (repeat, first copy).
    let mut repeats: Vec<(usize, usize)> = Vec::new();
    order.dedup_by(|&mut later, &mut first| {
        let key = |i: usize| extents.get(i).map(|x| (x.chunk, x.direct, x.offset, x.len));
        let repeat = key(later) == key(first);
        if repeat {
            repeats.push((later, first));
        }
        repeat
    });

    let mut p = Plan {
        landing: vec![None; extents.len()],
        ..Plan::default()
    };
    let mut spans: Vec<Range<u64>> = Vec::new();
    let mut runs = Runs::default();
    // One file (chunk and mode) at a time.
    let mut rest = order.as_slice();
    while let Some(x) = rest.first().and_then(|&i| extents.get(i)) {
        let file = (x.chunk, x.direct);
        let n = rest
            .iter()
            .position(|&i| extents.get(i).is_none_or(|y| (y.chunk, y.direct) != file))
            .unwrap_or(rest.len());
        let (group, tail) = rest.split_at(n);
        rest = tail;
        let a = DIRECT_ALIGN as u64;
        spans.clear();
        spans.extend(group.iter().filter_map(|&i| extents.get(i)).map(|x| {
            let end = x.offset + x.len as u64;
            match x.direct {
                true => x.offset / a * a..end.next_multiple_of(a),
                false => x.offset..end,
            }
        }));
        runs.runs.clear();
        runs.parts.clear();
        x.rule.runs(&spans, !x.direct, &mut runs);
        for run in &runs.runs {
            let first = p.pieces.len();
            let parts = runs.parts.get(run.parts.clone()).unwrap_or_default();
            let mut need = 0u64;
            if x.direct {
                // One span of staging for the whole run.
                p.staging_len = p.staging_len.next_multiple_of(DIRECT_ALIGN);
                let at = p.staging_len;
                let len = (run.range.end - run.range.start) as usize;
                p.pieces.push(Piece {
                    buf: STAGING,
                    at,
                    len,
                });
                p.staging_len += len;
                for part in parts {
                    let (Some(&i), Some(span)) = (group.get(part.read), spans.get(part.read))
                    else {
                        continue;
                    };
                    let Some(y) = extents.get(i) else { continue };
                    let end = y.offset + y.len as u64;
                    need = need.max(end.min(part.range.end) - run.range.start);
                    if part.range.start == span.start {
                        let off = (y.offset - run.range.start) as usize;
                        set(&mut p.landing, i, STAGING, at + off);
                    }
                }
            } else {
                let mut file_at = run.range.start;
                for part in parts {
                    let Some((&i, y)) = group
                        .get(part.read)
                        .and_then(|i| Some((i, extents.get(*i)?)))
                    else {
                        continue;
                    };
                    if part.range.start > file_at {
                        p.pieces.push(Piece {
                            buf: SKIP,
                            at: 0,
                            len: (part.range.start - file_at) as usize,
                        });
                    }
                    // A record's place is given at its first part; later parts follow it.
                    if part.range.start == y.offset {
                        let (buf, at) = if y.staged {
                            let at = p.staging_len.next_multiple_of(SLOT_ALIGN);
                            p.staging_len = at + y.len;
                            (STAGING, at)
                        } else {
                            (OUT, y.slot)
                        };
                        set(&mut p.landing, i, buf, at);
                    }
                    let Some(Some(l)) = p.landing.get(i).copied() else {
                        continue;
                    };
                    p.pieces.push(Piece {
                        buf: l.buf,
                        at: l.at + (part.range.start - y.offset) as usize,
                        len: (part.range.end - part.range.start) as usize,
                    });
                    file_at = part.range.end;
                }
                need = run.range.end - run.range.start;
            }
            p.ops.push(Op {
                chunk: x.chunk,
                direct: x.direct,
                offset: run.range.start,
                need: need as usize,
                pieces: first..p.pieces.len(),
            });
        }
    }
    for (repeat, first) in repeats {
        if let Some(Some(l)) = p.landing.get(first).copied() {
            set(&mut p.landing, repeat, l.buf, l.at);
        }
    }
    p
}

/// A per-batch memo of one value per chunk: 64 slots addressed by the key's low bits (the
/// chunk id's, mixed with the part's). A batch over few chunks asks the handles once per chunk;
/// one over many chunks (or many parts) pays a compare per record and asks again only when two
/// of its chunks share a slot.
pub(crate) struct PerChunk<T> {
    slots: [Option<(ChunkKey, T)>; 64],
}

impl<T: Copy> PerChunk<T> {
    pub(crate) fn new() -> Self {
        PerChunk { slots: [None; 64] }
    }

    /// The value for chunk `key`, computed by `f` on a miss.
    pub(crate) fn get(
        &mut self,
        key: ChunkKey,
        f: impl FnOnce() -> crate::Result<T>,
    ) -> crate::Result<T> {
        let at = (usize::from(key.chunk) ^ (key.part as usize).wrapping_mul(7)) % 64;
        let Some(slot) = self.slots.get_mut(at) else {
            return f();
        };
        match slot {
            Some((c, v)) if *c == key => Ok(*v),
            _ => {
                let v = f()?;
                *slot = Some((key, v));
                Ok(v)
            }
        }
    }
}

fn set(landing: &mut [Option<Landing>], i: usize, buf: usize, at: usize) {
    if let Some(l) = landing.get_mut(i) {
        *l = Some(Landing { buf, at });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::indexing_slicing, clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    /// Random extents over a few chunks, with adjacency, overlap-free records per chunk (as a
    /// snapshot's are) and duplicates (a batch may ask for a record twice). Chunk 3 is an
    /// object on a store (never direct).
    fn extents() -> impl Strategy<Value = Vec<Extent>> {
        (
            object_rule(),
            prop::collection::vec(
                (
                    0u16..4,
                    0u64..64,
                    prop::sample::select(vec![
                        0usize, 1, 63, 64, 100, 4095, 4096, 5000, 70_000, 600_000, 1_500_000,
                    ]),
                    any::<bool>(),
                    any::<bool>(),
                    0usize..3,
                ),
                0..60,
            ),
        )
            .prop_map(|(objects, raw)| {
                // Lay each chunk's records end to end, in slot order, leaving gaps sometimes.
                // Chunks 0-1 of parts 0 and 1: the same chunk id in two parts is two files.
                let mut next = [0u64; 4];
                let mut slot = 0usize;
                let mut out: Vec<Extent> = Vec::new();
                for (chunk, gap, len, staged, dup, direct_chunk) in raw {
                    if dup && !out.is_empty() {
                        let mut again = out[out.len() / 2];
                        again.slot = slot;
                        slot += again.len.next_multiple_of(64);
                        out.push(again);
                        continue;
                    }
                    let c = usize::from(chunk);
                    let offset = next[c] + if gap % 4 == 0 { gap * 37 } else { 0 };
                    next[c] = offset + len as u64;
                    let object = chunk == 3;
                    out.push(Extent {
                        chunk: ChunkKey {
                            part: u32::from(chunk / 2),
                            chunk: chunk % 2,
                        },
                        offset,
                        len,
                        staged,
                        direct: !object && usize::from(chunk) == direct_chunk,
                        slot,
                        rule: if object { objects } else { Coalesce::LOCAL },
                    });
                    slot += len.next_multiple_of(64);
                }
                out
            })
    }

    fn object_rule() -> impl Strategy<Value = Coalesce> {
        (
            prop::sample::select(vec![0u64, 1, 100, 8192, 1 << 20]),
            prop::sample::select(vec![4096u64, 65_536, 1 << 20, 8 << 20]),
        )
            .prop_map(|(gap, max)| Coalesce::objects(gap, max))
    }

    /// The byte at `pos` of a chunk's file.
    fn byte(chunk: ChunkKey, pos: u64) -> u8 {
        (pos.wrapping_mul(31) ^ u64::from(chunk.chunk) ^ (u64::from(chunk.part) << 3)) as u8
    }

    proptest! {
        #[test]
        fn every_byte_lands_once_aligned_and_in_file_order(xs in extents()) {
            let p = plan(&xs);
            let rule = |op: &Op| {
                xs.iter().find(|x| x.chunk == op.chunk && x.len > 0).map_or(Coalesce::LOCAL, |x| x.rule)
            };
            // Every op's pieces are consecutive, in range, and cover at least `need`; ops are
            // in file order.
            let mut next_piece = 0;
            for (k, op) in p.ops.iter().enumerate() {
                prop_assert_eq!(op.pieces.start, next_piece);
                next_piece = op.pieces.end;
                let r = rule(op);
                let pieces = &p.pieces[op.pieces.clone()];
                let len: usize = pieces.iter().map(|x| x.len).sum();
                prop_assert!(op.need <= len && len as u64 <= r.max_bytes);
                // By file, then offset (a repeat is read once, so nothing goes back).
                if k > 0 {
                    let prev = &p.ops[k - 1];
                    prop_assert!((prev.chunk, prev.direct) <= (op.chunk, op.direct));
                    prop_assert!((prev.chunk, prev.direct) < (op.chunk, op.direct) || prev.offset < op.offset || (op.direct && prev.offset == op.offset));
                }
                if op.direct {
                    prop_assert_eq!(op.offset % DIRECT_ALIGN as u64, 0);
                    prop_assert_eq!(len % DIRECT_ALIGN, 0);
                    for x in pieces {
                        prop_assert_eq!(x.buf, STAGING);
                        prop_assert_eq!(x.at % DIRECT_ALIGN, 0);
                    }
                } else {
                    prop_assert_eq!(op.need, len);
                    prop_assert!(pieces.len() <= r.max_pieces);
                    // Gaps only within the rule's gap, never first or last.
                    for (j, x) in pieces.iter().enumerate() {
                        if x.buf == SKIP {
                            prop_assert!(x.len as u64 <= r.gap_bytes && x.len > 0);
                            prop_assert!(j > 0 && j + 1 < pieces.len());
                        }
                    }
                }
            }
            prop_assert_eq!(next_piece, p.pieces.len());
            // No byte of a file is read twice but in adjacent O_DIRECT blocks: a record asked
            // for twice is read once.
            let mut read: Vec<(ChunkKey, bool, u64, u64)> = p.ops.iter().filter(|o| !o.direct).map(|o| {
                let len: usize = p.pieces[o.pieces.clone()].iter().map(|x| x.len).sum();
                (o.chunk, o.direct, o.offset, o.offset + len as u64)
            }).collect();
            read.sort();
            for w in read.windows(2) {
                prop_assert!((w[0].0, w[0].1) != (w[1].0, w[1].1) || w[0].3 <= w[1].2, "read twice {:?}", w);
            }
            // Destination ranges never overlap (staging, and the slab's slots).
            let mut dsts: Vec<(usize, usize, usize)> = p.pieces.iter().filter(|x| x.buf != SKIP).map(|x| (x.buf, x.at, x.at + x.len)).collect();
            dsts.sort();
            for w in dsts.windows(2) {
                prop_assert!(w[0].0 != w[1].0 || w[0].2 <= w[1].1, "overlap {:?}", w);
            }
            for x in p.pieces.iter().filter(|x| x.buf == STAGING) {
                prop_assert!(x.at + x.len <= p.staging_len);
            }
            // Against a plain model: read every op (each file's bytes are `byte`), scatter it
            // as planned; every non-empty extent then finds its own bytes where it lands.
            let out_len = xs.iter().map(|x| x.slot + x.len).max().unwrap_or(0);
            let mut bufs = [vec![0u8; out_len], vec![0u8; p.staging_len]];
            let mut written = [vec![0u8; out_len], vec![0u8; p.staging_len]];
            for op in &p.ops {
                let mut file = op.offset;
                for pc in &p.pieces[op.pieces.clone()] {
                    if pc.buf != SKIP {
                        for k in 0..pc.len {
                            bufs[pc.buf][pc.at + k] = byte(op.chunk, file + k as u64);
                            written[pc.buf][pc.at + k] += 1;
                        }
                    }
                    file += pc.len as u64;
                }
            }
            prop_assert!(written.iter().flatten().all(|&n| n <= 1));
            for (i, x) in xs.iter().enumerate() {
                let Some(l) = p.landing[i] else {
                    prop_assert_eq!(x.len, 0);
                    continue;
                };
                for k in 0..x.len {
                    prop_assert_eq!(bufs[l.buf][l.at + k], byte(x.chunk, x.offset + k as u64), "extent {} {:?} at {:?}", i, x, l);
                    prop_assert_eq!(written[l.buf][l.at + k], 1);
                }
                // A raw record lands in its slot, or a repeat in its first copy's.
                if !x.direct && !x.staged {
                    let same = |y: &Extent| (y.chunk, y.offset, y.len) == (x.chunk, x.offset, x.len);
                    let first = xs.iter().any(|y| same(y) && l == Landing { buf: OUT, at: y.slot });
                    prop_assert!(first, "extent {} {:?} at {:?}", i, x, l);
                }
                if x.staged && !x.direct {
                    prop_assert_eq!(l.at % SLOT_ALIGN, 0);
                }
            }
        }
    }

    /// Local files: touching records share a read, anything apart does not; objects: records
    /// within the gap share a request, the gap read into a dropped piece.
    #[test]
    fn local_and_object_rules() {
        let x = |chunk: u16, offset: u64, len: usize, slot: usize, object: bool| Extent {
            chunk: ChunkKey { part: 0, chunk },
            offset,
            len,
            staged: false,
            direct: false,
            slot,
            rule: match object {
                true => Coalesce::objects(8192, 8 << 20),
                false => Coalesce::LOCAL,
            },
        };
        let local = [
            x(0, 0, 100, 0, false),
            x(0, 100, 100, 128, false),
            x(0, 300, 10, 256, false),
        ];
        let p = plan(&local);
        assert_eq!(p.ops.len(), 2);
        let remote = [
            x(1, 0, 100, 0, true),
            x(1, 100, 100, 128, true),
            x(1, 300, 10, 256, true),
            x(1, 20_000, 1, 320, true),
        ];
        let p = plan(&remote);
        assert_eq!(
            p.ops.iter().map(|o| (o.offset, o.need)).collect::<Vec<_>>(),
            [(0, 310), (20_000, 1)]
        );
        assert_eq!(
            p.pieces[2],
            Piece {
                buf: SKIP,
                at: 0,
                len: 100
            }
        );
        // A record asked for twice is one request (each copy of it and the one after used
        // to start a request of their own), its repeat landing in the first copy's slot.
        let twice = [
            x(1, 0, 100, 0, true),
            x(1, 100, 100, 128, true),
            x(1, 0, 100, 256, true),
        ];
        let p = plan(&twice);
        assert_eq!(
            p.ops.iter().map(|o| (o.offset, o.need)).collect::<Vec<_>>(),
            [(0, 200)]
        );
        assert_eq!(p.landing[2], p.landing[0]);
    }
}
