//! Finishing a batch once its stored bytes are in memory: verify each record's CRC32C, then
//! inflate or copy it into its slot of the slab. Big batches are cut into pieces that the
//! calling thread and the finishing pool's helpers take in turn.

use super::resolved::{Resolved, Want};
use crate::error::{Error, Result};
use crate::format::codec;
use crate::format::dtype::StoredCodec;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

thread_local! {
    static DECOMPRESSOR: std::cell::RefCell<libdeflater::Decompressor> =
        std::cell::RefCell::new(libdeflater::Decompressor::new());
    /// One zstd context per finishing thread (`None` if zstd could not allocate one), and the
    /// scratch a record without a slot decodes into to be checked.
    static ZSTD: std::cell::RefCell<(Option<codec::ZstdDecoder>, Vec<u8>)> =
        std::cell::RefCell::new((codec::ZstdDecoder::new(), Vec::new()));
}

/// How many values ahead the loop prefetches record bytes.
const DATA_AHEAD: usize = 8;
/// Bytes of each record the loop prefetches, every line of them: the hardware prefetcher does
/// not follow a 1 KiB record read from a random place (4 lines of each, 3 ahead, left the CRC
/// waiting on lines 5 to 16); past this it follows a long record.
pub(crate) const DATA_BYTES: usize = 1024;

/// Work for one record after its bytes are in memory: verify, then inflate or copy into `dst`
/// (an `(offset, len)` in the output slab) if it has one.
pub(crate) struct Task<'a> {
    pub(crate) w: &'a Want,
    pub(crate) stored: &'a [u8],
    pub(crate) dst: Option<(usize, usize)>,
}

/// Bytes of checksum and copy work per thread below which a batch is finished on one thread
/// (inflating counts 4 per output byte).
const PAR_WORK: usize = 2 << 20;
/// Bytes of work in one piece: about 0.1 ms of inflating, or 16 records of 4 KiB. Small enough
/// that a helper woken late, or a thread the host deschedules, holds up the batch by one piece
/// at most; big enough that taking a piece (an atomic add and an uncontended lock) is noise.
const PIECE_WORK: usize = 256 << 10;

impl Task<'_> {
    fn work(&self, verify: bool) -> usize {
        let check = if verify { self.stored.len() } else { 0 };
        let out = match (self.dst, self.w.e.codec) {
            (Some((_, len)), StoredCodec::Raw) => len,
            (Some((_, len)), _) => 4 * len,
            (None, _) => 0,
        };
        check + out
    }
}

/// Checks `bytes` against `w`'s entry: its stored bytes, or for zstd its logical ones.
pub(crate) fn checksum(res: &Resolved<'_>, w: &Want, bytes: &[u8]) -> Result<()> {
    let actual = crate::checksum::crc32c(bytes);
    if actual == w.e.data_crc {
        return Ok(());
    }
    Err(Error::ChecksumMismatch {
        path: res.chunk_path(w),
        field: res.field_name(w),
        index: w.index,
        offset: w.e.offset,
        expected: w.e.data_crc,
        actual,
    })
}

/// Inflates `stored` into exactly `out.len()` bytes.
fn inflate(res: &Resolved<'_>, w: &Want, stored: &[u8], out: &mut [u8]) -> Result<()> {
    DECOMPRESSOR
        .with(|d| codec::inflate(&mut d.borrow_mut(), stored, out))
        .map_err(|reason| Error::Decompress {
            path: res.chunk_path(w),
            field: res.field_name(w),
            index: w.index,
            offset: w.e.offset,
            reason,
        })
}

/// Decodes the zstd frame `stored` into exactly `out.len()` bytes, then (if `verify`) checks the
/// CRC32C of those logical bytes: a zstd entry's checksum covers what the record decodes to, so a
/// frame decoded with the wrong dictionary, or a damaged frame that still decodes, is caught.
fn unzstd(
    res: &Resolved<'_>,
    w: &Want,
    stored: &[u8],
    out: Option<&mut [u8]>,
    verify: bool,
) -> Result<()> {
    let dictionary = res.dictionary(w)?;
    let decompress = |reason: String| Error::Decompress {
        path: res.chunk_path(w),
        field: res.field_name(w),
        index: w.index,
        offset: w.e.offset,
        reason,
    };
    ZSTD.with(|z| {
        let (decoder, scratch) = &mut *z.borrow_mut();
        let decoder = decoder
            .as_mut()
            .ok_or_else(|| decompress("zstd could not allocate a context".to_string()))?;
        let out = match out {
            Some(out) => out,
            None if verify => {
                scratch.resize(w.e.logical_len as usize, 0);
                scratch.as_mut_slice()
            }
            None => return Ok(()),
        };
        decoder
            .decode(dictionary.map(|d| &**d), stored, out)
            .map_err(decompress)?;
        if verify {
            checksum(res, w, out)?;
        }
        Ok(())
    })
}

/// Runs `tasks` (their `dst`s ascending) on this thread, prefetching the stored bytes of the
/// records a few ahead: random records are cache misses, and this overlaps them. `out` is the
/// part of the slab starting at `base`. Stops at the first failing record.
fn run_tasks(
    res: &Resolved<'_>,
    tasks: &[Task<'_>],
    out: &mut [u8],
    base: usize,
    verify: bool,
) -> Result<()> {
    let prefetch = |k: usize| {
        if let Some(t) = tasks.get(k) {
            crate::io::prefetch_lines(t.stored, DATA_BYTES);
        }
    };
    for k in 0..DATA_AHEAD {
        prefetch(k);
    }
    for (k, t) in tasks.iter().enumerate() {
        prefetch(k + DATA_AHEAD);
        let dst = match t.dst {
            Some((at, len)) => Some(
                at.checked_sub(base)
                    .and_then(|a| out.get_mut(a..a + len))
                    .ok_or_else(|| res.misplaced(t.w, "its slot"))?,
            ),
            None => None,
        };
        match (t.w.e.codec, dst) {
            (StoredCodec::Zstd | StoredCodec::ZstdDict(_), dst) => {
                unzstd(res, t.w, t.stored, dst, verify)?
            }
            (codec, dst) => {
                if verify {
                    checksum(res, t.w, t.stored)?;
                }
                match (codec, dst) {
                    (StoredCodec::Deflate, Some(dst)) => inflate(res, t.w, t.stored, dst)?,
                    (_, Some(dst)) => dst.copy_from_slice(t.stored),
                    (_, None) => {}
                }
            }
        }
    }
    Ok(())
}

/// The finishing pool and the count of threads finishing batches right now.
#[derive(Debug)]
pub(crate) struct Finisher {
    /// Threads that finish one batch at most, and threads finishing batches at once before no
    /// helper is asked for.
    threads: usize,
    /// `threads` − 1 helpers (a caller always works too), started on first use; `None` if they
    /// could not be.
    pool: OnceLock<Option<rayon::ThreadPool>>,
    /// Threads finishing batches right now: callers, and helpers from the moment they are
    /// asked for. Helpers are asked for only while this is below the thread count, so
    /// concurrent gathers (a loader's workers, `bench gather --threads N`) do not oversubscribe
    /// the cores: each then finishes its own batches, as N plain loops would.
    busy: AtomicUsize,
}

impl Finisher {
    /// A finisher for `threads` threads at most (at least 1: the caller).
    pub(crate) fn new(threads: usize) -> Finisher {
        Finisher {
            threads: threads.max(1),
            pool: OnceLock::new(),
            busy: AtomicUsize::new(0),
        }
    }

    fn pool(&self) -> Option<&rayon::ThreadPool> {
        self.pool
            .get_or_init(|| {
                match rayon::ThreadPoolBuilder::new()
                    .num_threads(self.threads.saturating_sub(1).max(1))
                    .thread_name(|i| format!("zrecord-finish-{i}"))
                    .build()
                {
                    Ok(p) => Some(p),
                    Err(e) => {
                        tracing::warn!(
                            "no finishing pool ({e}): batches are finished on their caller"
                        );
                        None
                    }
                }
            })
            .as_ref()
    }

    /// Reserves up to `wanted` helpers while fewer than `threads` threads are busy; each
    /// reserved helper is released by dropping one [`Busy`].
    fn reserve(&self, wanted: usize) -> usize {
        let mut got = 0;
        let _ = self
            .busy
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |busy| {
                got = wanted.min(self.threads.saturating_sub(busy));
                Some(busy + got)
            });
        got
    }

    fn enter(&self) -> Busy<'_> {
        self.busy.fetch_add(1, Ordering::AcqRel);
        Busy(&self.busy)
    }
}

/// One thread counted busy until dropped.
struct Busy<'a>(&'a AtomicUsize);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A run of tasks with its part of the slab, and what became of it.
enum Piece<'a, 'b> {
    Todo {
        tasks: &'a [Task<'b>],
        out: &'a mut [u8],
        base: usize,
    },
    Done(Result<()>),
}

/// The pieces of one batch, taken in order by whoever asks next.
struct Pieces<'a, 'b> {
    slots: Vec<Mutex<Piece<'a, 'b>>>,
    next: AtomicUsize,
    /// The lowest piece that failed (`usize::MAX`: none); later pieces are skipped.
    failed: AtomicUsize,
}

impl Pieces<'_, '_> {
    /// Takes and runs pieces until none is left.
    fn drain(&self, res: &Resolved<'_>, verify: bool) {
        loop {
            let k = self.next.fetch_add(1, Ordering::Relaxed);
            let Some(slot) = self.slots.get(k) else {
                return;
            };
            if k > self.failed.load(Ordering::Relaxed) {
                continue;
            }
            let piece = std::mem::replace(
                &mut *slot.lock().unwrap_or_else(PoisonError::into_inner),
                Piece::Done(Ok(())),
            );
            let Piece::Todo { tasks, out, base } = piece else {
                continue;
            };
            let r = run_tasks(res, tasks, out, base, verify);
            if r.is_err() {
                self.failed.fetch_min(k, Ordering::Relaxed);
            }
            *slot.lock().unwrap_or_else(PoisonError::into_inner) = Piece::Done(r);
        }
    }

    /// The first error in batch order, if any.
    fn result(self) -> Result<()> {
        for slot in self.slots {
            if let Piece::Done(Err(e)) = slot.into_inner().unwrap_or_else(PoisonError::into_inner) {
                return Err(e);
            }
        }
        Ok(())
    }
}

/// Runs `tasks` (their `dst`s ascending) over `out`, the batch's slab. A batch with enough work
/// for it to pay (a 256 × 64 KiB batch is 16 MiB of checksums: one core's memory bandwidth, not
/// the machine's; 256 × 4 KiB of deflate is 1 MiB to inflate) is cut into pieces that this
/// thread and the finishing pool's helpers, one per idle core, take in turn: this thread starts
/// at once, a helper joins when it wakes. Reports the error of the first failing record in batch
/// order.
pub(crate) fn run_parallel(
    fin: &Finisher,
    res: &Resolved<'_>,
    tasks: &[Task<'_>],
    out: &mut [u8],
    verify: bool,
) -> Result<()> {
    let _busy = fin.enter();
    let work: usize = tasks.iter().map(|t| t.work(verify)).sum();
    let wanted = (work / PAR_WORK).clamp(1, fin.threads);
    if wanted < 2 || tasks.len() < 2 {
        return run_tasks(res, tasks, out, 0, verify);
    }
    let Some(pool) = fin.pool() else {
        return run_tasks(res, tasks, out, 0, verify);
    };
    let helpers = fin.reserve(wanted - 1);
    if helpers == 0 {
        return run_tasks(res, tasks, out, 0, verify);
    }
    let pieces = cut(tasks, out, verify, work.div_ceil(PIECE_WORK));
    pool.in_place_scope(|scope| {
        for _ in 0..helpers {
            scope.spawn(|_| {
                let _reserved = Busy(&fin.busy);
                pieces.drain(res, verify);
            });
        }
        pieces.drain(res, verify);
    });
    pieces.result()
}

/// Cuts `tasks` into about `n` runs of equal work, and `out` at the first destination of each.
fn cut<'a, 'b>(tasks: &'a [Task<'b>], out: &'a mut [u8], verify: bool, n: usize) -> Pieces<'a, 'b> {
    let work: usize = tasks.iter().map(|t| t.work(verify)).sum();
    let share = work.div_ceil(n.max(1)).max(1);
    let mut cuts = vec![0usize];
    let mut acc = 0usize;
    for (k, t) in tasks.iter().enumerate() {
        if acc >= share * cuts.len() && k > cuts.last().copied().unwrap_or(0) {
            cuts.push(k);
        }
        acc += t.work(verify);
    }
    cuts.push(tasks.len());
    let out_len = out.len();
    let first_dst = |from: usize| {
        tasks
            .get(from..)
            .and_then(|rest| rest.iter().find_map(|t| t.dst.map(|(at, _)| at)))
            .unwrap_or(out_len)
            .min(out_len)
    };
    let mut slots = Vec::with_capacity(cuts.len());
    let mut rest: &mut [u8] = out;
    let mut rest_base = 0usize;
    for pair in cuts.windows(2) {
        let (Some(&a), Some(&b)) = (pair.first(), pair.get(1)) else {
            continue;
        };
        let end = if b == tasks.len() {
            out_len
        } else {
            first_dst(b)
        };
        let take = end.saturating_sub(rest_base).min(rest.len());
        let (mine, tail) = std::mem::take(&mut rest).split_at_mut(take);
        let len = mine.len();
        slots.push(Mutex::new(Piece::Todo {
            tasks: tasks.get(a..b).unwrap_or_default(),
            out: mine,
            base: rest_base,
        }));
        rest_base += len;
        rest = tail;
    }
    Pieces {
        slots,
        next: AtomicUsize::new(0),
        failed: AtomicUsize::new(usize::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::entry::Entry;

    /// `n` raw records of `len` bytes, with 64-byte slots laid end to end from `pad`.
    fn wants(n: usize, len: u32) -> Vec<Want> {
        (0..n)
            .map(|i| Want {
                field: 0,
                index: i as u64,
                part: 0,
                e: Entry {
                    physical_len: len,
                    logical_len: len,
                    ..Entry::EMPTY
                },
            })
            .collect()
    }

    #[test]
    fn pieces_tile_the_tasks_and_the_slab() {
        let pad = 24;
        let len = 1000usize;
        let slot = len.next_multiple_of(64);
        let ws = wants(100, len as u32);
        let stored = vec![7u8; len];
        let tasks: Vec<Task<'_>> = ws
            .iter()
            .enumerate()
            .map(|(i, w)| Task {
                w,
                stored: &stored,
                dst: Some((pad + i * slot, len)),
            })
            .collect();
        let mut out = vec![0u8; pad + 100 * slot + 40];
        let total = out.len();
        for n in [1, 2, 3, 7, 100, 1000] {
            let pieces = cut(&tasks, &mut out, true, n);
            assert!(pieces.slots.len() <= n.max(1), "{n}");
            let (mut next_task, mut next_byte) = (0usize, 0usize);
            for slot in &pieces.slots {
                let guard = slot.lock().unwrap();
                let Piece::Todo {
                    tasks: ts,
                    out,
                    base,
                } = &*guard
                else {
                    panic!("not todo");
                };
                assert!(!ts.is_empty());
                assert_eq!(*base, next_byte);
                // The piece's slice starts at or before its first destination and holds all
                // of its tasks' destinations.
                let first = ts[0].dst.unwrap().0;
                assert!(*base <= first);
                for t in ts.iter() {
                    let (at, l) = t.dst.unwrap();
                    assert!(at >= *base && at + l <= *base + out.len());
                }
                assert_eq!(ts[0].w.index as usize, next_task);
                next_task += ts.len();
                next_byte += out.len();
            }
            assert_eq!(next_task, tasks.len());
            assert_eq!(next_byte, total);
        }
    }
}
