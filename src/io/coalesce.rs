//! The one rule that merges a file's reads into fewer, larger ones, for every backend: local
//! files (touching reads only, [`Coalesce::LOCAL`]) and objects on a store (reads up to a gap
//! apart, under the request limit: [`Coalesce::objects`]). The read plan
//! (`store/read/plan.rs`) applies it once per batch; a backend executes the ops it gives, one
//! read (or range request) each, and merges nothing again. Offset table pages fetched on
//! demand (`store/paged.rs`) follow it too ([`Coalesce::pages`]). Pure: no I/O.

use std::ops::Range;

/// How reads of one file become ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Coalesce {
    /// Reads at most this many bytes apart share an op; the bytes between are read and
    /// dropped.
    pub(crate) gap_bytes: u64,
    /// The largest op, at least 1; a longer read is split into parts of this many bytes (the
    /// last one shorter).
    pub(crate) max_bytes: u64,
    /// Most destinations an op scatters into (one per read, one per gap), when reads scatter.
    pub(crate) max_pieces: usize,
}

impl Default for Coalesce {
    /// [`Coalesce::LOCAL`].
    fn default() -> Coalesce {
        Coalesce::LOCAL
    }
}

/// A part of a read that an op covers: bytes `range` of read `read` (an index into the reads
/// given to [`Coalesce::runs`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Part {
    pub(crate) read: usize,
    pub(crate) range: Range<u64>,
}

/// An op: bytes `range` of the file, covering `parts` (indices into [`Runs::parts`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    pub(crate) range: Range<u64>,
    pub(crate) parts: Range<usize>,
}

/// The ops of a file's reads and the parts they cover, in file order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Runs {
    pub(crate) runs: Vec<Run>,
    pub(crate) parts: Vec<Part>,
}

impl Coalesce {
    /// Local files: touching reads share an op of at most 1 MiB and 256 destinations (a gap
    /// would cost a read of page cache or disk for nothing).
    pub(crate) const LOCAL: Coalesce = Coalesce {
        gap_bytes: 0,
        max_bytes: 1 << 20,
        max_pieces: 256,
    };

    /// Pages of an offset table (`store/paged.rs`): touching reads share one of at most
    /// `max_bytes` (a source's largest read), landing in one buffer.
    pub(crate) fn pages(max_bytes: u64) -> Coalesce {
        Coalesce {
            gap_bytes: 0,
            max_bytes: max_bytes.max(1),
            max_pieces: usize::MAX,
        }
    }

    /// Objects on a store: reads up to `gap_bytes` apart share a range request of at most
    /// `max_bytes` (`RemoteConfig::coalesce_gap`, `RemoteConfig::max_request`); a request
    /// scatters into any number of destinations.
    #[cfg(feature = "remote")]
    pub(crate) fn objects(gap_bytes: u64, max_bytes: u64) -> Coalesce {
        Coalesce {
            gap_bytes,
            max_bytes: max_bytes.max(1),
            max_pieces: usize::MAX,
        }
    }

    /// The rule. Merges `reads` (of one file, sorted by start) into runs, greedily in order
    /// (runs follow the reads: parts come out in the reads' order, so the runs are in file
    /// order but for a read overlapping an earlier one that was split):
    /// a read joins the last run if it starts at most `gap_bytes` past its end and the run
    /// stays within `max_bytes` (and `max_pieces`); else it starts a run. A read longer than
    /// `max_bytes` is split into parts of `max_bytes` first. Empty reads get no part.
    ///
    /// `scatter`: each read lands in a destination of its own, so overlapping reads never share
    /// a run (each would cost a request of its own: the read plan hands a record asked for
    /// twice over once), and a gap is a destination too. Otherwise a run lands in one
    /// contiguous destination, and overlapping reads share it.
    ///
    /// Appends to `out`; the runs already there are never extended.
    pub(crate) fn runs(&self, reads: &[Range<u64>], scatter: bool, out: &mut Runs) {
        let max = self.max_bytes.max(1);
        let first = out.runs.len();
        // Destinations of the last run of this call.
        let mut pieces = 0usize;
        for (read, r) in reads.iter().enumerate() {
            let mut at = r.start;
            while at < r.end {
                let end = r.end.min(at.saturating_add(max));
                let last = out.runs.len().checked_sub(1).filter(|&i| i >= first);
                let gap = last
                    .and_then(|i| out.runs.get(i))
                    .map_or(0, |run| at.saturating_sub(run.range.end));
                let more = match scatter {
                    true => 1 + usize::from(gap > 0),
                    false => 0,
                };
                let joins = last.and_then(|i| out.runs.get(i)).is_some_and(|run| {
                    at >= run.range.start
                        && at <= run.range.end.saturating_add(self.gap_bytes)
                        && (!scatter || at >= run.range.end)
                        && end.max(run.range.end) - run.range.start <= max
                        && pieces.saturating_add(more) <= self.max_pieces
                });
                out.parts.push(Part {
                    read,
                    range: at..end,
                });
                let n = out.parts.len();
                match (joins, out.runs.last_mut()) {
                    (true, Some(run)) => {
                        run.range.end = run.range.end.max(end);
                        run.parts.end = n;
                        pieces += more;
                    }
                    _ => {
                        out.runs.push(Run {
                            range: at..end,
                            parts: n - 1..n,
                        });
                        pieces = 1;
                    }
                }
                at = end;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::indexing_slicing, clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    /// Sorted reads of one file: touching, apart by small and large gaps, overlapping (a
    /// record asked for twice, or two records in one aligned block), some empty.
    fn reads() -> impl Strategy<Value = Vec<Range<u64>>> {
        prop::collection::vec(
            (
                prop::sample::select(vec![0u64, 0, 0, 1, 100, 4096, 8192, 8193, 100_000]),
                prop::sample::select(vec![0u64, 1, 10, 64, 1000, 4096, 8192, 65_536, 200_000]),
                any::<bool>(),
            ),
            0..80,
        )
        .prop_map(|raw| {
            let mut out: Vec<Range<u64>> = Vec::new();
            let mut next = 0u64;
            for (gap, len, back) in raw {
                // Back: start inside the previous read (overlap), else after a gap.
                let start = match (back, out.last()) {
                    (true, Some(p)) => p.start + (p.end - p.start) / 2,
                    _ => next + gap,
                };
                out.push(start..start + len);
                next = next.max(start + len);
            }
            out
        })
    }

    fn rule() -> impl Strategy<Value = Coalesce> {
        (
            prop::sample::select(vec![0u64, 1, 4096, 8192, 1 << 20]),
            prop::sample::select(vec![1000u64, 4096, 65_536, 1 << 20]),
            prop::sample::select(vec![1usize, 2, 3, 256, usize::MAX]),
        )
            .prop_map(|(gap_bytes, max_bytes, max_pieces)| Coalesce {
                gap_bytes,
                max_bytes,
                max_pieces,
            })
    }

    /// Destinations a run scatters into: one per part, one per gap between parts.
    fn destinations(runs: &Runs, run: &Run) -> usize {
        let parts = &runs.parts[run.parts.clone()];
        let gaps = parts
            .windows(2)
            .filter(|w| w[1].range.start > w[0].range.end)
            .count();
        parts.len() + gaps
    }

    proptest! {
        /// Against a plain model: every read covered exactly once, in order; no run over the
        /// limits; parts merged only within the gap; and greedy: no run could have taken the
        /// next one's first part.
        #[test]
        fn runs_cover_reads_within_limits(xs in reads(), rule in rule(), scatter in any::<bool>()) {
            let mut out = Runs::default();
            // Something already there is left alone.
            out.runs.push(Run { range: 0..1, parts: 0..0 });
            rule.runs(&xs, scatter, &mut out);
            prop_assert_eq!(&out.runs[0], &Run { range: 0..1, parts: 0..0 });
            let runs = &out.runs[1..];

            // Runs: consecutive parts, in file order (by start), each within its range.
            let mut next_part = 0;
            for (k, run) in runs.iter().enumerate() {
                prop_assert_eq!(run.parts.start, next_part);
                prop_assert!(run.parts.end > run.parts.start);
                next_part = run.parts.end;
                let parts = &out.parts[run.parts.clone()];
                prop_assert_eq!(run.range.start, parts[0].range.start);
                prop_assert_eq!(run.range.end, parts.iter().map(|p| p.range.end).max().unwrap());
                prop_assert!(run.range.end - run.range.start <= rule.max_bytes.max(1));
                if scatter {
                    prop_assert!(destinations(&out, run) <= rule.max_pieces.max(1));
                }
                // Merged only within the gap; scattered parts never overlap.
                let mut end = parts[0].range.end;
                for p in &parts[1..] {
                    prop_assert!(p.range.start >= run.range.start);
                    prop_assert!(p.range.start <= end + rule.gap_bytes, "{:?} after {}", p, end);
                    if scatter {
                        prop_assert!(p.range.start >= end);
                    }
                    end = end.max(p.range.end);
                }
                // In file order, but for a read that overlaps one read before it (a record
                // asked for twice, a split one's repeat starts a run of its own).
                if k > 0 {
                    let r = parts[0].read;
                    let repeat = xs[..r].iter().any(|x| x.end > xs[r].start);
                    prop_assert!(runs[k - 1].range.start <= run.range.start || repeat);
                }
            }
            prop_assert_eq!(next_part, out.parts.len());

            // Parts: in read order; each read's parts, joined, are the read exactly.
            let mut at = vec![None; xs.len()];
            let mut last_read = 0;
            for p in &out.parts {
                prop_assert!(p.read >= last_read);
                last_read = p.read;
                prop_assert!(p.range.start < p.range.end);
                let want = at[p.read].unwrap_or(xs[p.read].start);
                prop_assert_eq!(p.range.start, want);
                at[p.read] = Some(p.range.end);
            }
            for (i, x) in xs.iter().enumerate() {
                prop_assert_eq!(at[i].unwrap_or(x.start), x.end.max(x.start));
            }

            // Greedy: a run ends only where the next part could not join it.
            for w in runs.windows(2) {
                let (a, b) = (&w[0], &w[1]);
                let p = &out.parts[b.parts.start];
                let before = p.range.start < a.range.start;
                let too_far = p.range.start > a.range.end + rule.gap_bytes;
                let overlaps = scatter && p.range.start < a.range.end;
                let too_long = p.range.end.max(a.range.end) - a.range.start > rule.max_bytes.max(1);
                let gap_piece = usize::from(p.range.start > a.range.end);
                let too_many = scatter && destinations(&out, a) + 1 + gap_piece > rule.max_pieces;
                prop_assert!(before || too_far || overlaps || too_long || too_many, "{:?} could join {:?}", p, a);
            }
        }
    }

    #[test]
    fn local_merges_touching_reads_only() {
        let mut out = Runs::default();
        Coalesce::LOCAL.runs(&[0..10, 10..20, 21..30], true, &mut out);
        assert_eq!(out.runs.len(), 2);
        assert_eq!(out.runs[0].range, 0..20);
        let mut out = Runs::default();
        Coalesce::objects(8192, 8 << 20).runs(
            &[0..10, 10..20, 8000..9000, 30_000..30_001],
            true,
            &mut out,
        );
        assert_eq!(
            out.runs.iter().map(|r| r.range.clone()).collect::<Vec<_>>(),
            [0..9000, 30_000..30_001]
        );
        let mut out = Runs::default();
        Coalesce::objects(0, 4096).runs(&[0..10_000, 20_000..20_001], true, &mut out);
        assert_eq!(
            out.runs.iter().map(|r| r.range.clone()).collect::<Vec<_>>(),
            [0..4096, 4096..8192, 8192..10_000, 20_000..20_001]
        );
    }
}
