//! Element types and codecs of a field, as named in `meta.json`.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The element type of a field's records. Bytes are untyped on disk; the dtype lives in
/// `meta.json` and lets readers hand out typed views.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum DType {
    /// Untyped bytes (item size 1, no typed view).
    Bytes,
    /// `bool`, one byte per item (0 or 1).
    Bool,
    /// `u8`.
    U8,
    /// `i8`.
    I8,
    /// `u16`, little-endian.
    U16,
    /// `i16`, little-endian.
    I16,
    /// `u32`, little-endian.
    U32,
    /// `i32`, little-endian.
    I32,
    /// `u64`, little-endian.
    U64,
    /// `i64`, little-endian.
    I64,
    /// IEEE half precision, little-endian.
    F16,
    /// bfloat16, little-endian.
    Bf16,
    /// `f32`, little-endian.
    F32,
    /// `f64`, little-endian.
    F64,
}

impl DType {
    /// Size of one item in bytes.
    pub fn item_bytes(self) -> u64 {
        match self {
            DType::Bytes | DType::Bool | DType::U8 | DType::I8 => 1,
            DType::U16 | DType::I16 | DType::F16 | DType::Bf16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::U64 | DType::I64 | DType::F64 => 8,
        }
    }

    /// The name used in `meta.json` and in error messages.
    pub fn name(self) -> &'static str {
        match self {
            DType::Bytes => "bytes",
            DType::Bool => "bool",
            DType::U8 => "u8",
            DType::I8 => "i8",
            DType::U16 => "u16",
            DType::I16 => "i16",
            DType::U32 => "u32",
            DType::I32 => "i32",
            DType::U64 => "u64",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a field's records are stored.
///
/// In `meta.json`: `"raw"`, `"deflate"`, `{"zstd":{"level":3}}`, `{"zstd_dict":{"level":3}}`.
/// Every codec compresses each record on its own, so a record is still read alone, and a record
/// that does not shrink is stored raw: the codec actually used is recorded in each record's
/// offset entry (`StoredCodec`, public with the `diagnostics` feature).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Codec {
    /// Stored as given.
    #[default]
    Raw,
    /// Whole-record raw deflate (RFC 1951, libdeflate).
    Deflate,
    /// One zstd frame per record at `level` (1 = fastest … 19; [`Codec::ZSTD_DEFAULT_LEVEL`] is
    /// 3). Needs format version 2: a dataset with a zstd field is refused by readers that only
    /// know version 1.
    Zstd {
        /// The zstd compression level (clamped to 1–19 when writing).
        level: i32,
    },
    /// One zstd frame per record, compressed with a dictionary trained on the field's own
    /// records: small records (captions, JSON, token runs of a few KiB) compress like a whole
    /// stream and stay readable one by one. The writer trains the dictionary on the field's
    /// first records (see `WriterConfig::dictionary_sample_bytes`); records handed to the append
    /// tasks before it exists are plain zstd (a job still being filled when it is trained is
    /// compressed with it). Each record's entry names the dictionary it was written with.
    ZstdDict {
        /// The zstd compression level (clamped to 1–19 when writing).
        level: i32,
    },
}

impl Codec {
    /// zstd's default level, the one `Codec::zstd()` and `Codec::zstd_dict()` use.
    pub const ZSTD_DEFAULT_LEVEL: i32 = 3;

    /// [`Codec::Zstd`] at the default level.
    pub fn zstd() -> Codec {
        Codec::Zstd {
            level: Codec::ZSTD_DEFAULT_LEVEL,
        }
    }

    /// [`Codec::ZstdDict`] at the default level.
    pub fn zstd_dict() -> Codec {
        Codec::ZstdDict {
            level: Codec::ZSTD_DEFAULT_LEVEL,
        }
    }

    /// The codec's name: `raw`, `deflate`, `zstd` or `zstd_dict`.
    pub fn name(self) -> &'static str {
        match self {
            Codec::Raw => "raw",
            Codec::Deflate => "deflate",
            Codec::Zstd { .. } => "zstd",
            Codec::ZstdDict { .. } => "zstd_dict",
        }
    }

    /// Whether records of this codec are decoded on read (everything but raw).
    pub fn compresses(self) -> bool {
        self != Codec::Raw
    }

    /// Whether a dataset with a field of this codec needs format version 2.
    pub(crate) fn needs_v2(self) -> bool {
        matches!(self, Codec::Zstd { .. } | Codec::ZstdDict { .. })
    }

    /// The code of an offset entry of a record stored with this codec (the dictionary codec's
    /// records name a dictionary besides: see `StoredCodec`, public with the `diagnostics`
    /// feature).
    #[deprecated(note = "an entry's codec is a `StoredCodec`; see CHANGELOG.md")]
    pub fn code(self) -> u8 {
        match self {
            Codec::Raw => 0,
            Codec::Deflate => 1,
            Codec::Zstd { .. } => 2,
            Codec::ZstdDict { .. } => 3,
        }
    }

    /// The field codec of an offset entry's codec byte (zstd ones at the default level).
    #[deprecated(
        note = "an entry's codec is a `StoredCodec` (`StoredCodec::from_bytes`); see CHANGELOG.md"
    )]
    pub fn from_code(code: u8) -> Option<Codec> {
        match code {
            0 => Some(Codec::Raw),
            1 => Some(Codec::Deflate),
            2 => Some(Codec::zstd()),
            3 => Some(Codec::zstd_dict()),
            _ => None,
        }
    }
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Codec::Raw | Codec::Deflate => f.write_str(self.name()),
            Codec::Zstd { level } | Codec::ZstdDict { level } => {
                write!(f, "{}:{level}", self.name())
            }
        }
    }
}

/// How one record's bytes are stored: the codec byte (and, for a dictionary, the reserved byte)
/// of its offset entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum StoredCodec {
    /// Stored as given (code 0).
    #[default]
    Raw,
    /// A raw deflate stream (code 1).
    Deflate,
    /// A zstd frame without a dictionary (code 2).
    Zstd,
    /// A zstd frame compressed with the field's dictionary of this number (code 3; the number
    /// is the entry's byte 11).
    ZstdDict(u8),
}

impl StoredCodec {
    /// The entry's codec byte.
    pub fn code(self) -> u8 {
        match self {
            StoredCodec::Raw => 0,
            StoredCodec::Deflate => 1,
            StoredCodec::Zstd => 2,
            StoredCodec::ZstdDict(_) => 3,
        }
    }

    /// The entry's byte 11: the dictionary number, 0 for every other codec.
    pub fn dictionary(self) -> u8 {
        match self {
            StoredCodec::ZstdDict(d) => d,
            _ => 0,
        }
    }

    /// The stored codec of an entry's codec byte and byte 11, if known and consistent.
    pub fn from_bytes(code: u8, dictionary: u8) -> Result<StoredCodec, String> {
        let c = match code {
            0 => StoredCodec::Raw,
            1 => StoredCodec::Deflate,
            2 => StoredCodec::Zstd,
            3 => return Ok(StoredCodec::ZstdDict(dictionary)),
            _ => return Err(format!("unknown codec code {code}")),
        };
        if dictionary != 0 {
            return Err(format!(
                "reserved byte is {dictionary}, not 0 (codec code {code})"
            ));
        }
        Ok(c)
    }

    /// Whether the stored bytes are decoded into the record (everything but raw).
    pub fn compressed(self) -> bool {
        self != StoredCodec::Raw
    }
}

impl fmt::Display for StoredCodec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoredCodec::Raw => f.write_str("raw"),
            StoredCodec::Deflate => f.write_str("deflate"),
            StoredCodec::Zstd => f.write_str("zstd"),
            StoredCodec::ZstdDict(d) => write!(f, "zstd with dictionary {d}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_codec_bytes_round_trip_and_unknown_is_refused() {
        let all = [
            StoredCodec::Raw,
            StoredCodec::Deflate,
            StoredCodec::Zstd,
            StoredCodec::ZstdDict(0),
            StoredCodec::ZstdDict(7),
            StoredCodec::ZstdDict(255),
        ];
        for c in all {
            assert_eq!(StoredCodec::from_bytes(c.code(), c.dictionary()), Ok(c));
        }
        for code in 4..=255u8 {
            assert!(StoredCodec::from_bytes(code, 0).is_err());
        }
        for code in 0..=2u8 {
            assert!(StoredCodec::from_bytes(code, 1).is_err());
        }
    }

    #[test]
    fn codec_names_round_trip_through_json() {
        for (c, json) in [
            (Codec::Raw, r#""raw""#),
            (Codec::Deflate, r#""deflate""#),
            (Codec::Zstd { level: 3 }, r#"{"zstd":{"level":3}}"#),
            (Codec::ZstdDict { level: 9 }, r#"{"zstd_dict":{"level":9}}"#),
        ] {
            assert_eq!(serde_json::to_string(&c).unwrap(), json);
            assert_eq!(serde_json::from_str::<Codec>(json).unwrap(), c);
        }
    }

    #[test]
    fn dtype_names_round_trip_through_json() {
        for d in [
            DType::Bytes,
            DType::Bool,
            DType::U8,
            DType::I8,
            DType::U16,
            DType::I16,
            DType::U32,
            DType::I32,
            DType::U64,
            DType::I64,
            DType::F16,
            DType::Bf16,
            DType::F32,
            DType::F64,
        ] {
            let s = serde_json::to_string(&d).unwrap();
            assert_eq!(s, format!("\"{}\"", d.name()));
            assert_eq!(serde_json::from_str::<DType>(&s).unwrap(), d);
        }
    }
}
