//! Leases of a collection on an object store (`_collection/leases/<kind>-<nonce>.json`, the
//! record of `format/lease.rs`): how a commit keeps `gc` off the parts it pushes and takes, and
//! how `gc` keeps a commit off the parts it removes, without a lock.
//!
//! A holder writes its lease before it relies on it and writes it again every
//! [`LEASE_TTL`]` / 4` while it works (a task on the object-store runtime); it deletes the lease
//! when it is done. A lease whose object was last modified more than [`LEASE_TTL`] ago is dead:
//! its holder died or lost the store, and the lease holds nothing. A holder whose writes did
//! not succeed for [`LEASE_TTL`]` / 2` (requests failing, the process stopped) has lost its
//! lease, even if a later write succeeds: another process may have taken it for dead meanwhile.
//! It publishes nothing on the lease's word then ([`HeldLease::check`]).
//!
//! Liveness is judged by the reader's clock against the store's last-modified times, so the
//! clocks of the machines that run `gc` and commits must agree with the store's to within
//! [`LEASE_TTL`]` / 2` (5 minutes).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use super::RemoteManifests;
use crate::error::{Error, Result};
use crate::format::lease::{
    kind_of_name, Lease, LeaseKind, LEASE_DIR, LEASE_FORMAT, LEASE_VERSION,
};
use crate::format::meta::MetaError;
use crate::remote::store::{block_on, spawn_abortable, Store};
use crate::store::collection::gc::is_older;
use crate::store::collection::manifests::{ManifestStore, Step};

/// How long a lease lives after it was last written: 10 minutes. A committer or `gc` that
/// dies leaves its lease, which holds its parts (or keeps commits off them) for at most this
/// long; then `gc` removes the lease, and the parts by the usual age rule.
pub const LEASE_TTL: Duration = Duration::from_secs(600);

/// How often a holder writes its lease again.
const REFRESH: Duration = Duration::from_secs(LEASE_TTL.as_secs() / 4);

/// How long a holder may go without a successful write before its lease counts as lost.
const LAPSE: Duration = Duration::from_secs(LEASE_TTL.as_secs() / 2);

/// Whether a lease last modified at `at` is live at `now`: not older than [`LEASE_TTL`].
pub(crate) fn is_live(now: SystemTime, at: SystemTime) -> bool {
    !is_older(now, at, LEASE_TTL)
}

/// When a holder's writes succeeded.
#[derive(Clone, Copy, Debug)]
struct Clock {
    /// When the last successful write was started.
    last_ok: Instant,
    /// Two successful writes (or the first and now) were more than [`LAPSE`] apart.
    lost: bool,
}

impl Clock {
    /// Notes a successful write started at `started`.
    fn written(&mut self, started: Instant) {
        if started.saturating_duration_since(self.last_ok) > LAPSE {
            self.lost = true;
        }
        self.last_ok = self.last_ok.max(started);
    }

    /// Whether the lease has been held without a gap until `now`.
    fn held(&self, now: Instant) -> bool {
        !self.lost && now.saturating_duration_since(self.last_ok) <= LAPSE
    }
}

/// A lease's record and whether it was released.
struct Record {
    lease: Lease,
    released: bool,
}

/// What the holder and its refresh task share.
struct Shared {
    store: Arc<Store>,
    key: String,
    /// Held across each write, so writes reach the store in the order they are made (a refresh
    /// never lands after, and undoes, a write that added parts).
    record: tokio::sync::Mutex<Record>,
    clock: Mutex<Clock>,
}

impl Shared {
    /// Writes `record` (held locked by the caller). Nothing once the lease is released.
    async fn write(&self, record: &Record) -> Result<()> {
        if record.released {
            return Ok(());
        }
        let started = Instant::now();
        self.store
            .put(&self.key, Bytes::from(record.lease.encode()))
            .await?;
        if let Ok(mut clock) = self.clock.lock() {
            clock.written(started);
        }
        Ok(())
    }
}

/// A lease this process holds: written when taken, written again every [`LEASE_TTL`]` / 4`
/// by a task on the object-store runtime until it is released (deleted) or dropped (left to
/// die: a lease dropped without [`HeldLease::release`] holds its parts until it is dead).
pub(crate) struct HeldLease {
    shared: Arc<Shared>,
    refresher: Option<tokio::task::AbortHandle>,
}

impl std::fmt::Debug for HeldLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldLease")
            .field("key", &self.shared.key)
            .finish_non_exhaustive()
    }
}

impl HeldLease {
    /// Takes a new lease of `kind` on the collection at `store` naming `parts`: its object is
    /// written before this returns.
    ///
    /// # Errors
    /// The write's [`Error::Remote`].
    pub(crate) fn take(
        store: &Arc<Store>,
        kind: LeaseKind,
        parts: Vec<String>,
    ) -> Result<HeldLease> {
        let lease = Lease {
            format: LEASE_FORMAT.to_string(),
            version: LEASE_VERSION,
            kind,
            nonce: format!("{:016x}", crate::store::collection::unique_word()),
            host: crate::store::collection::source::host(),
            pid: std::process::id(),
            created_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            parts: dedup(parts),
        };
        let shared = Arc::new(Shared {
            store: Arc::clone(store),
            key: format!("{LEASE_DIR}/{}", lease.file_name()),
            record: tokio::sync::Mutex::new(Record {
                lease,
                released: false,
            }),
            clock: Mutex::new(Clock {
                last_ok: Instant::now(),
                lost: false,
            }),
        });
        let s = Arc::clone(&shared);
        block_on(async move {
            let record = s.record.lock().await;
            s.write(&record).await
        })??;
        let s = Arc::clone(&shared);
        let refresher = spawn_abortable(async move {
            loop {
                tokio::time::sleep(REFRESH).await;
                let record = s.record.lock().await;
                if record.released {
                    break;
                }
                if let Err(e) = s.write(&record).await {
                    // Tried again at the next refresh; a holder that cannot write for long
                    // enough loses the lease ([`HeldLease::check`]).
                    tracing::warn!("refreshing the lease {}: {e}", s.store.object_url(&s.key));
                }
            }
        });
        Ok(HeldLease { shared, refresher })
    }

    /// The lease's URL.
    pub(crate) fn url(&self) -> String {
        self.shared.store.object_url(&self.shared.key)
    }

    /// Adds `parts` to the lease: when this returns, the lease's object names them.
    ///
    /// # Errors
    /// The write's [`Error::Remote`]; [`HeldLease::check`]'s.
    pub(crate) fn hold(&self, parts: &[String]) -> Result<()> {
        let (s, parts) = (Arc::clone(&self.shared), parts.to_vec());
        block_on(async move {
            let mut record = s.record.lock().await;
            let before = record.lease.parts.len();
            for p in parts {
                if !record.lease.parts.contains(&p) {
                    record.lease.parts.push(p);
                }
            }
            if record.lease.parts.len() == before {
                return Ok(());
            }
            s.write(&record).await
        })??;
        self.check()
    }

    /// Whether the lease is still held: every write since it was taken succeeded within
    /// [`LEASE_TTL`]` / 2` of the one before, and the last within that of now. Checked before
    /// anything is published (or removed) on the lease's word.
    ///
    /// # Errors
    /// [`Error::Remote`] naming the lease, if it is lost.
    pub(crate) fn check(&self) -> Result<()> {
        let held = self
            .shared
            .clock
            .lock()
            .map(|c| c.held(Instant::now()))
            .unwrap_or(false);
        if held {
            return Ok(());
        }
        Err(Error::Remote {
            object: self.url(),
            range: None,
            status: None,
            reason: format!(
                "this lease was not written again for more than {} s (requests to the store \
                 failing, or the process stopped), so another process may have taken it for \
                 dead; nothing is published or removed on its word. Run again",
                LAPSE.as_secs()
            ),
        })
    }

    /// Deletes the lease: what it held is no longer held.
    ///
    /// # Errors
    /// The delete's [`Error::Remote`] (the lease is left to die then).
    pub(crate) fn release(mut self) -> Result<()> {
        let s = Arc::clone(&self.shared);
        let out = block_on(async move {
            let mut record = s.record.lock().await;
            record.released = true;
            s.store.delete(&s.key).await
        });
        if let Some(r) = self.refresher.take() {
            r.abort();
        }
        out?
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        if let Some(r) = self.refresher.take() {
            r.abort();
        }
    }
}

/// Each id once, in the order first given.
fn dedup(parts: Vec<String>) -> Vec<String> {
    let mut seen = HashSet::new();
    parts
        .into_iter()
        .filter(|p| seen.insert(p.clone()))
        .collect()
}

/// What the live leases of a collection hold, as read at one time.
#[derive(Debug, Default)]
pub(crate) struct Leases {
    /// Parts a live lease of the kind read names.
    pub(crate) parts: HashSet<String>,
    /// A live lease that may be of the kind read but could not be read as a lease (damaged,
    /// of another version, or under another name): its URL and why. It may name any part.
    pub(crate) unreadable: Option<(String, String)>,
    /// Dead leases, of every kind: key and size.
    pub(crate) dead: Vec<(String, u64)>,
}

/// Reads the leases of the collection at `store` at `now`: the parts live leases of `kind`
/// name, and the dead leases of every kind. A lease deleted after the listing is skipped.
///
/// # Errors
/// [`Error::Remote`] for requests that failed after their retries.
pub(crate) fn read_leases(store: &Arc<Store>, now: SystemTime, kind: LeaseKind) -> Result<Leases> {
    let s = Arc::clone(store);
    let listed = block_on(async move { s.list_objects(LEASE_DIR).await })??;
    let mut out = Leases::default();
    let mut wanted = Vec::new();
    for (key, size, at) in listed {
        if !is_live(now, at) {
            out.dead.push((key, size));
            continue;
        }
        let name = key.rsplit('/').next().unwrap_or("");
        match kind_of_name(name) {
            Some(k) if k != kind => {}
            Some(_) => wanted.push(key),
            None => {
                out.unreadable = Some((
                    store.object_url(&key),
                    "not named like a lease (commit-<nonce>.json or gc-<nonce>.json)".into(),
                ));
            }
        }
    }
    let s = Arc::clone(store);
    let bodies = block_on(async move {
        let mut bodies = Vec::with_capacity(wanted.len());
        for key in wanted {
            match s.get(&key).await {
                Ok(b) => bodies.push((key, b)),
                // Released since the listing: it holds nothing.
                Err(Error::Remote {
                    status: Some(404), ..
                }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(bodies)
    })??;
    for (key, bytes) in bodies {
        match Lease::decode(&bytes) {
            Ok(l) if l.kind == kind => out.parts.extend(l.parts),
            Ok(l) => {
                out.unreadable = Some((
                    store.object_url(&key),
                    format!("a {} lease under another kind's name", l.kind.word()),
                ));
            }
            Err(MetaError::Corrupt(why)) => out.unreadable = Some((store.object_url(&key), why)),
            Err(MetaError::Version(v)) => {
                out.unreadable = Some((
                    store.object_url(&key),
                    format!("lease version {v}; this build reads version {LEASE_VERSION}"),
                ));
            }
        }
    }
    Ok(out)
}

/// The parts live `gc` leases of the collection at `store` name: parts being removed, which
/// no commit may write under or take.
///
/// # Errors
/// [`Error::MetaCorrupt`] naming a live lease that cannot be read (it may name any part);
/// [`read_leases`]'.
pub(crate) fn removing(store: &Arc<Store>) -> Result<HashSet<String>> {
    let leases = read_leases(store, SystemTime::now(), LeaseKind::Gc)?;
    if let Some((url, why)) = leases.unreadable {
        return Err(Error::MetaCorrupt {
            path: PathBuf::from(url),
            reason: format!(
                "a live collection lease that cannot be read ({why}): it may name a part gc is \
                 removing, so nothing is pushed to or taken from the collection's parts/ until \
                 it is dead, {} s after it was last written",
                LEASE_TTL.as_secs()
            ),
        });
    }
    Ok(leases.parts)
}

/// A collection's manifests, created only while a commit's lease is held.
#[derive(Debug)]
pub(crate) struct LeasedManifests<'a> {
    inner: &'a RemoteManifests,
    lease: &'a HeldLease,
    /// A create was tried: its manifest may exist (or land later), naming the lease's parts.
    tried: AtomicBool,
}

impl<'a> LeasedManifests<'a> {
    pub(crate) fn new(inner: &'a RemoteManifests, lease: &'a HeldLease) -> LeasedManifests<'a> {
        LeasedManifests {
            inner,
            lease,
            tried: AtomicBool::new(false),
        }
    }

    /// The lease held.
    pub(crate) fn lease(&self) -> &'a HeldLease {
        self.lease
    }

    /// Whether a create was tried: the lease of a commit that failed after it must be left to
    /// die rather than deleted (a create whose answer was lost may still land).
    pub(crate) fn tried(&self) -> bool {
        self.tried.load(Ordering::SeqCst)
    }
}

impl ManifestStore for LeasedManifests<'_> {
    fn name_of(&self, number: u64) -> PathBuf {
        self.inner.name_of(number)
    }

    fn list(&self) -> Result<Vec<u64>> {
        self.inner.list()
    }

    fn read(&self, number: u64) -> Result<Vec<u8>> {
        self.inner.read(number)
    }

    fn create_new(&self, number: u64, bytes: &[u8], step: Step<'_>) -> Result<bool> {
        // A lease lost on the way (gc may have taken it for dead and removed the parts it
        // holds) publishes nothing.
        self.lease.check()?;
        self.tried.store(true, Ordering::SeqCst);
        self.inner.create_new(number, bytes, step)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_gap_between_writes_loses_the_lease_for_good() {
        let t0 = Instant::now();
        let mut c = Clock {
            last_ok: t0,
            lost: false,
        };
        c.written(t0 + REFRESH);
        assert!(c.held(t0 + REFRESH + REFRESH));
        assert!(!c.held(t0 + REFRESH + LAPSE + Duration::from_secs(1)));
        // A write after the gap succeeds, but the lease may have been taken for dead meanwhile.
        let late = t0 + REFRESH + LAPSE + Duration::from_secs(1);
        c.written(late);
        assert!(!c.held(late));
        // Writes finishing out of order never move the clock back.
        let mut c = Clock {
            last_ok: t0 + REFRESH,
            lost: false,
        };
        c.written(t0);
        assert_eq!(c.last_ok, t0 + REFRESH);
        assert!(c.held(t0 + REFRESH));
    }

    #[test]
    fn a_lease_lives_until_its_ttl_has_passed() {
        let at = UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert!(is_live(at, at));
        assert!(is_live(at + LEASE_TTL, at));
        assert!(!is_live(at + LEASE_TTL + Duration::from_millis(1), at));
        // A lease written after the reader's `now` (clocks apart) is live.
        assert!(is_live(at, at + Duration::from_secs(5)));
    }
}
