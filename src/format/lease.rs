//! A lease of a collection on an object store: the object `_collection/leases/<kind>-<nonce>.json`
//! that a live process keeps fresh (writes again every quarter of the lease's lifetime) while
//! it works on the parts it names. A `commit` lease holds parts a commit pushes or takes: `gc`
//! removes none of them while the lease is live. A `gc` lease names the parts a `gc` is about
//! to remove: a commit takes none of them. Readers ignore leases.
//!
//! The object is one JSON object in the envelope of `meta.json` (`{"lease":{...},"crc32c":N}`,
//! [`super::envelope`]). See `docs/FORMAT.md`, "Collections".

use super::envelope;
use super::meta::MetaError;
use serde::{Deserialize, Serialize};

/// The `format` of every lease.
pub const LEASE_FORMAT: &str = "zrecord-collection-lease";

/// The lease version this build reads and writes.
pub const LEASE_VERSION: u32 = 1;

/// The directory of a collection's leases, relative to its root.
pub const LEASE_DIR: &str = "_collection/leases";

/// What a lease's holder does with the parts it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LeaseKind {
    /// A commit pushes or takes them: `gc` keeps them.
    Commit,
    /// A `gc` removes them: a commit takes none of them.
    Gc,
}

impl LeaseKind {
    /// The word that starts the lease's file name and its `kind`.
    pub fn word(self) -> &'static str {
        match self {
            LeaseKind::Commit => "commit",
            LeaseKind::Gc => "gc",
        }
    }
}

/// A lease's record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lease {
    /// Always [`LEASE_FORMAT`].
    pub format: String,
    /// [`LEASE_VERSION`].
    pub version: u32,
    /// Commit or gc.
    pub kind: LeaseKind,
    /// 16 hex digits drawn by the holder: the lease's name.
    pub nonce: String,
    /// The host name of the holder's machine (empty if unknown), for people reading it.
    pub host: String,
    /// The holder's process id, for people reading it.
    pub pid: u32,
    /// When the lease was first written, in milliseconds since the Unix epoch. Its liveness is
    /// the object's last-modified time, not this.
    pub created_unix_ms: u64,
    /// The ids of the parts it holds (or removes).
    pub parts: Vec<String>,
}

impl Lease {
    /// The name of the lease's object in [`LEASE_DIR`]: `<kind>-<nonce>.json`.
    pub fn file_name(&self) -> String {
        format!("{}-{}.json", self.kind.word(), self.nonce)
    }

    /// Encodes the envelope: the bytes of the lease's object.
    pub fn encode(&self) -> Vec<u8> {
        // Serialising a plain data struct to JSON cannot fail; the fallback keeps this
        // panic-free.
        envelope::seal("lease", &serde_json::to_string(self).unwrap_or_default())
    }

    /// Decodes and checks a lease: the envelope's CRC32C, the format and the version.
    ///
    /// # Errors
    /// [`MetaError::Version`] for a well-formed lease of another version;
    /// [`MetaError::Corrupt`] for anything else wrong.
    pub fn decode(bytes: &[u8]) -> Result<Lease, MetaError> {
        let body = envelope::open("lease", bytes)?;
        let v: serde_json::Value =
            serde_json::from_str(body).map_err(|e| MetaError::Corrupt(e.to_string()))?;
        if v.get("format").and_then(|f| f.as_str()) != Some(LEASE_FORMAT) {
            return Err(MetaError::Corrupt(format!(
                "format is not {LEASE_FORMAT:?}"
            )));
        }
        match v.get("version").and_then(serde_json::Value::as_u64) {
            Some(v) if v == u64::from(LEASE_VERSION) => {}
            Some(v) => return Err(MetaError::Version(u32::try_from(v).unwrap_or(u32::MAX))),
            None => return Err(MetaError::Corrupt("no version".into())),
        }
        serde_json::from_str(body).map_err(|e| MetaError::Corrupt(e.to_string()))
    }
}

/// The kind a lease's object name says (`commit-….json` or `gc-….json`); `None` for another
/// name.
pub fn kind_of_name(name: &str) -> Option<LeaseKind> {
    let stem = name.strip_suffix(".json")?;
    [LeaseKind::Commit, LeaseKind::Gc].into_iter().find(|k| {
        stem.strip_prefix(k.word())
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(|nonce| !nonce.is_empty())
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    fn sample() -> Lease {
        Lease {
            format: LEASE_FORMAT.into(),
            version: LEASE_VERSION,
            kind: LeaseKind::Commit,
            nonce: "0123456789abcdef".into(),
            host: "node-7".into(),
            pid: 4242,
            created_unix_ms: 1_764_000_000_000,
            parts: vec!["task-0".into(), "task-1-00ff00ff00ff00ff".into()],
        }
    }

    #[test]
    fn lease_round_trips_and_is_named_by_kind() {
        let l = sample();
        assert_eq!(Lease::decode(&l.encode()).unwrap(), l);
        assert_eq!(l.file_name(), "commit-0123456789abcdef.json");
        assert_eq!(kind_of_name(&l.file_name()), Some(LeaseKind::Commit));
        assert_eq!(kind_of_name("gc-0a.json"), Some(LeaseKind::Gc));
        assert_eq!(kind_of_name("gc-.json"), None);
        assert_eq!(kind_of_name("commit-1.tmp"), None);
        assert_eq!(kind_of_name("00000000000000000001.json"), None);
    }

    #[test]
    fn every_bit_flip_and_truncation_is_an_error() {
        let bytes = sample().encode();
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                if let Ok(l) = Lease::decode(&b) {
                    // Only whitespace-equivalent flips of the envelope may still decode.
                    assert_eq!(l, sample(), "byte {i} bit {bit}");
                }
            }
        }
        for n in 0..bytes.len() - 1 {
            assert!(Lease::decode(&bytes[..n]).is_err(), "truncated to {n}");
        }
    }

    #[test]
    fn another_version_is_refused_by_number() {
        let mut l = sample();
        l.version = 2;
        assert_eq!(Lease::decode(&l.encode()), Err(MetaError::Version(2)));
    }
}
