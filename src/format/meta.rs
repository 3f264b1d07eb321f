//! `meta.json`: the commit point of a dataset.
//!
//! The file is one JSON object, the envelope `{"meta":{...},"crc32c":N}`, where `N` is the
//! CRC32C of the exact bytes of the `meta` value as they appear in the file. The body carries the
//! format version, the commit generation, the record count, the chunk list with committed sizes,
//! each field's schema and offset-table cursor, and the user's attributes (format version 3).
//! See `docs/FORMAT.md`.

use super::dtype::{Codec, DType};
use super::{FORMAT_VERSION, MAX_CHUNKS, MAX_CHUNK_BYTES, MAX_RECORDS, MAX_TABLE_ENTRIES};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A dataset's user attributes: string keys to JSON values (`meta.json`'s `attributes`).
pub type Attributes = BTreeMap<String, serde_json::Value>;

/// The most bytes the attributes of a dataset take, encoded as the JSON object in `meta.json`.
pub const MAX_ATTRIBUTES_BYTES: usize = 1 << 20;

/// The longest attribute key, in bytes.
pub const MAX_ATTRIBUTE_KEY_BYTES: usize = 256;

/// The committed state of a dataset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Meta {
    /// Always `"zrecord"`.
    pub format: String,
    /// The format version ([`FORMAT_VERSION`]).
    pub version: u32,
    /// Incremented by every commit.
    pub generation: u64,
    /// Number of records.
    pub len: u64,
    /// Size at which a chunk is sealed and a fresh one started.
    pub chunk_size_bytes: u64,
    /// The fields, in schema order.
    pub fields: Vec<FieldMeta>,
    /// Every chunk referenced by some live record (and possibly a few that are not), with the
    /// committed size: bytes past it are not part of the dataset.
    pub chunks: Vec<ChunkMeta>,
    /// The user's attributes (format version 3), written only when there are some: string keys
    /// (1–256 bytes) to JSON values, at most [`MAX_ATTRIBUTES_BYTES`] encoded.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: Attributes,
}

/// A field's schema and the cursor of its offset table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldMeta {
    /// The field's name: 1–64 characters of `[A-Za-z0-9_-]`.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Fixed item shape, if any: every present record is exactly `product(shape)` items.
    pub shape: Option<Vec<u64>>,
    /// Codec for new records.
    pub codec: Codec,
    /// The field's offset table and patch log.
    pub table: TableMeta,
    /// The zstd dictionaries records of this field may name (format version 2; only for a
    /// [`Codec::ZstdDict`] field). Each is the file `<field>.<number>.zdict`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dictionaries: Vec<DictionaryMeta>,
}

/// A field's trained zstd dictionary: `<field>.<number>.zdict`, written and fsynced before the
/// commit that names it, never rewritten.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DictionaryMeta {
    /// The number records name in their offset entries (1–255).
    pub number: u8,
    /// The file's length in bytes.
    pub bytes: u64,
    /// CRC32C of the file's bytes.
    pub crc32c: u32,
}

/// The largest dictionary file a reader accepts.
pub const MAX_DICTIONARY_FILE_BYTES: u64 = 1 << 20;

/// Which offset table and patch log hold a field's entries, and how much of each is committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableMeta {
    /// The table generation: the files are `<field>.<generation>.offsets` and
    /// `<field>.<generation>.patches`.
    pub generation: u64,
    /// Committed entries in the offsets file.
    pub table_len: u64,
    /// Committed entries in the patch log.
    pub patch_len: u64,
}

/// A chunk file and its committed size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChunkMeta {
    /// The chunk id: the file is `chunk/<id>.zr`.
    pub id: u16,
    /// Committed size in bytes.
    pub size: u64,
}

#[derive(Deserialize)]
struct VersionOnly {
    format: String,
    version: u32,
}

/// Why a `meta.json` could not be decoded.
#[derive(Debug, PartialEq, Eq)]
pub enum MetaError {
    /// Unparseable, failed its checksum, or inconsistent.
    Corrupt(String),
    /// A well-formed file of another format version.
    Version(u32),
}

impl From<super::envelope::Corrupt> for MetaError {
    fn from(e: super::envelope::Corrupt) -> Self {
        MetaError::Corrupt(e.0)
    }
}

impl Meta {
    /// Encodes the envelope: the bytes written to `meta.json`.
    pub fn encode(&self) -> Vec<u8> {
        // Serialising plain data structs to JSON cannot fail; the fallback keeps this panic-free.
        let body = serde_json::to_string(self).unwrap_or_default();
        super::envelope::seal("meta", &body)
    }

    /// Decodes and checks `meta.json` bytes.
    pub fn decode(bytes: &[u8]) -> Result<Meta, MetaError> {
        let body = super::envelope::open("meta", bytes)?;
        let v: VersionOnly = serde_json::from_str(body)
            .map_err(|e| MetaError::Corrupt(format!("no format/version: {e}")))?;
        if v.format != "zrecord" {
            return Err(MetaError::Corrupt(format!(
                "format is {:?}, not \"zrecord\"",
                v.format
            )));
        }
        if v.version == 0 || v.version > FORMAT_VERSION {
            return Err(MetaError::Version(v.version));
        }
        let meta: Meta =
            serde_json::from_str(body).map_err(|e| MetaError::Corrupt(e.to_string()))?;
        meta.validate().map_err(MetaError::Corrupt)?;
        Ok(meta)
    }

    /// The lowest format version that holds this meta: 3 if it has attributes, else 2 if a
    /// field uses zstd or names a dictionary, else 1. Every commit writes this version.
    pub fn required_version(&self) -> u32 {
        if !self.attributes.is_empty() {
            return 3;
        }
        let v2 = self
            .fields
            .iter()
            .any(|f| f.codec.needs_v2() || !f.dictionaries.is_empty());
        if v2 {
            2
        } else {
            1
        }
    }

    /// Checks the invariants every committed meta satisfies.
    pub fn validate(&self) -> Result<(), String> {
        validate_fields(
            self.fields
                .iter()
                .map(|f| (f.name.as_str(), f.dtype, f.shape.as_deref())),
        )?;
        if self.chunk_size_bytes == 0 || self.chunk_size_bytes > MAX_CHUNK_BYTES {
            return Err(format!(
                "chunk_size_bytes {} out of range",
                self.chunk_size_bytes
            ));
        }
        if self.chunks.len() > MAX_CHUNKS as usize {
            return Err(format!(
                "{} chunks, more than {MAX_CHUNKS}",
                self.chunks.len()
            ));
        }
        let mut ids: Vec<u16> = self.chunks.iter().map(|c| c.id).collect();
        ids.sort_unstable();
        if ids.windows(2).any(|w| matches!(w, [a, b] if a == b)) {
            return Err("duplicate chunk id".to_string());
        }
        if let Some(c) = self
            .chunks
            .iter()
            .find(|c| c.size > MAX_CHUNK_BYTES || u32::from(c.id) >= MAX_CHUNKS)
        {
            return Err(format!("chunk {} out of range", c.id));
        }
        if self.len > MAX_RECORDS {
            return Err(format!(
                "len {} is past the limit of {MAX_RECORDS} records",
                self.len
            ));
        }
        if self.version < self.required_version() {
            return Err(format!(
                "version {} cannot hold {} (version {} can)",
                self.version,
                if self.attributes.is_empty() {
                    "a zstd field"
                } else {
                    "attributes"
                },
                self.required_version()
            ));
        }
        validate_attributes(&self.attributes)?;
        for f in &self.fields {
            if !f.dictionaries.is_empty() && !matches!(f.codec, Codec::ZstdDict { .. }) {
                return Err(format!(
                    "field {:?} has dictionaries but codec {}",
                    f.name, f.codec
                ));
            }
            let mut numbers: Vec<u8> = f.dictionaries.iter().map(|d| d.number).collect();
            numbers.sort_unstable();
            if numbers.windows(2).any(|w| matches!(w, [a, b] if a == b))
                || numbers.first() == Some(&0)
            {
                return Err(format!(
                    "field {:?}: dictionary numbers must be 1-255 and distinct",
                    f.name
                ));
            }
            if let Some(d) = f
                .dictionaries
                .iter()
                .find(|d| d.bytes == 0 || d.bytes > MAX_DICTIONARY_FILE_BYTES)
            {
                return Err(format!(
                    "field {:?}: dictionary {} of {} bytes (1 to {MAX_DICTIONARY_FILE_BYTES})",
                    f.name, d.number, d.bytes
                ));
            }
            let t = f.table;
            if t.table_len > MAX_TABLE_ENTRIES || t.patch_len > MAX_TABLE_ENTRIES {
                return Err(format!(
                    "field {:?}: table_len {} or patch_len {} is past the limit of \
                     {MAX_TABLE_ENTRIES} entries",
                    f.name, t.table_len, t.patch_len
                ));
            }
            // Patches only ever replace entries below table_len, so the table covers len.
            if f.table.table_len < self.len {
                return Err(format!(
                    "field {:?}: table of {} entries cannot cover {} records",
                    f.name, f.table.table_len, self.len
                ));
            }
        }
        Ok(())
    }

    /// Index of the field named `name`.
    pub fn field_index(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }
}

/// Checks attributes: keys of 1–[`MAX_ATTRIBUTE_KEY_BYTES`] bytes, at most
/// [`MAX_ATTRIBUTES_BYTES`] encoded.
pub fn validate_attributes(attributes: &Attributes) -> Result<(), String> {
    if let Some(k) = attributes
        .keys()
        .find(|k| k.is_empty() || k.len() > MAX_ATTRIBUTE_KEY_BYTES)
    {
        return Err(format!(
            "attribute key of {} bytes (1 to {MAX_ATTRIBUTE_KEY_BYTES})",
            k.len()
        ));
    }
    let bytes = serde_json::to_vec(attributes).map_or(usize::MAX, |v| v.len());
    if bytes > MAX_ATTRIBUTES_BYTES {
        return Err(format!(
            "attributes take {bytes} bytes, more than {MAX_ATTRIBUTES_BYTES}"
        ));
    }
    Ok(())
}

/// Checks field names (unique, 1–64 of `[A-Za-z0-9_-]`) and shapes (no overflow).
pub fn validate_fields<'a>(
    fields: impl Iterator<Item = (&'a str, DType, Option<&'a [u64]>)>,
) -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    for (name, dtype, shape) in fields {
        let ok = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !ok {
            return Err(format!(
                "field name {name:?} must be 1-64 characters of A-Z, a-z, 0-9, '_' or '-'"
            ));
        }
        if !seen.insert(name) {
            return Err(format!("duplicate field name {name:?}"));
        }
        if let Some(shape) = shape {
            let items = shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
            if items
                .and_then(|n| n.checked_mul(dtype.item_bytes()))
                .is_none()
            {
                return Err(format!("field {name:?}: shape {shape:?} overflows"));
            }
        }
    }
    if seen.is_empty() {
        return Err("a dataset needs at least one field".to_string());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Meta {
        Meta {
            format: "zrecord".into(),
            version: 1,
            generation: 3,
            len: 10,
            chunk_size_bytes: 1 << 20,
            fields: vec![FieldMeta {
                name: "image".into(),
                dtype: DType::F32,
                shape: Some(vec![2, 3]),
                codec: Codec::Deflate,
                table: TableMeta {
                    generation: 1,
                    table_len: 10,
                    patch_len: 2,
                },
                dictionaries: Vec::new(),
            }],
            chunks: vec![ChunkMeta { id: 0, size: 100 }, ChunkMeta { id: 5, size: 7 }],
            attributes: Attributes::new(),
        }
    }

    #[test]
    fn attributes_need_version_3_and_a_bounded_size() {
        let mut m = sample();
        m.attributes
            .insert("classes".into(), serde_json::json!(["cat", "dog"]));
        assert_eq!(m.required_version(), 3);
        // Versions 1 and 2 cannot hold them.
        assert!(matches!(
            Meta::decode(&m.encode()),
            Err(MetaError::Corrupt(_))
        ));
        m.version = 3;
        assert_eq!(Meta::decode(&m.encode()), Ok(m.clone()));
        let text = String::from_utf8(m.encode()).unwrap();
        assert!(
            text.contains(r#""attributes":{"classes":["cat","dog"]}"#),
            "{text}"
        );
        for bad in [String::new(), "k".repeat(MAX_ATTRIBUTE_KEY_BYTES + 1)] {
            let mut b = m.clone();
            b.attributes.insert(bad, serde_json::Value::Null);
            assert!(matches!(
                Meta::decode(&b.encode()),
                Err(MetaError::Corrupt(_))
            ));
        }
        let mut big = m.clone();
        big.attributes.insert(
            "big".into(),
            serde_json::Value::String("x".repeat(MAX_ATTRIBUTES_BYTES)),
        );
        assert!(matches!(
            Meta::decode(&big.encode()),
            Err(MetaError::Corrupt(_))
        ));
        // Not an object: refused.
        let text = String::from_utf8(m.encode()).unwrap();
        let body_start = text.find('{').unwrap() + 1;
        let body = &text[body_start..];
        let body = &body[body.find('{').unwrap()..body.rfind(",\"crc32c\"").unwrap()];
        let bad = body.replace(r#"{"classes":["cat","dog"]}"#, "[1]");
        let sealed = crate::format::envelope::seal("meta", &bad);
        assert!(matches!(Meta::decode(&sealed), Err(MetaError::Corrupt(_))));
        // Without attributes there is no "attributes" key: byte-identical to older builds.
        let text = String::from_utf8(sample().encode()).unwrap();
        assert!(!text.contains("attributes"), "{text}");
    }

    #[test]
    fn meta_round_trips() {
        let m = sample();
        assert_eq!(Meta::decode(&m.encode()).unwrap(), m);
    }

    #[test]
    fn every_bit_flip_and_truncation_is_an_error() {
        let b = sample().encode();
        for bit in 0..b.len() * 8 {
            let mut d = b.clone();
            d[bit / 8] ^= 1 << (bit % 8);
            // A flip in the trailing newline is harmless whitespace; everything else must fail.
            if bit / 8 == b.len() - 1 && (d[bit / 8] as char).is_ascii_whitespace() {
                continue;
            }
            assert!(Meta::decode(&d).is_err(), "flip of bit {bit} not detected");
        }
        for n in 0..b.len() - 1 {
            assert!(
                Meta::decode(&b[..n]).is_err(),
                "truncation to {n} not detected"
            );
        }
    }

    /// Lengths whose byte sizes would wrap past 2^64 (× 24) are refused at decode, so nothing
    /// downstream computes with them.
    #[test]
    fn lengths_past_their_limits_are_refused() {
        let wrap = u64::MAX / 24 + 2;
        for (len, table_len, patch_len) in [
            (10, wrap, 0),
            (10, 10, wrap),
            (MAX_RECORDS + 1, MAX_RECORDS + 1, 0),
            (10, MAX_TABLE_ENTRIES + 1, 0),
        ] {
            let mut m = sample();
            m.len = len;
            m.fields[0].table.table_len = table_len;
            m.fields[0].table.patch_len = patch_len;
            assert!(
                matches!(Meta::decode(&m.encode()), Err(MetaError::Corrupt(_))),
                "{len} {table_len} {patch_len}"
            );
        }
    }

    #[test]
    fn unknown_version_is_refused_by_number() {
        let mut m = sample();
        m.version = 99;
        assert_eq!(Meta::decode(&m.encode()), Err(MetaError::Version(99)));
        m.version = 0;
        assert_eq!(Meta::decode(&m.encode()), Err(MetaError::Version(0)));
    }

    #[test]
    fn zstd_needs_version_2_and_dictionaries_a_dictionary_field() {
        let mut m = sample();
        assert_eq!(m.required_version(), 1);
        m.fields[0].codec = Codec::zstd_dict();
        m.fields[0].dictionaries = vec![DictionaryMeta {
            number: 1,
            bytes: 4096,
            crc32c: 7,
        }];
        assert_eq!(m.required_version(), 2);
        // A version 1 meta cannot hold it.
        assert!(matches!(
            Meta::decode(&m.encode()),
            Err(MetaError::Corrupt(_))
        ));
        m.version = 2;
        assert_eq!(Meta::decode(&m.encode()), Ok(m.clone()));
        let text = String::from_utf8(m.encode()).unwrap();
        assert!(
            text.contains(r#""codec":{"zstd_dict":{"level":3}}"#),
            "{text}"
        );
        // Dictionaries on another codec, number 0, duplicates, empty or huge files.
        let mut bad = m.clone();
        bad.fields[0].codec = Codec::zstd();
        assert!(Meta::decode(&bad.encode()).is_err());
        for d in [(0u8, 10u64), (1, 0), (1, MAX_DICTIONARY_FILE_BYTES + 1)] {
            let mut bad = m.clone();
            bad.fields[0].dictionaries[0].number = d.0;
            bad.fields[0].dictionaries[0].bytes = d.1;
            assert!(Meta::decode(&bad.encode()).is_err(), "{d:?}");
        }
        let mut bad = m.clone();
        let d = bad.fields[0].dictionaries[0];
        bad.fields[0].dictionaries.push(d);
        assert!(Meta::decode(&bad.encode()).is_err());
        // A version 1 meta without dictionaries has no "dictionaries" key: byte-identical to
        // what builds before zstd wrote.
        let text = String::from_utf8(sample().encode()).unwrap();
        assert!(!text.contains("dictionaries"), "{text}");
    }

    #[test]
    fn bad_field_names_are_refused() {
        for bad in ["", "a/b", "..", "x y", &"n".repeat(65)] {
            assert!(
                validate_fields([(bad, DType::U8, None)].into_iter()).is_err(),
                "{bad:?}"
            );
        }
        assert!(
            validate_fields([("a", DType::U8, None), ("a", DType::U8, None)].into_iter()).is_err()
        );
        assert!(
            validate_fields([("a", DType::F64, Some(&[u64::MAX, 2][..]))].into_iter()).is_err()
        );
    }
}
