//! The dtype string (`'<f4'`): its mapping to a zrecord [`DType`] and its byte order.

use super::NpyError;
use crate::format::dtype::DType;

/// A dtype problem, placed at the `descr` value's offset by the caller.
pub(super) struct DescrError(String, bool);

impl DescrError {
    pub(super) fn at(self, offset: u64) -> NpyError {
        if self.1 {
            NpyError::unsupported(offset, self.0)
        } else {
            NpyError::malformed(offset, self.0)
        }
    }
}

/// Maps a dtype string (`'<f4'`) to a zrecord dtype and whether it is big-endian.
pub(super) fn parse_descr(descr: &str) -> Result<(DType, bool), DescrError> {
    let unsupported = |why: String| DescrError(why, true);
    let (order, rest) = match descr.as_bytes().first() {
        Some(&c @ (b'<' | b'>' | b'|' | b'=')) => (c, descr.get(1..).unwrap_or_default()),
        _ => (b'=', descr),
    };
    let mut chars = rest.chars();
    let kind = chars.next().unwrap_or(' ');
    let size = chars.as_str();
    if kind == 'O' {
        return Err(unsupported(format!(
            "object array (dtype {descr:?}): it holds Python objects, not numbers"
        )));
    }
    let dtype = match (kind, size) {
        ('b', "1") | ('?', "" | "1") => DType::Bool,
        ('i', "1") => DType::I8,
        ('i', "2") => DType::I16,
        ('i', "4") => DType::I32,
        ('i', "8") => DType::I64,
        ('u', "1") => DType::U8,
        ('u', "2") => DType::U16,
        ('u', "4") => DType::U32,
        ('u', "8") => DType::U64,
        ('f', "2") => DType::F16,
        ('f', "4") => DType::F32,
        ('f', "8") => DType::F64,
        ('f', _) => {
            return Err(unsupported(format!(
                "dtype {descr:?} (extended-precision float; f2, f4 and f8 are stored)"
            )))
        }
        ('c', _) => return Err(unsupported(format!("complex dtype {descr:?}"))),
        ('S' | 'a' | 'U', _) => return Err(unsupported(format!("string dtype {descr:?}"))),
        ('V', _) => return Err(unsupported(format!("void/raw dtype {descr:?}"))),
        ('M' | 'm', _) => return Err(unsupported(format!("datetime dtype {descr:?}"))),
        ('b' | 'i' | 'u', _) => return Err(unsupported(format!("integer dtype {descr:?}"))),
        _ => return Err(DescrError(format!("unknown dtype {descr:?}"), false)),
    };
    let big = match order {
        b'>' => true,
        b'<' | b'|' => false,
        _ => cfg!(target_endian = "big"),
    };
    Ok((dtype, big))
}
