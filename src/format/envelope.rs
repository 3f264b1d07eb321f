//! The checksummed JSON envelope of zrecord's small records: one JSON object
//! `{"<name>":{...},"crc32c":N}`, where `N` is the CRC32C of the exact bytes of the `<name>`
//! value as they appear in the file. Collection manifests, provenance records and collection
//! leases are read and written here; `meta.json` (the same envelope) still has its own copy of
//! the code in `meta.rs`. See `docs/FORMAT.md`.

use super::meta::MetaError;
use serde_json::value::RawValue;

/// Wraps the JSON text `body` in the envelope under `name`: the bytes of the record's file.
pub(crate) fn seal(name: &str, body: &str) -> Vec<u8> {
    let crc = crate::checksum::crc32c(body.as_bytes());
    let mut out = Vec::with_capacity(body.len().saturating_add(name.len()).saturating_add(36));
    out.extend_from_slice(format!("{{\"{name}\":").as_bytes());
    out.extend_from_slice(body.as_bytes());
    out.extend_from_slice(format!(",\"crc32c\":{crc}}}\n").as_bytes());
    out
}

/// The JSON text of the `name` value in the envelope `bytes`, once its CRC32C is checked.
///
/// # Errors
/// [`MetaError::Corrupt`] for bytes that are not exactly an envelope with the keys `name` and
/// `crc32c`, or whose checksum does not match.
pub(crate) fn open<'a>(name: &str, bytes: &'a [u8]) -> Result<&'a str, MetaError> {
    let corrupt = |why: String| MetaError::Corrupt(format!("not a zrecord {name} envelope: {why}"));
    let map: std::collections::BTreeMap<&'a str, &'a RawValue> =
        serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
    if map.len() != 2 {
        return Err(corrupt(format!("{} keys, not 2", map.len())));
    }
    let body = map
        .get(name)
        .ok_or_else(|| corrupt(format!("no {name:?} key")))?
        .get();
    let stored: u32 = map
        .get("crc32c")
        .ok_or_else(|| corrupt("no \"crc32c\" key".into()))
        .and_then(|v| serde_json::from_str(v.get()).map_err(|e| corrupt(e.to_string())))?;
    let crc = crate::checksum::crc32c(body.as_bytes());
    if crc != stored {
        return Err(MetaError::Corrupt(format!(
            "checksum mismatch: stored {stored:#010x}, computed {crc:#010x}"
        )));
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    #[test]
    fn an_envelope_round_trips_and_checks_its_body() {
        let bytes = seal("thing", r#"{"a":1,"b":"x"}"#);
        assert_eq!(open("thing", &bytes).unwrap(), r#"{"a":1,"b":"x"}"#);
        assert!(open("other", &bytes).is_err());
        let flipped = String::from_utf8(bytes).unwrap().replace("\"x\"", "\"y\"");
        assert!(open("thing", flipped.as_bytes()).is_err());
        assert!(open("thing", br#"{"thing":{},"crc32c":0,"more":1}"#).is_err());
        assert!(open("thing", b"").is_err());
    }
}
