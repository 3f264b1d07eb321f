//! The I/O layer: the only place `unsafe` lives.
//!
//! - [`job`]: a batch of positioned reads ([`job::IoJob`]) that owns every byte its reads touch.
//! - [`uring`]: the io_uring backend, one ring thread shared by the process.
//! - [`psync`]: the `preadv` thread-pool fallback.
//! - [`mmap`]: read-only mappings of committed file prefixes (offset tables, and chunks for the
//!   zero-copy path), with `mincore` residency checks.
//! - [`fs`]: file-system calls with the durability rules of the commit protocol.
//! - [`vfs`]: the seam every file operation of the writer and of recovery goes through, with the
//!   real file system ([`vfs::StdFs`]); `fault` holds the simulated and fault-injecting ones
//!   used by the crash and I/O-error tests.
//! - [`pool`]: the worker threads async gathers run on (page faults, checksums, inflate).
//!
//! Which backend serves a read is decided by [`Backend`], overridden by the `ZRECORD_IO`
//! environment variable (`uring`, `psync`, `mmap` or `auto`), and reported once through
//! `tracing`.

#[doc(hidden)]
pub mod fault;
pub mod fs;
pub mod job;
pub mod mmap;
pub mod pool;
pub mod psync;
#[cfg(feature = "uring")]
pub mod uring;
pub mod vfs;

pub use pool::{stats, Stats};

use std::sync::OnceLock;

/// How a dataset reads records.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Backend {
    /// Per batch: raw records already in the page cache are served zero-copy from a mapping;
    /// otherwise the batch goes to io_uring (or the pread pool where io_uring is unavailable).
    #[default]
    Auto,
    /// Every read through io_uring (the pread pool if io_uring cannot be set up).
    Uring,
    /// Every read through the mapping: zero-copy for raw records. Cold data blocks on page
    /// faults one page at a time; use it for data known to be in memory.
    Mmap,
    /// Every read through the `preadv` thread pool.
    Psync,
}

impl Backend {
    /// The name used by `ZRECORD_IO`, the CLI and reports.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Auto => "auto",
            Backend::Uring => "uring",
            Backend::Mmap => "mmap",
            Backend::Psync => "psync",
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Backend {
    type Err = crate::Error;

    fn from_str(s: &str) -> crate::Result<Backend> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Backend::Auto),
            "uring" | "io_uring" | "io-uring" => Ok(Backend::Uring),
            "mmap" => Ok(Backend::Mmap),
            "psync" | "pread" => Ok(Backend::Psync),
            other => Err(crate::Error::InvalidConfig {
                reason: format!(
                    "unknown I/O backend {other:?} (expected auto, uring, mmap or psync)"
                ),
            }),
        }
    }
}

/// The backend forced by `ZRECORD_IO`, read once: `None` if it is unset or empty.
///
/// # Errors
///
/// [`crate::Error::InvalidConfig`] naming the value, if `ZRECORD_IO` is set to anything but
/// `auto`, `uring`, `psync` or `mmap`: a typo must not silently run another backend than the
/// one asked for. Opening a dataset and every gather report it.
pub fn forced_backend() -> crate::Result<Option<Backend>> {
    static FORCED: OnceLock<Result<Option<Backend>, String>> = OnceLock::new();
    FORCED
        .get_or_init(|| {
            let Some(v) = std::env::var_os("ZRECORD_IO") else {
                return Ok(None);
            };
            let v = v.to_string_lossy();
            if v.trim().is_empty() {
                return Ok(None);
            }
            match v.parse::<Backend>() {
                Ok(b) => {
                    tracing::info!(backend = %b, "ZRECORD_IO forces the read backend");
                    Ok(Some(b))
                }
                Err(_) => Err(format!(
                    "ZRECORD_IO={v:?} is not a read backend (expected auto, uring, mmap or psync)"
                )),
            }
        })
        .clone()
        .map_err(|reason| crate::Error::InvalidConfig { reason })
}

/// What executes a batch of positioned reads.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Executor {
    #[cfg(feature = "uring")]
    Uring(&'static uring::Ring),
    Psync(&'static psync::PsyncPool),
}

impl Executor {
    pub(crate) fn run(self, job: job::IoJob) -> Result<job::IoJob, job::JobError> {
        match self {
            #[cfg(feature = "uring")]
            Executor::Uring(r) => r.run(job),
            Executor::Psync(p) => p.run(job),
        }
    }
}

/// The process's io_uring ring thread, started on first use; `None` where io_uring cannot be
/// set up (reported once).
#[cfg(feature = "uring")]
fn ring() -> Option<&'static uring::Ring> {
    static RING: OnceLock<Option<uring::Ring>> = OnceLock::new();
    RING.get_or_init(|| match uring::Ring::start() {
        Ok(r) => {
            tracing::info!(flags = r.flags, "zrecord reads through io_uring");
            Some(r)
        }
        Err(e) => {
            tracing::warn!(error = %e, "io_uring is unavailable; zrecord reads through the pread pool");
            None
        }
    })
    .as_ref()
}

/// Threads in the pread pool: enough queue depth for a cold disk.
const PSYNC_THREADS: usize = 15;

/// The process's pread pool, started on first use.
fn psync_pool() -> crate::Result<&'static psync::PsyncPool> {
    static POOL: OnceLock<Result<psync::PsyncPool, String>> = OnceLock::new();
    POOL.get_or_init(|| psync::PsyncPool::new(PSYNC_THREADS).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| {
            crate::Error::io(
                "<pread pool>",
                "spawn thread",
                std::io::Error::other(e.clone()),
            )
        })
}

/// The executor for positioned reads under `backend` (after `ZRECORD_IO`): io_uring when asked
/// for or automatic and available, the pread pool otherwise.
pub(crate) fn executor(backend: Backend) -> crate::Result<Executor> {
    #[cfg(feature = "uring")]
    if matches!(backend, Backend::Auto | Backend::Uring | Backend::Mmap) {
        if let Some(r) = ring() {
            return Ok(Executor::Uring(r));
        }
    }
    #[cfg(not(feature = "uring"))]
    let _ = backend;
    Ok(Executor::Psync(psync_pool()?))
}

/// The backend a dataset configured with `requested` really uses: `ZRECORD_IO` wins, and
/// `Uring` becomes `Psync` where io_uring is unavailable.
///
/// # Errors
///
/// An invalid `ZRECORD_IO` (see [`forced_backend`]).
pub fn effective_backend(requested: Backend) -> crate::Result<Backend> {
    let b = forced_backend()?.unwrap_or(requested);
    Ok(if b == Backend::Uring && !uring_available() {
        // Where io_uring is compiled in, `ring()` reported why it is unavailable.
        #[cfg(not(feature = "uring"))]
        {
            static ONCE: std::sync::Once = std::sync::Once::new();
            ONCE.call_once(|| {
                tracing::warn!(
                    "zrecord is built without the `uring` feature; reads go through the pread pool"
                );
            });
        }
        Backend::Psync
    } else {
        b
    })
}

/// True if io_uring could be set up in this process (starts the ring thread on first call).
pub fn uring_available() -> bool {
    #[cfg(feature = "uring")]
    {
        ring().is_some()
    }
    #[cfg(not(feature = "uring"))]
    {
        false
    }
}

/// Hints the CPU to bring the cache line at `ptr` into L1. Never faults, whatever `ptr` is:
/// the batch loops use it to overlap the memory latency of random records and table entries.
#[inline(always)]
pub fn prefetch(ptr: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` is a hint that never faults, for any address; SSE is part of the
    // x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(ptr.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ptr;
}

/// CRC32C of `index` (u64 little-endian) followed by `body`: the offset-entry checksum
/// (`docs/FORMAT.md`). Computed with three SSE4.2 `crc32` instructions where the CPU has them
/// (the general-purpose `crc32c` call costs more than the 28 bytes it checks, once per record
/// per field on the read path), with the `crc32c` crate otherwise.
#[inline]
pub fn crc32c_entry(index: u64, body: &[u8; 20]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU supports SSE4.2, checked just above.
        return unsafe { crc32c_entry_sse42(index, body) };
    }
    crc32c::crc32c_append(crc32c::crc32c(&index.to_le_bytes()), body)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
fn crc32c_entry_sse42(index: u64, body: &[u8; 20]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u32, _mm_crc32_u64};
    let [a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3, b4, b5, b6, b7, c0, c1, c2, c3] = *body;
    let mut c = u64::from(u32::MAX);
    c = _mm_crc32_u64(c, index);
    c = _mm_crc32_u64(c, u64::from_le_bytes([a0, a1, a2, a3, a4, a5, a6, a7]));
    c = _mm_crc32_u64(c, u64::from_le_bytes([b0, b1, b2, b3, b4, b5, b6, b7]));
    !_mm_crc32_u32(c as u32, u32::from_le_bytes([c0, c1, c2, c3]))
}

#[cfg(test)]
mod tests {
    #[test]
    fn entry_crc_matches_the_crc32c_crate() {
        let mut body = [0u8; 20];
        for i in 0..1000u64 {
            for (j, b) in body.iter_mut().enumerate() {
                *b = (i as u8).wrapping_mul(31).wrapping_add(j as u8);
            }
            let index = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let want = crc32c::crc32c_append(crc32c::crc32c(&index.to_le_bytes()), &body);
            assert_eq!(super::crc32c_entry(index, &body), want);
        }
    }
}
