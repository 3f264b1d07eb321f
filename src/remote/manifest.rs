//! A dataset on an object store: immutable data objects named by their content, and numbered
//! commit manifests, each created only if absent. See docs/FORMAT.md, "On an object store".
//!
//! ```text
//! <prefix>/
//! ├── _zrecord/commits/00000000000000000001.json   commit slot 1: a manifest
//! ├── _zrecord/commits/00000000000000000002.json   slot 2: the latest is the dataset
//! └── data/
//!     ├── chunk/00000.zr.<size>.<crc32c>            the committed bytes of a chunk
//!     ├── <field>.<gen>.offsets.<size>.<crc32c>     an offset table's committed entries
//!     └── <field>.<gen>.patches.<size>.<crc32c>     a patch log's committed records
//! ```

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::checksum::crc32c;
use crate::error::{Error, Result};
use crate::format::entry::{ENTRY_BYTES, PATCH_BYTES};
use crate::format::meta::{Meta, MetaError};

/// Where commit manifests live, under the dataset prefix.
pub(crate) const COMMITS: &str = "_zrecord/commits";

/// The `format` of a manifest.
const FORMAT: &str = "zrecord-remote";

/// The manifest version this build reads and writes.
const VERSION: u32 = 1;

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

/// The key of the data object holding `file` (a dataset-relative file name) with `size` bytes
/// and checksum `crc`.
pub(crate) fn data_key(file: &str, size: u64, crc: u32) -> String {
    format!("data/{file}.{size}.{crc:08x}")
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

#[derive(Serialize)]
struct EnvelopeOut<'a> {
    manifest: &'a RawValue,
    crc32c: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EnvelopeIn<'a> {
    #[serde(borrow)]
    manifest: &'a RawValue,
    crc32c: u32,
}

/// The files a commit names, with their committed sizes: every field's offset table and patch
/// log, then every chunk.
pub(crate) fn required_files(meta: &Meta) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for f in &meta.fields {
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

    /// The manifest as stored: the body and its CRC32C.
    pub(crate) fn encode(&self) -> Result<Vec<u8>> {
        let internal = |e: serde_json::Error| Error::Internal {
            reason: format!("encoding a manifest: {e}"),
        };
        let body = serde_json::to_string(self).map_err(internal)?;
        let raw = RawValue::from_string(body).map_err(internal)?;
        let out = EnvelopeOut {
            crc32c: crc32c(raw.get().as_bytes()),
            manifest: &raw,
        };
        serde_json::to_vec(&out).map_err(internal)
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
        let env: EnvelopeIn<'_> = serde_json::from_slice(bytes)
            .map_err(|e| corrupt(format!("not a commit manifest: {e}")))?;
        let body = env.manifest.get();
        let crc = crc32c(body.as_bytes());
        if crc != env.crc32c {
            return Err(corrupt(format!(
                "checksum {crc:#010x} of the manifest, {:#010x} recorded",
                env.crc32c
            )));
        }
        let m: Manifest =
            serde_json::from_str(body).map_err(|e| corrupt(format!("malformed manifest: {e}")))?;
        if m.format != FORMAT || m.version != VERSION {
            return Err(corrupt(format!(
                "format {:?} version {}, this build reads {FORMAT:?} version {VERSION}",
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
            if &o.file != file || o.size != *size || o.object != data_key(file, *size, o.crc32c) {
                return Err(corrupt(format!(
                    "object {:?} ({} bytes) listed for {:?}, the commit names {file:?} of \
                     {size} bytes as {:?}",
                    o.object,
                    o.size,
                    o.file,
                    data_key(file, *size, o.crc32c)
                )));
            }
        }
        Ok((m, meta))
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
}
