//! How a dataset reads: [`ReadConfig`], and the [`Backend`] it names.

use super::backend::ReadBackend;
use crate::error::{Error, Result};
use std::sync::{Arc, OnceLock};

/// Which of zrecord's own read backends serves a dataset (see [`ReadConfig::with_backend`]); a
/// backend of your own plugs in with [`ReadConfig::with_custom_backend`].
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
    type Err = Error;

    fn from_str(s: &str) -> Result<Backend> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Backend::Auto),
            "uring" | "io_uring" | "io-uring" => Ok(Backend::Uring),
            "mmap" => Ok(Backend::Mmap),
            "psync" | "pread" => Ok(Backend::Psync),
            other => Err(Error::InvalidConfig {
                reason: format!(
                    "unknown I/O backend {other:?} (expected auto, uring, mmap or psync)"
                ),
            }),
        }
    }
}

/// The backend forced by the `ZRECORD_IO` environment variable, read once: `None` where it is
/// unset or empty, an error naming the value where it is not a backend's name. Every dataset
/// open reports that error, so a typo cannot silently run the wrong backend.
pub fn forced_backend() -> Result<Option<Backend>> {
    static FORCED: OnceLock<std::result::Result<Option<Backend>, String>> = OnceLock::new();
    FORCED
        .get_or_init(|| {
            let Ok(v) = std::env::var("ZRECORD_IO") else {
                return Ok(None);
            };
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
        .map_err(|reason| Error::InvalidConfig { reason })
}

/// Reads in flight at most, by default: a virtio disk here needed ~128 for full throughput.
pub const DEFAULT_QUEUE_DEPTH: usize = 256;
/// Bytes in flight at most, by default.
pub const DEFAULT_MAX_BYTES_IN_FLIGHT: usize = 64 << 20;
/// Threads the read engine may start, by default (see [`ReadConfig::with_threads`]).
pub const DEFAULT_THREADS: usize = 16;

/// How a dataset reads records: the backend, checksum verification, `O_DIRECT`, and the
/// engine's budgets (reads and bytes in flight, threads). `Default` gives every default named
/// below; the `with_*` setters change one each.
///
/// Datasets opened with equal budgets share one engine: one io_uring ring thread, one pread
/// pool, one finishing pool and one worker pool per process (`docs/ARCHITECTURE.md`, *Threads*).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ReadConfig {
    pub(crate) backend: Backend,
    pub(crate) custom: Option<Arc<dyn ReadBackend>>,
    pub(crate) verify_checksums: bool,
    pub(crate) direct_io: bool,
    pub(crate) columns: bool,
    pub(crate) queue_depth: usize,
    pub(crate) max_bytes_in_flight: usize,
    pub(crate) threads: usize,
}

impl Default for ReadConfig {
    fn default() -> Self {
        ReadConfig {
            backend: Backend::Auto,
            custom: None,
            verify_checksums: true,
            direct_io: false,
            columns: false,
            queue_depth: DEFAULT_QUEUE_DEPTH,
            max_bytes_in_flight: DEFAULT_MAX_BYTES_IN_FLIGHT,
            threads: DEFAULT_THREADS,
        }
    }
}

impl ReadConfig {
    /// Which of zrecord's backends serves reads. Default [`Backend::Auto`]; `ZRECORD_IO`
    /// overrides it.
    pub fn with_backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self.custom = None;
        self
    }

    /// Reads through a backend of your own (an object store, a fault injector, …) instead of
    /// zrecord's. Records are still checked, inflated and laid out by the engine.
    pub fn with_custom_backend(mut self, backend: Arc<dyn ReadBackend>) -> Self {
        self.custom = Some(backend);
        self
    }

    /// Verify every record's CRC32C on every read. Default true; turning it off trades the
    /// detection of damaged bytes for a little speed (see docs/BENCHMARKS.md).
    pub fn with_verify_checksums(mut self, verify: bool) -> Self {
        self.verify_checksums = verify;
        self
    }

    /// Read chunks with `O_DIRECT` (for datasets much larger than RAM: no page-cache pollution,
    /// no double copy). Aligned ranges are read into a staging buffer and sliced afterwards.
    /// Never uses the zero-copy path. Default false.
    pub fn with_direct_io(mut self, direct: bool) -> Self {
        self.direct_io = direct;
        self
    }

    /// Lays each field of a gathered batch out end to end, in record order, in a buffer of its
    /// own: [`crate::Batch::column`] then gives every field's values as one [`bytes::Bytes`],
    /// the layout a NumPy or Arrow column needs. A field whose values already lie back to back
    /// in a chunk mapping (records read in file order) is a view of the mapping; any other is
    /// copied once, record by record in the pass that checks it, into a buffer that is not
    /// zero-filled first. Records are not padded 64 bytes apart; each buffer
    /// is aligned for its field's dtype. Default false (every record a view of a mapping, or a
    /// 64-byte-aligned slot of one slab per batch).
    pub fn with_columns(mut self, columns: bool) -> Self {
        self.columns = columns;
        self
    }

    /// The name of [`ReadConfig::with_columns`] in 0.1.0, when it only copied mapped records
    /// into the batch's slab.
    #[deprecated(
        note = "renamed to `with_columns`, which lays every field out end to end; \
                         kept for one release, see CHANGELOG.md"
    )]
    pub fn with_copy_mapped(self, copy: bool) -> Self {
        self.with_columns(copy)
    }

    /// Reads in flight at most, across every batch the engine serves (the io_uring ring's
    /// depth; the pread pool's threads are bounded by it too). Default
    /// [`DEFAULT_QUEUE_DEPTH`]; clamped to 1..=4096.
    pub fn with_queue_depth(mut self, depth: usize) -> Self {
        self.queue_depth = depth.clamp(1, 4096);
        self
    }

    /// Bytes of reads in flight at most (one read is always admitted, whatever its size).
    /// Default [`DEFAULT_MAX_BYTES_IN_FLIGHT`]; at least 64 KiB.
    pub fn with_max_bytes_in_flight(mut self, bytes: usize) -> Self {
        self.max_bytes_in_flight = bytes.max(64 << 10);
        self
    }

    /// The thread budget: every thread the read engine starts counts against it: the io_uring
    /// ring thread (1), the finishing helpers (one fewer than the cores, at most the budget),
    /// the worker threads that run async gathers (twice the cores, at most the budget), and the
    /// pread pool (only where io_uring is not used: the budget less one, at most the queue
    /// depth). Default [`DEFAULT_THREADS`]; at least 2.
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads.clamp(2, 1024);
        self
    }

    /// The backend asked for (before `ZRECORD_IO`); see [`crate::Dataset::backend`] for the one
    /// in use.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The custom backend, if one was set.
    pub fn custom_backend(&self) -> Option<&Arc<dyn ReadBackend>> {
        self.custom.as_ref()
    }

    /// Whether every record's CRC32C is verified.
    pub fn verify_checksums(&self) -> bool {
        self.verify_checksums
    }

    /// Whether chunks are read with `O_DIRECT`.
    pub fn direct_io(&self) -> bool {
        self.direct_io
    }

    /// Whether each field of a gathered batch lies end to end in a buffer of its own
    /// ([`ReadConfig::with_columns`]).
    pub fn columns(&self) -> bool {
        self.columns
    }

    /// The name of [`ReadConfig::columns`] in 0.1.0.
    #[deprecated(note = "renamed to `columns`; kept for one release, see CHANGELOG.md")]
    pub fn copy_mapped(&self) -> bool {
        self.columns
    }

    /// Reads in flight at most.
    pub fn queue_depth(&self) -> usize {
        self.queue_depth
    }

    /// Bytes in flight at most.
    pub fn max_bytes_in_flight(&self) -> usize {
        self.max_bytes_in_flight
    }

    /// The thread budget.
    pub fn threads(&self) -> usize {
        self.threads
    }
}
