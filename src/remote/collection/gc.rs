//! Garbage collection of a collection on an object store: the prefixes under `parts/` that no
//! manifest names (any manifest, not only the latest) and whose newest object is older than a
//! limit are deleted, their commit manifests first (a part cut short is no dataset, never a
//! dataset missing objects); so are probe objects older than the limit that a killed committer
//! left.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::RemoteManifests;
use crate::error::{Error, Result};
use crate::format::source::SOURCE_FILE;
use crate::remote::manifest::{COMMITS, PROBES};
use crate::remote::store::{block_on, Store, StoreOptions};
use crate::store::collection::gc::{is_older, referenced, GcReport};

/// One part prefix's objects: their keys, newest modification, bytes.
#[derive(Default)]
struct PartObjects {
    keys: Vec<String>,
    newest: Option<SystemTime>,
    bytes: u64,
}

/// Garbage-collects the collection at `url` (see the module's documentation), ages measured
/// at `now`.
///
/// # Errors
/// [`Error::NotADataset`] if the prefix holds no manifest; a damaged manifest's
/// [`Error::MetaCorrupt`] (nothing is deleted then); [`Error::Remote`] for requests that
/// failed after their retries.
pub(crate) fn gc_url(
    url: &str,
    older_than: Duration,
    now: SystemTime,
    options: &StoreOptions,
) -> Result<GcReport> {
    let store = Store::open(url, options)?;
    // The parts first, the manifests next (as locally).
    let s = Arc::clone(&store);
    let objects = block_on(async move { s.list_objects("parts").await })??;
    let mut parts: BTreeMap<String, PartObjects> = BTreeMap::new();
    for (key, size, at) in objects {
        let Some(id) = key
            .strip_prefix("parts/")
            .and_then(|r| r.split('/').next())
            .filter(|id| !id.is_empty())
        else {
            continue;
        };
        let p = parts.entry(id.to_string()).or_default();
        p.newest = p.newest.max(Some(at));
        p.bytes = p.bytes.saturating_add(size);
        p.keys.push(key);
    }
    let manifests = RemoteManifests::new(Arc::clone(&store));
    let (named, count) = referenced(&manifests)?;
    if count == 0 {
        return Err(Error::NotADataset {
            path: url.into(),
            reason: "not a collection (no manifest under _collection/)".into(),
        });
    }
    let mut report = GcReport {
        manifests: count,
        ..GcReport::default()
    };
    for (id, mut p) in parts {
        let old = p.newest.is_some_and(|t| is_older(now, t, older_than));
        if named.contains(&id) || !old {
            report.kept.push(id);
            continue;
        }
        // Its commits first: what is left of a deletion cut short is no dataset; its
        // provenance record last: it is removed with the part, never before its data.
        let commits = format!("parts/{id}/{COMMITS}/");
        let record = format!("parts/{id}/{SOURCE_FILE}");
        p.keys
            .sort_by_key(|k| (!k.starts_with(&commits), *k == record));
        delete_all(&store, p.keys)?;
        report.removed.push(id);
        report.bytes_freed = report.bytes_freed.saturating_add(p.bytes);
    }
    let s = Arc::clone(&store);
    let probes = block_on(async move { s.list_objects(PROBES).await })??;
    let stale: Vec<(String, u64)> = probes
        .into_iter()
        .filter(|(_, _, at)| is_older(now, *at, older_than))
        .map(|(k, size, _)| (k, size))
        .collect();
    report.leftovers = stale.len() as u64;
    report.bytes_freed = report
        .bytes_freed
        .saturating_add(stale.iter().map(|(_, s)| s).sum());
    delete_all(&store, stale.into_iter().map(|(k, _)| k).collect())?;
    Ok(report)
}

/// Deletes `keys` in order.
fn delete_all(store: &Arc<Store>, keys: Vec<String>) -> Result<()> {
    let s = Arc::clone(store);
    block_on(async move {
        for k in keys {
            s.delete(&k).await?;
        }
        Ok::<_, Error>(())
    })?
}
