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

mod manifest;
mod push;
mod store;

pub use push::{pull, push, TransferOptions, TransferReport};
pub use store::StoreOptions;

/// True if `path` is a URL of a dataset on an object store (`s3://…`) rather than a local path.
pub fn is_url(path: &str) -> bool {
    path.split_once("://")
        .is_some_and(|(scheme, _)| !scheme.is_empty() && scheme != "file")
}
