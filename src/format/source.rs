//! A part's provenance record: `_source` in a part placed under a collection's `parts/` (a file
//! in the part's directory locally, the object `parts/<id>/_source` on a store), naming where
//! the part came from, so that a commit recognises its own earlier copy of a part by where it
//! came from and never by its bytes alone. Readers of datasets and collections ignore it.
//!
//! The file is one JSON object, the envelope `{"source":{...},"crc32c":N}` of `meta.json` and of
//! a collection manifest: `N` is the CRC32C of the exact bytes of the `source` value as they
//! appear in the file. See `docs/FORMAT.md`, "Collections".

use super::meta::MetaError;
use serde::{Deserialize, Serialize};

/// The name of the record, in a part's directory (and in a source dataset's directory).
pub const SOURCE_FILE: &str = "_source";

/// The `format` of every provenance record.
pub const SOURCE_FORMAT: &str = "zrecord-part-source";

/// The provenance record version this build reads and writes.
pub const SOURCE_VERSION: u32 = 1;

/// Where a part came from: the source dataset's directory on a host, and a nonce drawn once for
/// that directory's dataset (a new dataset written at the same path draws another).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartSource {
    /// Always [`SOURCE_FORMAT`].
    pub format: String,
    /// [`SOURCE_VERSION`].
    pub version: u32,
    /// The host name of the machine the source directory is on (empty if unknown).
    pub host: String,
    /// The source directory's absolute path: its parent's canonical path joined with its name.
    pub path: String,
    /// 16 hex digits drawn when the record was first written into the source directory.
    pub nonce: String,
    /// When the record was first written, in milliseconds since the Unix epoch: of several
    /// parts from one path, the newest is the latest dataset written there.
    pub created_unix_ms: u64,
}

impl PartSource {
    /// Encodes the envelope: the bytes of a `_source` file.
    pub fn encode(&self) -> Vec<u8> {
        // Serialising a plain data struct to JSON cannot fail; the fallback keeps this
        // panic-free.
        let body = serde_json::to_string(self).unwrap_or_default();
        super::envelope::seal("source", &body)
    }

    /// Decodes and checks a record: the envelope's CRC32C, the format and the version.
    ///
    /// # Errors
    /// [`MetaError::Version`] for a well-formed record of another version;
    /// [`MetaError::Corrupt`] for anything else wrong.
    pub fn decode(bytes: &[u8]) -> Result<PartSource, MetaError> {
        let body = super::envelope::open("source", bytes)?;
        let v: serde_json::Value =
            serde_json::from_str(body).map_err(|e| MetaError::Corrupt(e.to_string()))?;
        if v.get("format").and_then(|f| f.as_str()) != Some(SOURCE_FORMAT) {
            return Err(MetaError::Corrupt(format!(
                "format is not {SOURCE_FORMAT:?}"
            )));
        }
        match v.get("version").and_then(serde_json::Value::as_u64) {
            Some(v) if v == u64::from(SOURCE_VERSION) => {}
            Some(v) => return Err(MetaError::Version(u32::try_from(v).unwrap_or(u32::MAX))),
            None => return Err(MetaError::Corrupt("no version".into())),
        }
        serde_json::from_str(body).map_err(|e| MetaError::Corrupt(e.to_string()))
    }
}

/// The id a part from `source` tries at its `attempt`-th try (from 0): `base` first, then `base`
/// with a suffix derived from the record's nonce, so a retry of a commit tries the same ids in
/// the same order and finds its earlier copy wherever a taken name sent it, and parts from
/// other sources try other suffixes.
pub fn candidate_id(base: &str, source: &PartSource, attempt: u64) -> String {
    if attempt == 0 {
        return base.to_string();
    }
    let nonce = u64::from_str_radix(&source.nonce, 16)
        .unwrap_or_else(|_| u64::from(crate::checksum::crc32c(source.nonce.as_bytes())));
    let word = crate::hash::hash(&[nonce, attempt]);
    format!("{base}-{word:016x}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    fn sample() -> PartSource {
        PartSource {
            format: SOURCE_FORMAT.into(),
            version: SOURCE_VERSION,
            host: "node-7".into(),
            path: "/scratch/task-3/p".into(),
            nonce: "0123456789abcdef".into(),
            created_unix_ms: 1_764_000_000_000,
        }
    }

    #[test]
    fn record_round_trips() {
        assert_eq!(PartSource::decode(&sample().encode()).unwrap(), sample());
    }

    #[test]
    fn every_bit_flip_and_truncation_is_an_error() {
        let bytes = sample().encode();
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                if let Ok(s) = PartSource::decode(&b) {
                    // Only whitespace-equivalent flips of the envelope may still decode.
                    assert_eq!(s, sample(), "byte {i} bit {bit}");
                }
            }
        }
        for n in 0..bytes.len() - 1 {
            assert!(PartSource::decode(&bytes[..n]).is_err(), "truncated to {n}");
        }
    }

    #[test]
    fn another_version_is_refused_by_number() {
        let mut s = sample();
        s.version = 2;
        assert_eq!(PartSource::decode(&s.encode()), Err(MetaError::Version(2)));
    }

    #[test]
    fn candidate_ids_are_stable_and_differ_by_source() {
        let a = sample();
        let mut b = sample();
        b.nonce = "fedcba9876543210".into();
        assert_eq!(candidate_id("p", &a, 0), "p");
        assert_eq!(candidate_id("p", &a, 1), candidate_id("p", &a, 1));
        assert_ne!(candidate_id("p", &a, 1), candidate_id("p", &a, 2));
        assert_ne!(candidate_id("p", &a, 1), candidate_id("p", &b, 1));
        assert!(crate::format::collection::valid_part_id(&candidate_id(
            &"x".repeat(111),
            &a,
            5
        )));
    }
}
