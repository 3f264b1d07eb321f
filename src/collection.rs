//! The public face of collections: local ones (`store/collection/`) and those on object stores
//! (`remote/collection/`, feature `remote`), and the entries that take either.

use std::time::{Duration, SystemTime};

use crate::error::Result;

#[cfg(feature = "remote")]
pub use crate::remote::collection::{commit_url, LEASE_TTL};
pub use crate::store::collection::{
    commit, CollectionDir, CommitOptions, CommitReport, CommitStep, GcReport,
};

/// Options of [`gc`]. `Default`: ages measured from the system clock; the environment's
/// object-store settings.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct GcOptions {
    /// The time ages (of parts, and of leases on an object store) are measured from. Default:
    /// `None`, the system clock when `gc` starts.
    pub now: Option<SystemTime>,
    /// The object-store client's options, for a collection at a URL. Default: the
    /// environment's.
    #[cfg(feature = "remote")]
    pub store: crate::remote::StoreOptions,
}

impl GcOptions {
    /// The default options.
    pub fn new() -> GcOptions {
        GcOptions::default()
    }

    /// Measures ages from `now` instead of the system clock.
    #[must_use]
    pub fn now(mut self, now: SystemTime) -> GcOptions {
        self.now = Some(now);
        self
    }

    /// Sets the object-store client's options.
    #[cfg(feature = "remote")]
    #[must_use]
    pub fn store(mut self, store: crate::remote::StoreOptions) -> GcOptions {
        self.store = store;
        self
    }
}

/// Removes from the collection at `root_or_url` (a directory, or with the `remote` feature an
/// `s3://`/`gs://`/`az://` URL) every part under `parts/` that **no manifest names** (any
/// manifest, not only the latest: a reader may still be on an older one), that **no live
/// process holds**, and that is **older than `older_than`**: locally, the newest modification
/// time of the part's directory and everything in it (placing a part under `parts/` sets its
/// directory's time to the time it was placed); on an object store, the newest last-modified
/// time of its objects. Leftovers of failed commits go too: locally temporary manifests and
/// incomplete copies older than the limit; on a store probe objects older than the limit and
/// than `LEASE_TTL`, and dead leases. A part a manifest names is never removed, nor one
/// younger than the limit, nor one a live process holds, whatever the limit.
///
/// Locally, `gc` holds the collection's commit lock exclusively, which every committer (and a
/// pull into the collection) holds shared: it waits for the commits in progress and never
/// runs beside one, so nothing a live commit owns is removed, whatever the limit (a `gc`
/// called on the thread of a commit to the same collection, from its `on_step` callback, is
/// [`crate::Error::InvalidConfig`]: it would wait for that commit forever). A part whose
/// writer lock is held (a writer writing it under `parts/`) is kept however old, and a
/// symlink under `parts/` is removed itself, never its target.
///
/// On an object store there is no lock: what a live process holds is a part a live lease
/// names. A commit (`commit_url`, or a push of a whole collection) writes a lease under
/// `_collection/leases/` naming each part before it pushes or takes it, and keeps it fresh
/// until its manifest exists. A lease last written more than `LEASE_TTL` (10 minutes; feature
/// `remote`) ago is dead (its holder died): it holds nothing, and `gc` removes it. Before it
/// removes anything, `gc` writes a lease of its own naming those parts, which commits read: a
/// commit never takes a part `gc` is removing. Leases are judged by the store's last-modified
/// times against the clock `gc` measures from, which must agree with the store's to within
/// `LEASE_TTL / 2`. A part nobody holds is protected by the limit alone: on a store, a part a
/// writer pushes under `parts/` itself and a commit takes later by URL (the Ray sink's parts),
/// from the start of its push until that commit starts, so `older_than` must exceed that time;
/// locally, a part written under `parts/` and not yet given to a commit.
///
/// # Errors
/// [`crate::Error::NotADataset`] if there is no collection there; a damaged manifest's
/// [`crate::Error::MetaCorrupt`] (nothing is removed then); I/O and remote errors naming the
/// file or object.
pub fn gc(root_or_url: &str, older_than: Duration, options: &GcOptions) -> Result<GcReport> {
    let now = options.now.unwrap_or_else(SystemTime::now);
    let Some(local) = crate::store::location::local_path(root_or_url) else {
        #[cfg(feature = "remote")]
        return crate::remote::collection::gc_url(root_or_url, older_than, now, &options.store);
        #[cfg(not(feature = "remote"))]
        return Err(crate::store::location::no_object_stores(root_or_url));
    };
    crate::store::collection::gc::gc_dir(std::path::Path::new(local), older_than, now)
}
