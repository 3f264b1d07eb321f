//! Opening a URL (`s3://…`, `gs://…`, `az://…`): a collection if its prefix holds
//! `_collection/` manifests (`collection/`), else a dataset ([`Remote`], `open.rs`). The
//! [`crate::store::location::UrlScheme`]s the crate root lists for object stores are here.

use std::sync::Arc;

use super::collection::probe::is_collection;
use super::collection::RemoteCollection;
use super::open::Remote;
use super::store::{Provider, Store};
use super::RemoteConfig;
use crate::error::Result;
use crate::{Dataset, Location, ReadConfig};

/// Opens the dataset at `url` (`s3://bucket/prefix`, `gs://bucket/prefix`,
/// `az://container/prefix`) read-only at its latest commit (a collection's prefix, holding
/// `_collection/`, at its latest manifest: [`super::open_collection`]), read with
/// `config` and `remote` (the client's options, request sizes, the cache):
/// [`Dataset::open_with`] with object-store options. [`Dataset::open`] of a URL uses
/// [`RemoteConfig::default`] (the environment's settings).
///
/// # Errors
/// [`crate::Error::NotADataset`] if there is no commit under the prefix (nor a collection's
/// manifest); [`crate::Error::InvalidConfig`] for a URL or options that do not work, or an
/// invalid `ZRECORD_IO`; [`crate::Error::Remote`] for a request that failed after its retries;
/// [`crate::Error::RemoteCorrupt`] for a damaged manifest or table.
pub fn open(url: &str, config: ReadConfig, remote: RemoteConfig) -> Result<Dataset> {
    Dataset::from_location(open_location(url, &remote)?, config)
}

/// The URL schemes of one object-store provider (`s3://` and `s3a://`; `gs://`; `az://`,
/// `azure://`, `abfs://`, `abfss://`): [`Dataset::open`] of such a URL opens it with default
/// options. A build without the provider's feature names the feature it needs.
pub(crate) struct Scheme(Provider);

/// `s3://` and `s3a://`.
pub(crate) const S3: Scheme = Scheme(Provider::S3);
/// `gs://`.
pub(crate) const GCS: Scheme = Scheme(Provider::Gcs);
/// `az://`, `azure://`, `abfs://`, `abfss://`.
pub(crate) const AZURE: Scheme = Scheme(Provider::Azure);

impl crate::store::location::UrlScheme for Scheme {
    fn handles(&self, scheme: &str) -> bool {
        self.0.schemes().contains(&scheme)
    }

    /// A dataset, or a collection if the prefix holds `_collection/` manifests.
    fn open(&self, url: &str) -> Result<Arc<dyn Location>> {
        open_location(url, &RemoteConfig::default())
    }
}

/// The location at `url`: a collection if its prefix holds `_collection/` manifests (one
/// `LIST`), else a dataset.
pub(crate) fn open_location(url: &str, config: &RemoteConfig) -> Result<Arc<dyn Location>> {
    let store = Store::open(url, &config.store)?;
    if is_collection(&store)? {
        return Ok(Arc::new(RemoteCollection::new(store, config)));
    }
    Ok(Arc::new(Remote::connect(url, config)?))
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_scheme_goes_to_its_provider() {
        use crate::store::location::UrlScheme;
        assert!(super::S3.handles("s3"));
        assert!(super::S3.handles("s3a"));
        assert!(!super::S3.handles("gs"));
        assert!(super::GCS.handles("gs"));
        assert!(!super::GCS.handles("gcs"));
        for s in ["az", "azure", "abfs", "abfss"] {
            assert!(super::AZURE.handles(s), "{s}");
            assert!(!super::S3.handles(s) && !super::GCS.handles(s), "{s}");
        }
    }
}
