//! The I/O layer: the only place `unsafe` lives.
//!
//! - `job`: a batch of positioned reads (`ReadJob`) that owns every byte its reads touch.
//! - `coalesce`: the one rule that merges a file's reads into fewer, larger ones (pure).
//! - `uring`: the io_uring ring thread.
//! - `psync`: the `preadv` thread-pool fallback.
//! - `mmap`: read-only mappings of committed file prefixes (offset tables, and chunks for the
//!   zero-copy path), with `mincore` residency checks.
//! - `fs`: file-system calls with the durability rules of the commit protocol, and the
//!   process's descriptor and mapping limits.
//! - `vfs`: the seam every file operation of the writer and of recovery goes through, with the
//!   real file system (`vfs::StdFs`); the simulated and fault-injecting ones the crash and
//!   I/O-error tests use live outside the product, in the `zrecord-testing` crate (`testing/`).
//! - `pool`: the worker threads async gathers run on (page faults, checksums, inflate).
//! - `lock`: exclusive file locks that a child of `fork()` or of a spawn never holds.
//! - `jpeg` (feature `images`): JPEG decoding through libjpeg-turbo's C library, whole images
//!   or only a crop's rows and columns.
//! - `fork`: the process id, and `ForkLocal`, one value per process: what `fork()`'s child must
//!   make again (threads, rings, runtimes, registries, budgets) instead of using its parent's.
//!
//! Which of these serves a read is the read engine's business (`store/read/`).

pub(crate) mod coalesce;
pub(crate) mod fork;
pub(crate) mod fs;
pub(crate) mod job;
#[cfg(feature = "images")]
pub(crate) mod jpeg;
pub(crate) mod lock;
pub(crate) mod mmap;
pub(crate) mod pool;
pub(crate) mod psync;
#[cfg(feature = "uring")]
pub(crate) mod uring;
pub(crate) mod vfs;

/// Hints the CPU to bring the cache line at `ptr` into L1. Never faults, whatever `ptr` is:
/// the batch loops use it to overlap the memory latency of random records and table entries.
#[inline(always)]
pub(crate) fn prefetch(ptr: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` is a hint that never faults, for any address; SSE is part of the
    // x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(ptr.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ptr;
}

/// Hints the CPU to bring every cache line of the first `max` bytes of `bytes` into L1.
#[inline(always)]
pub(crate) fn prefetch_lines(bytes: &[u8], max: usize) {
    const LINE: usize = 64;
    let start = bytes.as_ptr();
    let len = bytes.len().min(max);
    if len == 0 {
        return;
    }
    // Every line the span touches: from the one holding its first byte to the one holding its
    // last, whatever the alignment.
    let first = start as usize & !(LINE - 1);
    let last = (start as usize).wrapping_add(len - 1);
    let mut line = first;
    while line <= last {
        prefetch(start.wrapping_add(line.wrapping_sub(start as usize)));
        line = line.wrapping_add(LINE);
    }
}
