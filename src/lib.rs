//! zrecord: a record store and data loader for ML training.
//!
//! A dataset is a directory of append-only chunk files, one checksummed offset table per field,
//! and a `meta.json` commit point (see `docs/FORMAT.md`). One [`Writer`] appends, modifies,
//! deletes and commits crash-safely — its records deflated, checksummed and written by
//! [`WriterConfig::num_writers`] append tasks that each own a chunk, behind bounded queues, with
//! blocking and async (`append_async`, `commit_async`) calls; any number of readers
//! ([`Dataset`]) read random records in batches, in the caller's order, every record checked
//! against its CRC32C.
//!
//! Reads go through one [`ReadBackend`]: zrecord's own (io_uring, a pread pool, zero-copy mmap,
//! and `auto`, which picks per batch) or one of yours, set with [`ReadConfig`], which also sets
//! the reads and bytes in flight and the read path's thread budget. Chunk files are opened on
//! demand and closed least-recently-used under a budget derived from `RLIMIT_NOFILE`.
//!
//! ```
//! use zrecord::{Codec, DType, Dataset, Field, Schema, Writer, WriterConfig};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let tmp = tempfile::tempdir()?;
//! let dir = tmp.path().join("train.zr");
//! let schema = Schema::new()
//!     .field(Field::new("tokens", DType::U32).codec(Codec::Deflate))
//!     .field(Field::new("label", DType::I64).shape(vec![]));
//!
//! let mut writer = Writer::create(&dir, &schema, WriterConfig::default())?;
//! for i in 0..100u32 {
//!     let tokens: Vec<u8> = (0..i).flat_map(|t| t.to_le_bytes()).collect();
//!     writer.append(&[&tokens[..], &i64::from(i % 3).to_le_bytes()[..]])?;
//! }
//! writer.commit()?; // durable from here: data, offsets, meta.json, each fsynced in order
//! drop(writer);
//!
//! let ds = Dataset::open(&dir)?;
//! let batch = ds.gather_blocking(&[42, 7, 99])?; // results in caller order
//! assert_eq!(batch.typed::<u32>(0, 0)?.len(), 42);
//! assert_eq!(batch.typed::<i64>(2, 1)?, &[0]);
//! # Ok(())
//! # }
//! ```
//!
//! # Where things are
//!
//! The store is at the crate root; the loader pipeline at [`pipeline`]; the transform stage
//! (per-record operations the loader's workers run: decode, crop, flip, your own) at
//! [`transform`], its image operations with feature `images`; datasets on object stores at
//! `remote` (feature `remote`: `features = ["remote"]`); `.npy` conversion, and (feature `images`) image folders and WebDataset shards, at [`convert`]. Off by default: `remote`, `diagnostics` (feature `diagnostics`: bench and
//! diagnostic helpers, the format's decoders for fuzzing) and `testing` (feature `testing`:
//! the writer's file-system seam, which the `zrecord-testing` crate's simulated and
//! fault-injecting file systems plug into). Each public name has one path; `docs/public-api.txt` lists them all.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

// io_uring, `posix_fadvise`, `sync_file_range`, `mincore`, `O_DIRECT` and `/proc/self/fd` are
// Linux interfaces the read and write paths are built on; there is no fallback for other kernels.
#[cfg(not(target_os = "linux"))]
compile_error!(
    "zrecord supports Linux only: its I/O engine is built on io_uring, posix_fadvise, \
     sync_file_range, mincore and O_DIRECT"
);

mod checksum;
pub mod convert;
mod error;
mod format;
mod hash;
mod io;
pub mod pipeline;
#[cfg(feature = "remote")]
pub mod remote;
mod retry;
mod store;
pub mod transform;

// The public face: every name a user needs, once, at the root; the loader's at `pipeline::`,
// the object store's at `remote::`, conversion at `convert::`, bench and diagnostic
// helpers at `diagnostics::` (feature `diagnostics`), the seams test machinery plugs into at
// `testing::` (feature `testing`; the machinery is the `zrecord-testing` crate). docs/public-api.txt lists all of it; CI checks that the list is current.
pub use error::{Error, Result};
pub use format::dtype::{Codec, DType};
pub use format::meta::{Attributes, MAX_ATTRIBUTES_BYTES, MAX_ATTRIBUTE_KEY_BYTES};
pub use format::{MAX_CHUNKS, MAX_CHUNK_BYTES, MAX_RECORDS, MAX_RECORD_BYTES};
pub use io::job::{ReadJob, ReadRange};
pub use store::dataset::{Dataset, GatherFuture};
pub use store::location::{LocalDir, Location};
pub use store::read::batch::{Batch, Element};
pub use store::read::{
    read_backend, uring_available, Backend, ChunkAt, ReadBackend, ReadConfig, ZeroCopy,
    DEFAULT_MAX_BYTES_IN_FLIGHT, DEFAULT_QUEUE_DEPTH, DEFAULT_THREADS,
};
pub use store::scan::Scan;
pub use store::schema::{Field, Schema, DEFAULT_CHUNK_SIZE_BYTES};
pub use store::snapshot::{RecordLocation, Snapshot, TableAt};
pub use store::writer::{
    RebalanceOptions, RebalanceReport, Writer, WriterConfig, DICTIONARY_SAMPLE_RECORDS,
    MAX_DICTIONARY_BYTES, MAX_QUEUE_DEPTH, MAX_WRITERS, MAX_WRITE_BUFFER_BYTES,
};

/// Collections: many datasets (parts, each written by one task of a distributed job) read as
/// one dataset with global indices, committed together by numbered, create-only manifests.
/// [`Dataset::open`] of a collection's root opens it; [`collection::commit`] adds parts.
/// The layout is in docs/FORMAT.md, "Collections".
///
/// ```
/// # use zrecord::{DType, Dataset, Field, Schema, Writer, WriterConfig};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let tmp = tempfile::tempdir()?;
/// let schema = Schema::new().field(Field::new("text", DType::Bytes));
/// let mut parts = Vec::new();
/// for task in 0..3 {
///     let part = tmp.path().join(format!("task-{task}"));
///     let mut w = Writer::create(&part, &schema, WriterConfig::default())?;
///     w.append(&[format!("record of task {task}").as_bytes()])?;
///     w.commit()?;
///     parts.push(part);
/// }
/// let root = tmp.path().join("collection");
/// let report = zrecord::collection::commit(&root, &parts, Default::default())?;
/// assert_eq!((report.number, report.len), (1, 3));
/// let ds = Dataset::open(&root)?;
/// assert_eq!(&ds.get(2)?[0][..], b"record of task 2");
/// # Ok(())
/// # }
/// ```
pub mod collection;

/// The URL schemes [`Dataset::open`] dispatches `scheme://…` to: the one place that knows
/// which [`Location`]s this build has, so `store/` names none of them. Adding a scheme (a
/// collection's, say) is one impl of `store::location::UrlScheme` and one entry here. The
/// object stores' entries (`s3://`, `gs://`, `az://`) are listed with the `remote` feature; one
/// whose client feature (`gcs`, `azure`) a build lacks answers with an error naming it.
pub(crate) fn url_schemes() -> &'static [&'static dyn store::location::UrlScheme] {
    #[cfg(feature = "remote")]
    const SCHEMES: &[&dyn store::location::UrlScheme] =
        &[&remote::url::S3, &remote::url::GCS, &remote::url::AZURE];
    #[cfg(not(feature = "remote"))]
    const SCHEMES: &[&dyn store::location::UrlScheme] = &[];
    SCHEMES
}

/// The name of [`ReadConfig`] in 0.1.0. Its builder methods (`default`, `with_backend`,
/// `with_verify_checksums`, `with_direct_io`) are [`ReadConfig`]'s.
#[deprecated(
    note = "renamed to `ReadConfig`; this alias is kept for one release, see \
            CHANGELOG.md"
)]
pub type ReadOptions = ReadConfig;

/// Moved to `zrecord::diagnostics::evict_page_cache` (feature `diagnostics`).
///
/// # Errors
/// As `zrecord::diagnostics::evict_page_cache`.
#[deprecated(
    note = "moved to `zrecord::diagnostics::evict_page_cache` (feature `diagnostics`); kept \
            here for one release, see CHANGELOG.md"
)]
pub fn evict_page_cache(path: &std::path::Path) -> Result<()> {
    io::fs::evict_page_cache(path)
}

/// Moved to `zrecord::diagnostics::gather_stats` (feature `diagnostics`).
#[deprecated(
    note = "moved to `zrecord::diagnostics::gather_stats` (feature `diagnostics`); kept here \
            for one release, see CHANGELOG.md"
)]
pub fn gather_stats() -> io::pool::Stats {
    io::pool::stats()
}

/// Moved to `zrecord::diagnostics::GatherStats` (feature `diagnostics`).
#[deprecated(
    note = "moved to `zrecord::diagnostics::GatherStats` (feature `diagnostics`); kept here \
            for one release, see CHANGELOG.md"
)]
pub type GatherStats = io::pool::Stats;

/// Moved to `zrecord::diagnostics::forced_backend` (feature `diagnostics`).
///
/// # Errors
/// As `zrecord::diagnostics::forced_backend`.
#[deprecated(
    note = "moved to `zrecord::diagnostics::forced_backend` (feature `diagnostics`); kept here \
            for one release, see CHANGELOG.md"
)]
pub fn forced_backend() -> Result<Option<Backend>> {
    store::read::forced_backend()
}

/// Bench and diagnostic helpers (feature `diagnostics`, off by default; the `cli` feature, for
/// `zrecord bench`, and the fuzz crate turn it on, and the tests have it through the crate's
/// dev-dependency on itself): page-cache eviction, the read
/// engine's counters, the backend an environment variable forces, the descriptor budget, the
/// object store's counters and baseline, and the format's encoders and decoders the fuzz
/// targets drive. Not a stable API: these names follow the engine's internals.
#[cfg(feature = "diagnostics")]
pub mod diagnostics {
    pub use crate::checksum::{crc32c, crc32c_append, entry_crc};
    pub use crate::format::codec::{inflate, Dictionary, Encoder, ZstdDecoder};
    pub use crate::format::dtype::StoredCodec;
    pub use crate::format::entry::{decode_patch, encode_patch, Entry, ENTRY_BYTES, PATCH_BYTES};
    pub use crate::format::meta::{
        ChunkMeta, DictionaryMeta, FieldMeta, Meta, MetaError, TableMeta,
    };
    pub use crate::format::npy::{NpyHeader, NpyReader};
    pub use crate::format::{FORMAT_VERSION, MAX_TABLE_ENTRIES};
    pub use crate::io::fs::evict_page_cache;
    pub use crate::io::pool::{stats as gather_stats, Stats as GatherStats};
    #[cfg(feature = "remote")]
    pub use crate::remote::backend::{stats as remote_stats, RemoteStats};
    #[cfg(feature = "remote")]
    pub use crate::remote::baseline::range_get_loop;
    #[cfg(feature = "remote")]
    pub use crate::remote::cache::pending_fills;
    pub use crate::store::read::chunks::descriptor_budget;
    pub use crate::store::read::forced_backend;
    pub use crate::store::scan::SCAN_BLOCK_BYTES;
}

/// The seams test machinery plugs into (feature `testing`, off by default): the file-system
/// seam every file operation of the writer and of recovery goes through and the real file
/// system, with [`Writer::create_with_vfs`] and [`Writer::open_with_vfs`] to put a writer on
/// another one; and probes of the read window. The machinery itself (the simulated and
/// fault-injecting file systems, the fault-injecting HTTP proxy) is the `zrecord-testing`
/// crate's (`testing/` in the repository, not published).
#[cfg(feature = "testing")]
pub mod testing {
    pub use crate::io::vfs::{Prefix, StdFile, StdFs, Vfs, VfsFile, VfsLock};

    /// Bytes the read window of `ds`'s engine holds for announced batches no gather took
    /// (queued and running readahead, kept `O_DIRECT` reads), once no read of the window is
    /// running. Datasets opened with the same budgets share one window.
    pub fn read_window_held(ds: &crate::Dataset) -> usize {
        ds.engine().pools().window.settle()
    }

    /// Files the read window of `ds`'s engine holds open for kept `O_DIRECT` reads, once no
    /// read of the window is running.
    pub fn read_window_files(ds: &crate::Dataset) -> usize {
        ds.engine().pools().window.settle();
        ds.engine().pools().window.files()
    }

    /// Reads the read window of `ds`'s engine has queued so far (readahead ranges and
    /// `O_DIRECT` reads), whatever became of them.
    pub fn read_window_announced(ds: &crate::Dataset) -> u64 {
        ds.engine().pools().window.announced()
    }
}
