//! A dataset on an object store: immutable data objects named by their content, and numbered
//! commit manifests, each created only if absent. See docs/FORMAT.md, "On an object store".
//!
//! ```text
//! <prefix>/
//! ├── _zrecord/commits/00000000000000000001.json   commit slot 1: a manifest
//! ├── _zrecord/commits/00000000000000000002.json   slot 2: the latest is the dataset
//! └── data/
//!     ├── chunk/00000.zr.<blake3>.<size>.<crc32c>            the committed bytes of a chunk
//!     ├── <field>.<gen>.offsets.<blake3>.<size>.<crc32c>     an offset table's entries
//!     ├── <field>.<gen>.patches.<blake3>.<size>.<crc32c>     a patch log's records
//!     └── <field>.<n>.zdict.<blake3>.<size>.<crc32c>         a zstd dictionary (format v2)
//! ```
//!
//! A data key names its content by the BLAKE3 hash of all of its bytes. Version 1 manifests
//! (written before version 2) named objects `data/<file>.<size>.<crc32c>` only, which does not
//! name content: an offset table's CRC32C depends only on its number of entries (every entry
//! ends with the CRC32C of its own first bytes, and CRC is linear). They are still read as they
//! are; a push always writes version 2.

use serde::{Deserialize, Serialize};

use super::store::Store;
use crate::error::{Error, Result};
use crate::format::entry::{ENTRY_BYTES, PATCH_BYTES};
use crate::format::envelope;
use crate::format::meta::{Meta, MetaError};

/// Where commit manifests live, under the dataset prefix.
pub(crate) const COMMITS: &str = "_zrecord/commits";

/// Where a push's probe of the store's conditional create lives, under the dataset prefix
/// (deleted again right after the probe).
pub(crate) const PROBES: &str = "_zrecord/probes";

/// The `format` of a manifest.
const FORMAT: &str = "zrecord-remote";

/// The manifest version this build writes: data keys carry a BLAKE3 hash of the content.
const VERSION: u32 = 2;

/// The first manifest version, still read: data keys carry only size and CRC32C.
const VERSION_CRC_KEYS: u32 = 1;

/// The key of commit slot `slot`.
pub(crate) fn slot_key(slot: u64) -> String {
    format!("{COMMITS}/{slot:020}.json")
}

/// The slot a commit key names, `None` for anything else.
pub(crate) fn slot_of(key: &str) -> Option<u64> {
    let name = key.strip_prefix(COMMITS)?.strip_prefix('/')?;
    let digits = name.strip_suffix(".json")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// The key of the data object holding `file` (a dataset-relative file name) with `size` bytes,
/// BLAKE3 hash `blake3` (64 lowercase hex digits) and checksum `crc`. The size and CRC32C come
/// last, so a reader of the key (the chunk cache) checks a fill against them.
pub(crate) fn data_key(file: &str, blake3: &str, size: u64, crc: u32) -> String {
    format!("data/{file}.{blake3}.{size}.{crc:08x}")
}

/// The key a version 1 manifest names for `file`: size and CRC32C only, not a content name.
pub(crate) fn crc_data_key(file: &str, size: u64, crc: u32) -> String {
    format!("data/{file}.{size}.{crc:08x}")
}

/// True if `hex` is a BLAKE3 hash as keys spell it: 64 lowercase hex digits.
fn is_blake3_hex(hex: &str) -> bool {
    hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// One file of a dataset's commit and the object holding its committed bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ObjectEntry {
    /// The file, relative to the dataset directory (`chunk/00000.zr`, `label.0.offsets`).
    pub(crate) file: String,
    /// The data object's key, relative to the dataset prefix.
    pub(crate) object: String,
    /// Its size in bytes.
    pub(crate) size: u64,
    /// CRC32C of its bytes.
    pub(crate) crc32c: u32,
    /// BLAKE3 hash of its bytes, 64 lowercase hex digits; absent in version 1 manifests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) blake3: Option<String>,
}

impl ObjectEntry {
    /// The entry of `file` whose committed bytes have `size`, `crc32c` and hash `blake3` (hex),
    /// under its content key.
    pub(crate) fn new(file: String, size: u64, crc32c: u32, blake3: String) -> Self {
        Self {
            object: data_key(&file, &blake3, size, crc32c),
            file,
            size,
            crc32c,
            blake3: Some(blake3),
        }
    }

    /// The key this entry must name in a manifest of `version`, `None` if the entry does not
    /// fit that version (a hash missing, malformed, or present in version 1).
    fn expected_key(&self, version: u32) -> Option<String> {
        match (version, &self.blake3) {
            (VERSION_CRC_KEYS, None) => Some(crc_data_key(&self.file, self.size, self.crc32c)),
            (VERSION, Some(h)) if is_blake3_hex(h) => {
                Some(data_key(&self.file, h, self.size, self.crc32c))
            }
            _ => None,
        }
    }
}

/// The body of a commit manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Manifest {
    pub(crate) format: String,
    pub(crate) version: u32,
    /// The dataset's generation (its `meta.json`'s).
    pub(crate) generation: u64,
    /// The exact text of the commit's `meta.json`.
    pub(crate) meta: String,
    /// Every file the commit names, in the order [`required_files`] lists them.
    pub(crate) objects: Vec<ObjectEntry>,
}

/// The files a commit names, with their committed sizes: every field's offset table, patch log
/// and zstd dictionaries, then every chunk.
pub(crate) fn required_files(meta: &Meta) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for f in &meta.fields {
        for d in &f.dictionaries {
            out.push((format!("{}.{}.zdict", f.name, d.number), d.bytes));
        }
        let t = f.table;
        out.push((
            format!("{}.{}.offsets", f.name, t.generation),
            t.table_len.saturating_mul(ENTRY_BYTES as u64),
        ));
        out.push((
            format!("{}.{}.patches", f.name, t.generation),
            t.patch_len.saturating_mul(PATCH_BYTES as u64),
        ));
    }
    for c in &meta.chunks {
        out.push((format!("chunk/{:05}.zr", c.id), c.size));
    }
    out
}

impl Manifest {
    /// A manifest for `meta_text` and its objects.
    pub(crate) fn new(generation: u64, meta_text: String, objects: Vec<ObjectEntry>) -> Self {
        Self {
            format: FORMAT.into(),
            version: VERSION,
            generation,
            meta: meta_text,
            objects,
        }
    }

    /// The manifest as stored: the body in the checksummed envelope (`crate::format::envelope`),
    /// without a final newline.
    pub(crate) fn encode(&self) -> Result<Vec<u8>> {
        let body = serde_json::to_string(self).map_err(|e| Error::Internal {
            reason: format!("encoding a manifest: {e}"),
        })?;
        Ok(envelope::seal_without_newline("manifest", &body))
    }

    /// Decodes and checks a stored manifest (`object` names it in errors): the envelope's
    /// checksum, the format and version, the commit's `meta.json`, and that the objects are
    /// exactly the files the meta names, each with its committed size and a data key that names
    /// its content.
    pub(crate) fn decode(object: &str, bytes: &[u8]) -> Result<(Manifest, Meta)> {
        let corrupt = |reason: String| Error::RemoteCorrupt {
            object: object.to_string(),
            reason,
        };
        let body = envelope::open("manifest", bytes).map_err(|e| corrupt(e.0))?;
        let m: Manifest =
            serde_json::from_str(body).map_err(|e| corrupt(format!("malformed manifest: {e}")))?;
        if m.format != FORMAT || !(m.version == VERSION || m.version == VERSION_CRC_KEYS) {
            return Err(corrupt(format!(
                "format {:?} version {}, this build reads {FORMAT:?} versions \
                 {VERSION_CRC_KEYS} and {VERSION}",
                m.format, m.version
            )));
        }
        let meta = Meta::decode(m.meta.as_bytes()).map_err(|e| match e {
            MetaError::Corrupt(reason) => corrupt(format!("its meta.json: {reason}")),
            MetaError::Version(found) => corrupt(format!(
                "its meta.json has format version {found}, this build reads {}",
                crate::format::FORMAT_VERSION
            )),
        })?;
        if meta.generation != m.generation {
            return Err(corrupt(format!(
                "generation {} but its meta.json has generation {}",
                m.generation, meta.generation
            )));
        }
        let required = required_files(&meta);
        if required.len() != m.objects.len() {
            return Err(corrupt(format!(
                "{} objects listed, the commit names {} files",
                m.objects.len(),
                required.len()
            )));
        }
        for ((file, size), o) in required.iter().zip(&m.objects) {
            let key = o.expected_key(m.version);
            if &o.file != file || o.size != *size || key.as_deref() != Some(o.object.as_str()) {
                return Err(corrupt(format!(
                    "object {:?} ({} bytes, blake3 {:?}) listed for {:?}, the commit names \
                     {file:?} of {size} bytes; a version {} manifest names it {}",
                    o.object,
                    o.size,
                    o.blake3,
                    o.file,
                    m.version,
                    key.map_or_else(
                        || "with a 64-hex-digit blake3 from version 2 on, without before".into(),
                        |k| format!("{k:?}")
                    )
                )));
            }
        }
        Ok((m, meta))
    }
}

/// The latest commit slot on `store` and its bytes, `None` if there is none. Listing may lag
/// behind creates on some stores, so the slots after the highest listed are probed too.
pub(crate) async fn latest(store: &Store) -> Result<Option<(u64, bytes::Bytes)>> {
    let listed = store.list(COMMITS).await?;
    let mut slot = listed.iter().filter_map(|k| slot_of(k)).max();
    loop {
        let next = slot.map_or(1, |s| s.saturating_add(1));
        if Some(next) == slot || store.head(&slot_key(next)).await?.is_none() {
            break;
        }
        slot = Some(next);
    }
    match slot {
        None => Ok(None),
        Some(s) => Ok(Some((s, store.get(&slot_key(s)).await?))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_keys_round_trip() {
        assert_eq!(slot_key(7), "_zrecord/commits/00000000000000000007.json");
        assert_eq!(slot_of(&slot_key(7)), Some(7));
        assert_eq!(slot_of(&slot_key(u64::MAX)), Some(u64::MAX));
        assert_eq!(slot_of("_zrecord/commits/7.json"), None);
        assert_eq!(slot_of("_zrecord/commits/0000000000000000000x.json"), None);
        assert_eq!(slot_of("data/chunk/00000.zr.1.0"), None);
    }

    /// The meta text of a small real dataset.
    fn meta_text() -> String {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ds");
        let schema = crate::Schema::new().field(crate::Field::new("x", crate::DType::U8));
        let mut w = crate::Writer::create(&dir, &schema, crate::WriterConfig::default()).unwrap();
        w.append(&[b"record".to_vec()]).unwrap();
        w.commit().unwrap();
        drop(w);
        std::fs::read_to_string(dir.join("meta.json")).unwrap()
    }

    /// A manifest of `version` for the dataset of `text`, entries made by `entry(file, size)`.
    fn manifest(
        text: &str,
        version: u32,
        entry: impl Fn(String, u64) -> ObjectEntry,
    ) -> (Manifest, Vec<u8>) {
        let meta = Meta::decode(text.as_bytes()).unwrap();
        let objects = required_files(&meta)
            .into_iter()
            .map(|(f, size)| entry(f, size))
            .collect();
        let mut m = Manifest::new(meta.generation, text.to_string(), objects);
        m.version = version;
        let bytes = m.encode().unwrap();
        (m, bytes)
    }

    const HASH: &str = "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262";

    #[test]
    fn content_keys_round_trip() {
        let text = meta_text();
        let (m, bytes) = manifest(&text, VERSION, |f, size| {
            ObjectEntry::new(f, size, 7, HASH.into())
        });
        let (back, _) = Manifest::decode("m", &bytes).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.version, 2);
        for o in &back.objects {
            assert_eq!(
                o.object,
                format!("data/{}.{HASH}.{}.00000007", o.file, o.size)
            );
        }
    }

    #[test]
    fn version_1_manifests_are_read_as_they_are() {
        let text = meta_text();
        let legacy = |file: String, size: u64| ObjectEntry {
            object: crc_data_key(&file, size, 0xefa6_fbaf),
            file,
            size,
            crc32c: 0xefa6_fbaf,
            blake3: None,
        };
        let (m, bytes) = manifest(&text, 1, legacy);
        // A version 1 manifest as stored: no `blake3` member.
        assert!(!String::from_utf8_lossy(&bytes).contains("blake3"));
        let (back, _) = Manifest::decode("m", &bytes).unwrap();
        assert_eq!(back, m);
        assert!(back.objects.iter().all(|o| o.object.ends_with(".efa6fbaf")));
    }

    #[test]
    fn keys_that_do_not_fit_the_version_are_refused() {
        let text = meta_text();
        // Version 2 without a hash, with a malformed hash, with a key that is not its content
        // key; version 1 with a hash.
        type Entry = Box<dyn Fn(String, u64) -> ObjectEntry>;
        let cases: Vec<(u32, Entry)> = vec![
            (
                2,
                Box::new(|file: String, size| ObjectEntry {
                    object: crc_data_key(&file, size, 7),
                    file,
                    size,
                    crc32c: 7,
                    blake3: None,
                }),
            ),
            (
                2,
                Box::new(|file: String, size| {
                    let mut e = ObjectEntry::new(file, size, 7, "AB".repeat(32));
                    e.object = data_key(&e.file, &"AB".repeat(32), size, 7);
                    e
                }),
            ),
            (
                2,
                Box::new(|file: String, size| {
                    let mut e = ObjectEntry::new(file, size, 7, HASH.into());
                    e.object = crc_data_key(&e.file, size, 7);
                    e
                }),
            ),
            (
                1,
                Box::new(|file: String, size| ObjectEntry::new(file, size, 7, HASH.into())),
            ),
        ];
        for (n, (version, entry)) in cases.iter().enumerate() {
            let (_, bytes) = manifest(&text, *version, entry);
            match Manifest::decode("m", &bytes) {
                Err(Error::RemoteCorrupt { object, .. }) => assert_eq!(object, "m"),
                other => panic!("case {n}: {other:?}"),
            }
        }
    }
}
