//! The I/O layer: the only place `unsafe` lives.
//!
//! - `job`: a batch of positioned reads (`ReadJob`) that owns every byte its reads touch.
//! - `uring`: the io_uring ring thread.
//! - `psync`: the `preadv` thread-pool fallback.
//! - `mmap`: read-only mappings of committed file prefixes (offset tables, and chunks for the
//!   zero-copy path), with `mincore` residency checks.
//! - `fs`: file-system calls with the durability rules of the commit protocol, and the
//!   process's descriptor and mapping limits.
//! - `vfs`: the seam every file operation of the writer and of recovery goes through, with the
//!   real file system (`vfs::StdFs`); `fault` holds the simulated and fault-injecting ones
//!   used by the crash and I/O-error tests.
//! - `pool`: the worker threads async gathers run on (page faults, checksums, inflate).
//!
//! Which of these serves a read is the read engine's business (`store/read/`).

#[cfg(feature = "testing")]
pub(crate) mod fault;
pub(crate) mod fs;
pub(crate) mod job;
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
