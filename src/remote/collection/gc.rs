//! Garbage collection of a collection on an object store: the prefixes under `parts/` that no
//! manifest names (any manifest, not only the latest), that no live commit lease holds, and
//! whose newest object is older than a limit are deleted, their commit manifests first (a part
//! cut short is no dataset, never a dataset missing objects); so are the probe objects a killed
//! committer left (older than the limit and than [`LEASE_TTL`]), and dead leases.
//!
//! There is no lock on a store: commits and `gc` keep off each other's parts with leases
//! (`lease.rs`). A commit writes its lease naming a part, and then reads the `gc` leases,
//! before it writes any object under the part's prefix or takes a part it found there (an
//! earlier attempt's push, a part a writer pushed); it deletes its lease only once its manifest
//! exists, and a holder whose lease may have been taken for dead (not written for
//! `LEASE_TTL / 2`) publishes or removes nothing more. `gc` reads, in this order:
//!
//! 1. the objects under `parts/`;
//! 2. the commit leases: a part a live one names is kept;
//! 3. the manifests: a part one names is kept. What is left and older than the limit is to go.
//! 4. It writes its own lease naming those parts,
//! 5. reads the commit leases again and
//! 6. the manifests created since 3, keeps what they name, and removes the rest.
//!
//! Why no part a live commit holds is removed: an object of a part that step 1 saw was written
//! after a lease naming the part existed. If that lease still exists at step 2 (or 5), the part
//! is kept; if its commit deleted it before, the manifest naming the part existed before the
//! lease was deleted, so before step 2, and step 3 reads it. A part a commit found and took
//! (not written under its lease): the commit wrote its lease and then read the `gc` leases;
//! this `gc` wrote its lease (4) and then read the commit leases (5). One of the two reads sees
//! the other's lease: either the commit does not take the part, or step 5 keeps it (or, the
//! commit having finished since, step 6 reads its manifest). A lease that cannot be read counts
//! as live, naming every part, until it is dead: it never makes `gc` remove more.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use super::lease::{read_leases, HeldLease, Leases, LEASE_TTL};
use super::RemoteManifests;
use crate::error::{Error, Result};
use crate::format::lease::LeaseKind;
use crate::format::source::SOURCE_FILE;
use crate::remote::manifest::{COMMITS, PROBES};
use crate::remote::store::{block_on, Store, StoreOptions};
use crate::store::collection::gc::{decode, is_older, referenced, GcReport};
use crate::store::collection::manifests::{ManifestStore, Step};

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
/// failed after their retries, or for this `gc`'s own lease lost while it removes (it stops
/// then).
pub(crate) fn gc_url(
    url: &str,
    older_than: Duration,
    now: SystemTime,
    options: &StoreOptions,
) -> Result<GcReport> {
    let store = Store::open(url, options)?;
    // 1. The parts.
    let mut parts = list_parts(&store)?;
    // 2. The commit leases.
    let leases = read_leases(&store, now, LeaseKind::Commit)?;
    // 3. The manifests.
    let remote = RemoteManifests::new(Arc::clone(&store));
    let manifests = Reading::new(&remote);
    let (mut named, count) = referenced(&manifests)?;
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
    let mut doomed: Vec<String> = Vec::new();
    for (id, p) in &parts {
        let old = p.newest.is_some_and(|t| is_older(now, t, older_than));
        if old && !named.contains(id) && !holds(&leases, id) {
            doomed.push(id.clone());
        } else {
            report.kept.push(id.clone());
        }
    }
    if !doomed.is_empty() {
        // 4. This gc's lease, naming what it is about to remove.
        let own = HeldLease::take(&store, LeaseKind::Gc, doomed.clone())?;
        // 5. The commit leases again, and 6. the manifests created since step 3.
        let again = read_leases(&store, now, LeaseKind::Commit)?;
        named.extend(manifests.read_new()?);
        let (going, staying): (Vec<String>, Vec<String>) = doomed
            .into_iter()
            .partition(|id| !named.contains(id) && !holds(&again, id));
        report.kept.extend(staying);
        report.kept.sort();
        for id in going {
            let Some(mut p) = parts.remove(&id) else {
                continue;
            };
            // Its commits first: what is left of a deletion cut short is no dataset; its
            // provenance record last: it is removed with the part, never before its data.
            let commits = format!("parts/{id}/{COMMITS}/");
            let record = format!("parts/{id}/{SOURCE_FILE}");
            p.keys
                .sort_by_key(|k| (!k.starts_with(&commits), *k == record));
            delete_all(&store, p.keys, Some(&own))?;
            report.removed.push(id);
            report.bytes_freed = report.bytes_freed.saturating_add(p.bytes);
        }
        if let Err(e) = own.release() {
            // It dies within LEASE_TTL; until then commits take none of the parts it names,
            // which are gone.
            tracing::debug!("deleting gc's lease: {e}");
        }
    }
    // Leftovers: probes older than the limit and than LEASE_TTL (a live committer's probe
    // lives for two requests: one that old is a killed committer's), and dead leases (whatever
    // the limit: they hold nothing).
    let s = Arc::clone(&store);
    let probes = block_on(async move { s.list_objects(PROBES).await })??;
    let probe_limit = older_than.max(LEASE_TTL);
    let mut stale: Vec<(String, u64)> = probes
        .into_iter()
        .filter(|(_, _, at)| is_older(now, *at, probe_limit))
        .map(|(k, size, _)| (k, size))
        .collect();
    stale.extend(leases.dead);
    report.leftovers = stale.len() as u64;
    report.bytes_freed = report
        .bytes_freed
        .saturating_add(stale.iter().map(|(_, s)| s).sum());
    delete_all(&store, stale.into_iter().map(|(k, _)| k).collect(), None)?;
    Ok(report)
}

/// Whether `leases` hold part `id`: a live lease names it, or a live lease cannot be read.
fn holds(leases: &Leases, id: &str) -> bool {
    leases.unreadable.is_some() || leases.parts.contains(id)
}

/// The objects under `parts/`, by part id.
fn list_parts(store: &Arc<Store>) -> Result<BTreeMap<String, PartObjects>> {
    let s = Arc::clone(store);
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
    Ok(parts)
}

/// Deletes `keys` in order; with `lease`, only while it is held (checked before each).
fn delete_all(store: &Arc<Store>, keys: Vec<String>, lease: Option<&HeldLease>) -> Result<()> {
    for k in keys {
        if let Some(l) = lease {
            l.check()?;
        }
        let s = Arc::clone(store);
        block_on(async move { s.delete(&k).await })??;
    }
    Ok(())
}

/// A collection's manifests, remembering which were read: so a second look reads only the
/// manifests created since the first.
#[derive(Debug)]
struct Reading<'a> {
    inner: &'a RemoteManifests,
    read: Mutex<HashSet<u64>>,
}

impl<'a> Reading<'a> {
    fn new(inner: &'a RemoteManifests) -> Reading<'a> {
        Reading {
            inner,
            read: Mutex::new(HashSet::new()),
        }
    }

    /// The part ids the manifests not read yet name.
    ///
    /// # Errors
    /// As [`referenced`].
    fn read_new(&self) -> Result<HashSet<String>> {
        let mut ids = HashSet::new();
        for n in self.inner.list()? {
            if self.was_read(n) {
                continue;
            }
            let m = decode(self, n, &self.read(n)?)?;
            ids.extend(m.parts.into_iter().map(|p| p.id));
        }
        Ok(ids)
    }

    fn was_read(&self, number: u64) -> bool {
        self.read.lock().is_ok_and(|r| r.contains(&number))
    }
}

impl ManifestStore for Reading<'_> {
    fn name_of(&self, number: u64) -> PathBuf {
        self.inner.name_of(number)
    }

    fn list(&self) -> Result<Vec<u64>> {
        self.inner.list()
    }

    fn read(&self, number: u64) -> Result<Vec<u8>> {
        let bytes = self.inner.read(number)?;
        if let Ok(mut r) = self.read.lock() {
            r.insert(number);
        }
        Ok(bytes)
    }

    fn create_new(&self, number: u64, _: &[u8], _: Step<'_>) -> Result<bool> {
        Err(Error::internal(format!(
            "gc tried to create manifest {number} of {}",
            self.inner.name_of(number).display()
        )))
    }
}
