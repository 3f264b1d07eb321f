//! Planning a batch's reads: a pure function from the stored extents of its records to
//! coalesced, aligned reads and the place each record lands. No I/O, no snapshot: the property
//! test below checks it alone.

use crate::io::job::Piece;
use std::ops::Range;

/// Largest coalesced read.
pub(crate) const MAX_OP_BYTES: usize = 1 << 20;
/// Most records in one coalesced read.
pub(crate) const MAX_OP_PIECES: usize = 256;
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
/// `at`.
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

/// Plans the reads of `extents`: sorted by (part, chunk, offset), adjacent records coalesced into one
/// read of at most [`MAX_OP_BYTES`] and [`MAX_OP_PIECES`] records; raw records read straight
/// into their slots, deflate records into 64-byte-aligned staging; direct records as
/// 4 KiB-aligned spans into 4 KiB-aligned staging, spans that touch merged. Duplicated records
/// are read once per occurrence.
pub(crate) fn plan(extents: &[Extent]) -> Plan {
    let mut order: Vec<usize> = (0..extents.len())
        .filter(|&i| extents.get(i).is_some_and(|x| x.len > 0))
        .collect();
    order.sort_unstable_by_key(|&i| extents.get(i).map(|x| (x.chunk, x.direct, x.offset)));

    let mut p = Plan {
        landing: vec![None; extents.len()],
        ..Plan::default()
    };
    // The chunk and mode of the last op, and the file offset where it ends.
    let mut current: Option<(ChunkKey, bool)> = None;
    let mut op_end = 0u64;
    for &i in &order {
        let Some(x) = extents.get(i) else { continue };
        let end = x.offset + x.len as u64;
        let same_file = current == Some((x.chunk, x.direct));
        current = Some((x.chunk, x.direct));
        if x.direct {
            let a = DIRECT_ALIGN as u64;
            let start = x.offset / a * a;
            let span_end = end.next_multiple_of(a);
            let extend = same_file
                && start <= op_end
                && p.ops
                    .last()
                    .is_some_and(|op| (span_end - op.offset) as usize <= MAX_OP_BYTES);
            if let (true, Some(op), Some(piece)) = (extend, p.ops.last_mut(), p.pieces.last_mut()) {
                if span_end > op_end {
                    let grow = (span_end - op_end) as usize;
                    piece.len += grow;
                    p.staging_len += grow;
                    op_end = span_end;
                }
                op.need = op.need.max((end - op.offset) as usize);
                set(
                    &mut p.landing,
                    i,
                    STAGING,
                    piece.at + (x.offset - op.offset) as usize,
                );
            } else {
                let span = (span_end - start) as usize;
                p.staging_len = p.staging_len.next_multiple_of(DIRECT_ALIGN);
                p.pieces.push(Piece {
                    buf: STAGING,
                    at: p.staging_len,
                    len: span,
                });
                p.ops.push(Op {
                    chunk: x.chunk,
                    direct: true,
                    offset: start,
                    need: (end - start) as usize,
                    pieces: p.pieces.len() - 1..p.pieces.len(),
                });
                set(
                    &mut p.landing,
                    i,
                    STAGING,
                    p.staging_len + (x.offset - start) as usize,
                );
                p.staging_len += span;
                op_end = span_end;
            }
            continue;
        }
        let (buf, at) = if x.staged {
            let at = p.staging_len.next_multiple_of(SLOT_ALIGN);
            p.staging_len = at + x.len;
            (STAGING, at)
        } else {
            (OUT, x.slot)
        };
        set(&mut p.landing, i, buf, at);
        let extend = same_file
            && op_end == x.offset
            && p.ops.last().is_some_and(|op| {
                op.pieces.len() < MAX_OP_PIECES && op.need + x.len <= MAX_OP_BYTES
            });
        p.pieces.push(Piece {
            buf,
            at,
            len: x.len,
        });
        let n = p.pieces.len();
        match (extend, p.ops.last_mut()) {
            (true, Some(op)) => {
                op.pieces.end = n;
                op.need += x.len;
            }
            _ => p.ops.push(Op {
                chunk: x.chunk,
                direct: false,
                offset: x.offset,
                need: x.len,
                pieces: n - 1..n,
            }),
        }
        op_end = end;
    }
    p
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
    /// snapshot's are) and duplicates (a batch may ask for a record twice).
    fn extents() -> impl Strategy<Value = Vec<Extent>> {
        prop::collection::vec(
            (
                0u16..4,
                0u64..64,
                prop::sample::select(vec![
                    0usize, 1, 63, 64, 100, 4095, 4096, 5000, 70_000, 600_000,
                ]),
                any::<bool>(),
                any::<bool>(),
                0usize..3,
            ),
            0..60,
        )
        .prop_map(|raw| {
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
                out.push(Extent {
                    chunk: ChunkKey {
                        part: u32::from(chunk / 2),
                        chunk: chunk % 2,
                    },
                    offset,
                    len,
                    staged,
                    direct: usize::from(chunk) == direct_chunk,
                    slot,
                });
                slot += len.next_multiple_of(64);
            }
            out
        })
    }

    proptest! {
        #[test]
        fn every_byte_lands_once_aligned_and_in_file_order(xs in extents()) {
            let p = plan(&xs);
            // Every op's pieces are consecutive, in range, and cover at least `need`.
            let mut next_piece = 0;
            for op in &p.ops {
                prop_assert_eq!(op.pieces.start, next_piece);
                next_piece = op.pieces.end;
                let len: usize = p.pieces[op.pieces.clone()].iter().map(|x| x.len).sum();
                prop_assert!(op.need <= len && len <= MAX_OP_BYTES.max(op.need));
                if op.direct {
                    prop_assert_eq!(op.offset % DIRECT_ALIGN as u64, 0);
                    prop_assert_eq!(len % DIRECT_ALIGN, 0);
                    for x in &p.pieces[op.pieces.clone()] {
                        prop_assert_eq!(x.buf, STAGING);
                        prop_assert_eq!(x.at % DIRECT_ALIGN, 0);
                    }
                } else {
                    prop_assert!(op.pieces.len() <= MAX_OP_PIECES);
                }
            }
            prop_assert_eq!(next_piece, p.pieces.len());
            // Destination ranges never overlap (staging, and the slab's slots).
            let mut dsts: Vec<(usize, usize, usize)> = p.pieces.iter().map(|x| (x.buf, x.at, x.at + x.len)).collect();
            dsts.sort();
            for w in dsts.windows(2) {
                prop_assert!(w[0].0 != w[1].0 || w[0].2 <= w[1].1, "overlap {:?}", w);
            }
            for x in p.pieces.iter().filter(|x| x.buf == STAGING) {
                prop_assert!(x.at + x.len <= p.staging_len);
            }
            // Every non-empty extent lands exactly where the bytes of its file range arrive.
            for (i, x) in xs.iter().enumerate() {
                let Some(l) = p.landing[i] else {
                    prop_assert_eq!(x.len, 0);
                    continue;
                };
                let hits: Vec<&Op> = p.ops.iter().filter(|op| {
                    let pieces = &p.pieces[op.pieces.clone()];
                    let mut file = op.offset;
                    pieces.iter().any(|pc| {
                        let hit = pc.buf == l.buf && file <= x.offset
                            && x.offset + x.len as u64 <= file + pc.len as u64
                            && l.at == pc.at + (x.offset - file) as usize
                            && op.chunk == x.chunk && op.direct == x.direct;
                        file += pc.len as u64;
                        hit
                    })
                }).collect();
                prop_assert_eq!(hits.len(), 1, "extent {} {:?} lands {:?}", i, x, l);
                if !x.direct && !x.staged {
                    prop_assert_eq!(l, Landing { buf: OUT, at: x.slot });
                }
                if x.staged && !x.direct {
                    prop_assert_eq!(l.at % SLOT_ALIGN, 0);
                }
            }
        }
    }
}
