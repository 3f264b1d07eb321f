//! Datasets on object stores: S3 and S3-compatible stores (Garage, MinIO, Ceph, …) at
//! `s3://bucket/prefix`; Google Cloud Storage at `gs://bucket/prefix` (feature `gcs`); Azure
//! Blob Storage at `az://container/prefix` (also `azure://`, `abfs://`, `abfss://`, and
//! `abfs[s]://container@account.dfs.core.windows.net/prefix`; feature `azure`).
//!
//! - [`push`] publishes a local dataset's latest commit to a URL; [`pull`] fetches one back
//!   into a local directory. Both take whole collections too (every part of the latest
//!   manifest, then a manifest listing them).
//! - [`open`] opens a dataset at a URL with [`RemoteConfig`]; [`crate::Dataset::open`]
//!   takes such a URL too, with the default options. Offset-table entries are read on demand
//!   in pages (kept in a local cache directory; or whole tables mirrored there at open, with
//!   [`RemoteConfig::mirror_tables`]) and records with batched, coalesced range requests, every
//!   entry and record checked against its CRC32C as on local disk.
//!
//! A dataset here is a [`crate::Location`] like a local directory (`open.rs`): `store/` knows
//! nothing of object stores, and the crate root lists `s3://`, `gs://` and `az://` among the URL
//! schemes [`crate::Dataset::open`] dispatches to.
//!
//! The layout on the store and its commit rule are in docs/FORMAT.md ("On an object store").
//! Credentials, endpoint and region come from each platform's usual environment variables
//! (S3: `AWS_ENDPOINT`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
//! `AWS_ALLOW_HTTP`, …; GCS: `GOOGLE_SERVICE_ACCOUNT`, `GOOGLE_SERVICE_ACCOUNT_KEY`,
//! `GOOGLE_APPLICATION_CREDENTIALS`, …, else the instance's metadata server; Azure:
//! `AZURE_STORAGE_ACCOUNT_NAME`, `AZURE_STORAGE_ACCOUNT_KEY`, `AZURE_STORAGE_SAS_KEY`,
//! `AZURE_STORAGE_ENDPOINT`, `AZURE_CLIENT_ID`/`AZURE_CLIENT_SECRET`/`AZURE_TENANT_ID`, …, else
//! managed identity) or from [`StoreOptions`].

pub(crate) mod backend;
#[cfg(feature = "diagnostics")]
pub(crate) mod baseline;
pub(crate) mod cache;
pub(crate) mod collection;
mod failure;
mod manifest;
pub(crate) mod open;
mod pages;
mod pull;
mod push;
mod store;
mod transfer;
pub(crate) mod url;

use std::path::PathBuf;

pub use crate::store::location::local_path;
pub use collection::open_collection;
pub use push::{TransferOptions, TransferReport};
pub use store::StoreOptions;
pub use transfer::{pull, push};
pub use url::open;

/// How a dataset on an object store is read: the client's options, how reads become range
/// requests, and where the local cache lives. Pass it to [`open`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RemoteConfig {
    /// The object-store client's options. Default: the environment's.
    pub store: StoreOptions,
    /// Range requests in flight at most, per batch. Default: 32.
    pub requests_in_flight: usize,
    /// Reads of one object closer than this many bytes share a request (the bytes between
    /// them are fetched and dropped). Default: 8 KiB: a merge saves a request but fetches the
    /// gap, which for small random records costs far more bytes than it saves requests
    /// (docs/BENCHMARKS.md).
    pub coalesce_gap: u64,
    /// The largest range request; larger reads are split. Default: 8 MiB.
    pub max_request: u64,
    /// The local cache directory (offset-table pages or mirrored tables, cached chunks). Default:
    /// `$ZRECORD_CACHE_DIR`, else `$XDG_CACHE_HOME/zrecord`, else `~/.cache/zrecord`, else the
    /// temporary directory's `zrecord-cache`.
    pub cache_dir: Option<PathBuf>,
    /// Bytes of disk the cache may take for this dataset: whole chunks, and the offset-table
    /// pages (or mirrored tables), which count against it too. The least recently used chunks are evicted
    /// first (recency is a cached file's modification time, set on use by every reader sharing
    /// the directory). 0 turns chunk caching off (table pages are kept all the same).
    /// Default: `$ZRECORD_CACHE_BYTES`, else 0.
    pub cache_bytes: u64,
    /// Bytes of range requests lookahead may have started ahead of the reads that will take
    /// them (the loader announces its next batches; see
    /// `zrecord::pipeline::PrefetchConfig::lookahead`); 0 turns lookahead off. Default: 0 (off:
    /// on the measured store, workers × requests in flight hid 20 ms of latency without it,
    /// and it cost throughput; docs/BENCHMARKS.md). 64 MiB is a sensible value to turn it on.
    pub lookahead_bytes: u64,
    /// Lookahead range requests in flight at once, across every loader of the dataset. Hiding
    /// latency L at a rate of R requests per second needs R × L of them (Little's law: 256
    /// hide 20 ms up to 12,800 requests per second). Default: 256.
    pub lookahead_requests: usize,
    /// Mirror every offset table whole into the cache directory at open, as before issue #24,
    /// instead of reading table entries on demand in pages. Default: false (on demand: open
    /// reads no table; docs/ARCHITECTURE.md, "Offset tables on demand").
    pub mirror_tables: bool,
    /// Bytes of an offset-table page read on demand, rounded down to whole 24-byte entries.
    /// Default: 64 KiB (2,730 entries: a random batch of 256 needs at most 256 pages).
    pub table_page_bytes: u64,
}

impl Default for RemoteConfig {
    /// The environment's store settings, 32 requests in flight, an 8 KiB coalescing gap,
    /// requests of at most 8 MiB, the default cache directory, no chunk cache (unless
    /// `ZRECORD_CACHE_BYTES` says otherwise).
    fn default() -> Self {
        Self {
            store: StoreOptions::default(),
            requests_in_flight: 32,
            coalesce_gap: 8 << 10,
            max_request: 8 << 20,
            cache_dir: None,
            cache_bytes: std::env::var("ZRECORD_CACHE_BYTES")
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0),
            lookahead_bytes: 0,
            lookahead_requests: 256,
            mirror_tables: false,
            table_page_bytes: 64 << 10,
        }
    }
}

impl RemoteConfig {
    /// Sets the object-store client's options.
    #[must_use]
    pub fn store(mut self, store: StoreOptions) -> Self {
        self.store = store;
        self
    }

    /// Sets the range requests in flight per batch, at least 1. Default 32.
    #[must_use]
    pub fn requests_in_flight(mut self, n: usize) -> Self {
        self.requests_in_flight = n.max(1);
        self
    }

    /// Sets the coalescing gap in bytes. Default 8 KiB.
    #[must_use]
    pub fn coalesce_gap(mut self, bytes: u64) -> Self {
        self.coalesce_gap = bytes;
        self
    }

    /// Sets the largest range request, at least 4 KiB. Default 8 MiB.
    #[must_use]
    pub fn max_request(mut self, bytes: u64) -> Self {
        self.max_request = bytes.max(4096);
        self
    }

    /// Sets the local cache directory.
    #[must_use]
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = Some(dir.into());
        self
    }

    /// Sets the bytes of whole chunks the cache may hold; 0 turns chunk caching off.
    #[must_use]
    pub fn cache_bytes(mut self, bytes: u64) -> Self {
        self.cache_bytes = bytes;
        self
    }

    /// Sets the bytes lookahead may have in flight or waiting; 0 turns it off. Default 0.
    #[must_use]
    pub fn lookahead_bytes(mut self, bytes: u64) -> Self {
        self.lookahead_bytes = bytes;
        self
    }

    /// Sets the lookahead range requests in flight at once, at least 1. Default 256.
    #[must_use]
    pub fn lookahead_requests(mut self, n: usize) -> Self {
        self.lookahead_requests = n.max(1);
        self
    }

    /// Mirrors whole offset tables at open (true) or reads their entries on demand in pages
    /// (false, the default).
    #[must_use]
    pub fn mirror_tables(mut self, mirror: bool) -> Self {
        self.mirror_tables = mirror;
        self
    }

    /// Sets the bytes of an offset-table page read on demand, at least one 24-byte entry.
    /// Default 64 KiB.
    #[must_use]
    pub fn table_page_bytes(mut self, bytes: u64) -> Self {
        self.table_page_bytes = bytes.max(24);
        self
    }

    /// How the read plan coalesces reads of this dataset's objects into range requests:
    /// reads up to `coalesce_gap` apart share one, of at most `max_request` bytes.
    pub(crate) fn object_reads(&self) -> crate::io::coalesce::Coalesce {
        crate::io::coalesce::Coalesce::objects(self.coalesce_gap, self.max_request)
    }

    /// The cache directory in use.
    pub fn cache_root(&self) -> PathBuf {
        if let Some(d) = &self.cache_dir {
            return d.clone();
        }
        let env = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        env("ZRECORD_CACHE_DIR")
            .or_else(|| env("XDG_CACHE_HOME").map(|d| d.join("zrecord")))
            .or_else(|| env("HOME").map(|d| d.join(".cache").join("zrecord")))
            .unwrap_or_else(|| std::env::temp_dir().join("zrecord-cache"))
    }
}

/// True if `path` is a URL of a dataset on an object store (`s3://…`, `gs://…`, `az://…`)
/// rather than a local path: `local_path(path)` is `None` (its documentation has the rule).
pub fn is_url(path: &str) -> bool {
    local_path(path).is_none()
}

/// Runs blocking file work `f` on the object-store runtime's blocking threads, off the workers
/// that serve every range request of the process.
pub(crate) async fn off_runtime<T: Send + 'static>(
    f: impl FnOnce() -> crate::Result<T> + Send + 'static,
) -> crate::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| crate::Error::WorkerPanicked {
            what: "file work of the object-store runtime".into(),
            message: e.to_string(),
        })?
}
