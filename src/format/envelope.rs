//! The checksummed JSON envelope of zrecord's small records: one JSON object
//! `{"<name>":{...},"crc32c":N}`, where `N` is the CRC32C of the exact bytes of the `<name>`
//! value as they appear in the file. Every one is written and checked here: `meta.json`
//! (`meta`), collection manifests (`collection`), provenance records (`source`), collection
//! leases (`lease`) and the commit manifests of datasets on object stores (`manifest`, the one
//! written without a final newline). See `docs/FORMAT.md`.

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use std::fmt;

/// Wraps the JSON text `body` in the envelope under `name`, then a newline: the bytes of the
/// record's file.
pub(crate) fn seal(name: &str, body: &str) -> Vec<u8> {
    let mut out = seal_without_newline(name, body);
    out.push(b'\n');
    out
}

/// [`seal`] without the final newline: the bytes of a dataset's commit manifest on an object
/// store, written so since its first version (a newline would change every manifest's bytes).
pub(crate) fn seal_without_newline(name: &str, body: &str) -> Vec<u8> {
    let crc = crate::checksum::crc32c(body.as_bytes());
    let mut out = Vec::with_capacity(body.len().saturating_add(name.len()).saturating_add(36));
    out.extend_from_slice(format!("{{\"{name}\":").as_bytes());
    out.extend_from_slice(body.as_bytes());
    out.extend_from_slice(format!(",\"crc32c\":{crc}}}").as_bytes());
    debug_assert!(open(name, &out).is_ok(), "an envelope opens: {name}");
    out
}

/// Why envelope bytes did not open: the reason, for the record's own corruption error
/// (`MetaError::Corrupt` of a file, `Error::RemoteCorrupt` of an object), which names it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Corrupt(pub(crate) String);

/// The JSON text of the `name` value in the envelope `bytes`, once its CRC32C is checked.
///
/// # Errors
/// [`Corrupt`] for bytes that are not exactly an envelope with the keys `name` and `crc32c`
/// (each once), or whose checksum does not match.
pub(crate) fn open<'a>(name: &str, bytes: &'a [u8]) -> Result<&'a str, Corrupt> {
    let corrupt = |why: String| Corrupt(format!("not a zrecord {name} envelope: {why}"));
    let Entries(entries) = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
    if entries.len() != 2 {
        return Err(corrupt(format!("{} keys, not 2", entries.len())));
    }
    let value = |key: &str| {
        entries
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.get())
    };
    let body = value(name).ok_or_else(|| corrupt(format!("no {name:?} key")))?;
    let stored: u32 = value("crc32c")
        .ok_or_else(|| corrupt("no \"crc32c\" key".into()))
        .and_then(|v| serde_json::from_str(v).map_err(|e| corrupt(e.to_string())))?;
    let crc = crate::checksum::crc32c(body.as_bytes());
    if crc != stored {
        return Err(Corrupt(format!(
            "checksum mismatch: stored {stored:#010x}, computed {crc:#010x}"
        )));
    }
    Ok(body)
}

/// A JSON object's keys and raw values in file order, a key given twice kept twice (so an
/// envelope with a repeated key has more than two and is refused).
struct Entries<'a>(Vec<(&'a str, &'a RawValue)>);

impl<'de: 'a, 'a> Deserialize<'de> for Entries<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Keys<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for Keys<'a> {
            type Value = Entries<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Entries<'a>, M::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry::<&'de str, &'de RawValue>()? {
                    out.push(entry);
                }
                Ok(Entries(out))
            }
        }
        deserializer.deserialize_map(Keys(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    #[test]
    fn an_envelope_round_trips_and_checks_its_body() {
        let bytes = seal("thing", r#"{"a":1,"b":"x"}"#);
        assert_eq!(
            bytes,
            format!(
                "{{\"thing\":{{\"a\":1,\"b\":\"x\"}},\"crc32c\":{}}}\n",
                crate::checksum::crc32c(br#"{"a":1,"b":"x"}"#)
            )
            .as_bytes()
        );
        assert_eq!(open("thing", &bytes).unwrap(), r#"{"a":1,"b":"x"}"#);
        let bare = seal_without_newline("thing", r#"{"a":1}"#);
        assert_eq!(bare.last(), Some(&b'}'));
        assert_eq!(open("thing", &bare).unwrap(), r#"{"a":1}"#);
        assert!(open("other", &bytes).is_err());
        let flipped = String::from_utf8(bytes).unwrap().replace("\"x\"", "\"y\"");
        assert!(matches!(
            open("thing", flipped.as_bytes()),
            Err(Corrupt(m)) if m.contains("checksum mismatch")
        ));
        assert!(open("thing", br#"{"thing":{},"crc32c":0,"more":1}"#).is_err());
        assert!(open("thing", b"").is_err());
    }

    /// Not an object with `name` and `crc32c` once each: corrupt, whatever else parses.
    #[test]
    fn an_envelope_of_another_shape_is_corrupt() {
        let body = r#"{"a":1}"#;
        let crc = crate::checksum::crc32c(body.as_bytes());
        for bad in [
            format!(r#"{{"thing":{body},"thing":{body},"crc32c":{crc}}}"#),
            format!(r#"{{"thing":{body},"crc32c":{crc},"crc32c":{crc}}}"#),
            format!(r#"[{body},{crc}]"#),
            format!(r#"{{"thing":{body}}}"#),
            format!(r#"{{"thing":{body},"crc32c":"{crc}"}}"#),
            format!(r#"{{"thing":{body},"crc32c":{crc}}} trailing"#),
        ] {
            assert!(open("thing", bad.as_bytes()).is_err(), "{bad}");
        }
        let good = format!(r#"{{"crc32c":{crc}, "thing":{body}}}"#);
        assert_eq!(open("thing", good.as_bytes()).unwrap(), body);
    }
}
