//! Whether a prefix holds a collection, and the error for a prefix that holds no dataset
//! commit (saying when it is a collection's): what the dataset reader and `pull` need to know
//! of collections, without depending on them.

use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::remote::store::{block_on, Store};
use crate::store::collection::manifests::{parse_manifest_name, MANIFEST_DIR};

/// Whether the prefix of `store` holds a collection (any object under `_collection/`).
pub(crate) fn is_collection(store: &Arc<Store>) -> Result<bool> {
    let s = Arc::clone(store);
    let keys = block_on(async move { s.list(MANIFEST_DIR).await })??;
    Ok(keys
        .iter()
        .any(|k| k.rsplit('/').next().and_then(parse_manifest_name).is_some()))
}

/// The error for a prefix that holds no dataset commit: [`Error::NotADataset`], saying so if
/// the prefix is a collection's (which `Dataset::open` and `pull` take whole, not a dataset's
/// reader).
pub(crate) fn no_commit(store: &Arc<Store>) -> Error {
    let reason = if is_collection(store).unwrap_or(false) {
        format!(
            "a collection (it holds {}/), not one dataset: open it with zrecord::Dataset::open \
             or zrecord::remote::open_collection, or pull it whole with zrecord::remote::pull",
            store.object_url(MANIFEST_DIR)
        )
    } else {
        format!(
            "no commit under {}",
            store.object_url(crate::remote::manifest::COMMITS)
        )
    };
    Error::NotADataset {
        path: PathBuf::from(store.url()),
        reason,
    }
}
