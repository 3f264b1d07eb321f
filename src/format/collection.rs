//! A collection manifest: `_collection/<number>.json`, the commit point of a collection.
//!
//! The file is one JSON object, the envelope `{"collection":{...},"crc32c":N}`, where `N` is the
//! CRC32C of the exact bytes of the `collection` value as they appear in the file (the envelope
//! of `meta.json`, [`super::meta`]). The body carries the format name and version, the
//! manifest's number, the schema's fields and the parts in global index order. See
//! `docs/FORMAT.md`, "Collections".

use super::dtype::{Codec, DType};
use super::meta::{validate_fields, MetaError};
use super::MAX_RECORDS;
use serde::{Deserialize, Serialize};

/// The `format` of every collection manifest.
pub const COLLECTION_FORMAT: &str = "zrecord-collection";

/// The newest collection manifest version this build reads and writes.
pub const COLLECTION_VERSION: u32 = 1;

/// The longest part id.
pub const MAX_PART_ID_BYTES: usize = 128;

/// One numbered manifest of a collection: its schema and its parts, in global index order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Always [`COLLECTION_FORMAT`].
    pub format: String,
    /// [`COLLECTION_VERSION`].
    pub version: u32,
    /// The manifest's number (1, 2, …): its file is `_collection/<number>.json`, and it is the
    /// collection's generation.
    pub number: u64,
    /// The schema every part has: the fields of the first commit's first part.
    pub fields: Vec<ManifestField>,
    /// The parts; part `k`'s records are the global indices from the sum of the lengths before
    /// it.
    pub parts: Vec<PartMeta>,
}

/// A field of a collection's schema.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestField {
    /// The field's name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Fixed item shape, if any.
    pub shape: Option<Vec<u64>>,
    /// The field's codec.
    pub codec: Codec,
}

/// A part of a collection: an ordinary dataset, pinned at the generation it was committed with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartMeta {
    /// The part's unique id: 1–128 characters of `[A-Za-z0-9_.-]`, not starting with `.`.
    pub id: String,
    /// Where the part is, relative to the collection's root: `parts/<id>`.
    pub path: String,
    /// The part's record count at `generation`.
    pub len: u64,
    /// The part's commit generation: a part is immutable once committed, and one found at
    /// another generation is refused.
    pub generation: u64,
}

#[derive(Deserialize)]
struct VersionOnly {
    format: String,
    version: u32,
}

/// Whether `id` is a valid part id: 1–128 characters of `[A-Za-z0-9_.-]`, not starting with
/// `.` (so never `.` or `..`, and never a hidden temporary name).
pub fn valid_part_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_PART_ID_BYTES
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// `parts/<id>`: where a part lives in its collection.
pub fn part_path(id: &str) -> String {
    format!("parts/{id}")
}

impl Manifest {
    /// Encodes the envelope: the bytes written to `_collection/<number>.json`.
    pub fn encode(&self) -> Vec<u8> {
        // Serialising plain data structs to JSON cannot fail; the fallback keeps this panic-free.
        let body = serde_json::to_string(self).unwrap_or_default();
        super::envelope::seal("collection", &body)
    }

    /// Decodes and checks manifest bytes: the envelope's CRC32C, the format and version, then
    /// the body ([`Manifest::validate`]).
    ///
    /// # Errors
    /// [`MetaError::Version`] for a well-formed manifest of another version;
    /// [`MetaError::Corrupt`] for anything else wrong.
    pub fn decode(bytes: &[u8]) -> Result<Manifest, MetaError> {
        let body = super::envelope::open("collection", bytes)?;
        let v: VersionOnly = serde_json::from_str(body)
            .map_err(|e| MetaError::Corrupt(format!("no format/version: {e}")))?;
        if v.format != COLLECTION_FORMAT {
            return Err(MetaError::Corrupt(format!(
                "format is {:?}, not {COLLECTION_FORMAT:?}",
                v.format
            )));
        }
        if v.version != COLLECTION_VERSION {
            return Err(MetaError::Version(v.version));
        }
        let m: Manifest =
            serde_json::from_str(body).map_err(|e| MetaError::Corrupt(e.to_string()))?;
        m.validate().map_err(MetaError::Corrupt)?;
        Ok(m)
    }

    /// Checks the invariants every manifest satisfies: valid fields, a number from 1, part ids
    /// valid and distinct, each part at `parts/<id>`, each part's length within [`MAX_RECORDS`]
    /// (a part is a dataset) and their sum without overflow.
    ///
    /// # Errors
    /// What is wrong, as text.
    pub fn validate(&self) -> Result<(), String> {
        validate_fields(
            self.fields
                .iter()
                .map(|f| (f.name.as_str(), f.dtype, f.shape.as_deref())),
        )?;
        if self.number == 0 {
            return Err("manifest number 0 (numbers start at 1)".to_string());
        }
        let mut seen = std::collections::HashSet::with_capacity(self.parts.len());
        let mut total = 0u64;
        for p in &self.parts {
            if !valid_part_id(&p.id) {
                return Err(format!(
                    "part id {:?} must be 1-{MAX_PART_ID_BYTES} characters of A-Z, a-z, 0-9, \
                     '_', '-' or '.', not starting with '.'",
                    p.id
                ));
            }
            if !seen.insert(p.id.as_str()) {
                return Err(format!("part {:?} is listed twice", p.id));
            }
            if p.path != part_path(&p.id) {
                return Err(format!(
                    "part {:?} is at {:?}, not {:?}",
                    p.id,
                    p.path,
                    part_path(&p.id)
                ));
            }
            if p.len > MAX_RECORDS {
                return Err(format!("part {:?}: len {} out of range", p.id, p.len));
            }
            total = total
                .checked_add(p.len)
                .ok_or_else(|| "the parts' lengths overflow".to_string())?;
        }
        Ok(())
    }

    /// The total record count: the sum of the parts' lengths (saturating; a decoded manifest
    /// never overflows).
    pub fn total_len(&self) -> u64 {
        self.parts
            .iter()
            .fold(0u64, |acc, p| acc.saturating_add(p.len))
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::indexing_slicing,
        clippy::arithmetic_side_effects
    )]
    use super::*;

    fn sample() -> Manifest {
        Manifest {
            format: COLLECTION_FORMAT.into(),
            version: COLLECTION_VERSION,
            number: 3,
            fields: vec![ManifestField {
                name: "image".into(),
                dtype: DType::F32,
                shape: Some(vec![2, 3]),
                codec: Codec::Deflate,
            }],
            parts: vec![
                PartMeta {
                    id: "task-0".into(),
                    path: "parts/task-0".into(),
                    len: 10,
                    generation: 1,
                },
                PartMeta {
                    id: "task-1.b".into(),
                    path: "parts/task-1.b".into(),
                    len: 0,
                    generation: 2,
                },
            ],
        }
    }

    #[test]
    fn manifest_round_trips() {
        let m = sample();
        assert_eq!(Manifest::decode(&m.encode()).unwrap(), m);
        assert_eq!(m.total_len(), 10);
    }

    #[test]
    fn every_bit_flip_and_truncation_is_an_error() {
        let bytes = sample().encode();
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                if let Ok(m) = Manifest::decode(&b) {
                    // Only whitespace-equivalent flips of the envelope may still decode.
                    assert_eq!(m, sample(), "byte {i} bit {bit}");
                }
            }
        }
        for n in 0..bytes.len() - 1 {
            assert!(Manifest::decode(&bytes[..n]).is_err(), "truncated to {n}");
        }
    }

    #[test]
    fn unknown_version_is_refused_by_number() {
        let mut m = sample();
        m.version = 9;
        assert_eq!(Manifest::decode(&m.encode()), Err(MetaError::Version(9)));
    }

    #[test]
    fn bad_parts_are_refused() {
        let bad = |f: &dyn Fn(&mut Manifest)| {
            let mut m = sample();
            f(&mut m);
            assert!(
                matches!(Manifest::decode(&m.encode()), Err(MetaError::Corrupt(_))),
                "{m:?}"
            );
        };
        bad(&|m| m.parts[1].id = "task-0".into());
        bad(&|m| m.parts[1].id = "..".into());
        bad(&|m| m.parts[1].id = "a/b".into());
        bad(&|m| m.parts[1].path = "../elsewhere".into());
        bad(&|m| m.number = 0);
        bad(&|m| m.fields.clear());
        bad(&|m| m.format = "zrecord".into());
    }
}
