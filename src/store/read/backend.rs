//! The read-backend trait: what executes a batch's reads. zrecord's own implementations live
//! in `engine.rs`.

use crate::error::Result;
use crate::io::job::ReadJob;
use std::fmt;

/// Executes batches of positioned reads for the read engine.
///
/// The engine resolves a batch's records, plans coalesced reads into a [`ReadJob`] and hands it
/// to the dataset's backend; once the job comes back, it verifies every record's CRC32C,
/// inflates and lays out the batch. A backend only moves bytes: it never sees records, and
/// wrong bytes it returns are caught by the checksums. io_uring, the pread pool and mmap are
/// implementations; [`ReadConfig::with_custom_backend`](super::ReadConfig::with_custom_backend) plugs in another (a fault injector in
/// the tests, an object store).
///
/// `read` is called on zrecord's own threads (the thread of a blocking gather, or the worker
/// pool that runs async gathers), never on an async runtime's worker, and may block.
pub trait ReadBackend: Send + Sync + fmt::Debug {
    /// A short name for reports (`uring`, `psync`, `mmap`, `auto`, …).
    fn name(&self) -> &str;

    /// Performs every read of `job` and returns it once all have completed, or the error of
    /// the first that failed. Memory named by a read belongs to the backend until that read has
    /// completed, whatever happens to the caller.
    fn read(&self, job: ReadJob) -> Result<ReadJob>;

    /// Whether batches may be served zero-copy from chunk mappings instead of being read into a
    /// slab by [`ReadBackend::read`]. Default [`ZeroCopy::Never`].
    fn zero_copy(&self) -> ZeroCopy {
        ZeroCopy::Never
    }

    /// Drops any local copy of `path`'s bytes this backend served (a cache entry), after the
    /// engine found a record read from it damaged. True if a retry may read other bytes: the
    /// engine then reads the batch once more. Default: false (nothing to drop).
    fn refetch(&self, path: &std::path::Path) -> bool {
        let _ = path;
        false
    }

    /// Whether [`ReadBackend::lookahead`] does anything (the engine skips planning reads for
    /// it otherwise). Default false.
    fn wants_lookahead(&self) -> bool {
        false
    }

    /// The reads of a batch that will be read soon, exactly as [`ReadBackend::read`] will get
    /// them (planned the same way; the job has no buffers): a backend with latency to hide
    /// starts them now, within its own budget, and hands the bytes to the `read` that asks for
    /// them. `session` groups the lookahead of one loader. Default: nothing.
    fn lookahead(&self, session: u64, job: &ReadJob) {
        let _ = (session, job);
    }

    /// Drops every read [`ReadBackend::lookahead`] started for `session` that no `read` took
    /// (the loader that announced them was dropped, resumed elsewhere or seeked). Default:
    /// nothing.
    fn end_lookahead(&self, session: u64) {
        let _ = session;
    }
}

/// When a batch of raw records is served as slices of the chunks' mappings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ZeroCopy {
    /// Never: every batch goes through [`ReadBackend::read`].
    Never,
    /// When a sample of the batch's records is in the page cache (`mincore`).
    WhenResident,
    /// Always (cold pages block on faults).
    Always,
}
