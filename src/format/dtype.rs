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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Codec {
    /// Stored as given.
    #[default]
    Raw,
    /// Whole-record raw deflate (RFC 1951). A record that does not shrink is stored raw, and the
    /// codec actually used is recorded in each record's offset entry.
    Deflate,
}

impl Codec {
    /// The code stored in an offset entry's codec byte.
    pub fn code(self) -> u8 {
        match self {
            Codec::Raw => 0,
            Codec::Deflate => 1,
        }
    }

    /// The codec for an offset entry's codec byte, if known.
    pub fn from_code(code: u8) -> Option<Codec> {
        match code {
            0 => Some(Codec::Raw),
            1 => Some(Codec::Deflate),
            _ => None,
        }
    }
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Codec::Raw => "raw",
            Codec::Deflate => "deflate",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codec_codes_round_trip_and_unknown_is_none() {
        for c in [Codec::Raw, Codec::Deflate] {
            assert_eq!(Codec::from_code(c.code()), Some(c));
        }
        for code in 2..=255u8 {
            assert_eq!(Codec::from_code(code), None);
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
