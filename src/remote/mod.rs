//! Datasets on object stores (S3 and S3-compatible stores: Garage, MinIO, Ceph, …).
//!
//! - [`push`] publishes a local dataset's latest commit to `s3://bucket/prefix`; [`pull`]
//!   fetches one back into a local directory.
//! - [`crate::Dataset::open`] takes an `s3://` URL too: the offset tables are fetched into a
//!   local cache directory and records are read with batched, coalesced range requests, every
//!   record checked against its CRC32C as on local disk.
//!
//! The layout on the store and its commit rule are in docs/FORMAT.md ("On an object store").
//! Credentials, endpoint and region come from the usual environment variables (`AWS_ENDPOINT`,
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ALLOW_HTTP`, …) or from
//! [`StoreOptions`].

mod backend;
mod manifest;
pub(crate) mod open;
#[cfg(feature = "testing")]
pub(crate) mod proxy;
mod push;
mod store;

use std::path::PathBuf;

pub use backend::{stats, RemoteStats};
pub use push::{pull, push, TransferOptions, TransferReport};
pub use store::StoreOptions;

/// How a dataset on an object store is read: the client's options, how reads become range
/// requests, and where the local cache lives. Set it with
/// [`crate::ReadConfig::with_remote`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RemoteConfig {
    /// The object-store client's options. Default: the environment's.
    pub store: StoreOptions,
    /// Range requests in flight at most, per batch. Default: 32.
    pub requests_in_flight: usize,
    /// Reads of one object closer than this many bytes share a request (the bytes between
    /// them are fetched and dropped). Default: 64 KiB.
    pub coalesce_gap: u64,
    /// The largest range request; larger reads are split. Default: 8 MiB.
    pub max_request: u64,
    /// The local cache directory (mirrored offset tables). Default: `$ZRECORD_CACHE_DIR`,
    /// else `$XDG_CACHE_HOME/zrecord`, else `~/.cache/zrecord`, else the temporary directory's
    /// `zrecord-cache`.
    pub cache_dir: Option<PathBuf>,
}

impl Default for RemoteConfig {
    /// The environment's store settings, 32 requests in flight, a 64 KiB coalescing gap,
    /// requests of at most 8 MiB, the default cache directory.
    fn default() -> Self {
        Self {
            store: StoreOptions::default(),
            requests_in_flight: 32,
            coalesce_gap: 64 << 10,
            max_request: 8 << 20,
            cache_dir: None,
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

    /// Sets the coalescing gap in bytes. Default 64 KiB.
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

/// True if `path` is a URL of a dataset on an object store (`s3://…`) rather than a local path.
pub fn is_url(path: &str) -> bool {
    path.split_once("://")
        .is_some_and(|(scheme, _)| !scheme.is_empty() && scheme != "file")
}
