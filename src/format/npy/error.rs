//! Why a `.npy` file cannot be read: [`NpyError`], with the byte offset of the problem.

use std::fmt;

/// Why a `.npy` file cannot be read. `offset` is the byte of the file the problem is at (for a
/// header problem, the position within the header text, counted from the start of the file).
#[derive(Debug)]
pub struct NpyError {
    /// Byte offset in the file.
    pub offset: u64,
    /// What is wrong.
    pub kind: NpyErrorKind,
}

/// The kinds of [`NpyError`].
#[derive(Debug)]
#[non_exhaustive]
pub enum NpyErrorKind {
    /// The file ends before the header or the data it declares.
    Truncated {
        /// Bytes the file needs (up to the end of what was being read).
        needed: u64,
        /// Bytes the file has.
        available: u64,
    },
    /// Not a `.npy` file, or a header that does not parse.
    Malformed(String),
    /// A well-formed file zrecord cannot store (object arrays, structured dtypes, ...).
    Unsupported(String),
    /// The underlying reader failed.
    Io(std::io::Error),
}

impl NpyError {
    pub(super) fn malformed(offset: u64, reason: impl Into<String>) -> NpyError {
        NpyError {
            offset,
            kind: NpyErrorKind::Malformed(reason.into()),
        }
    }

    pub(super) fn unsupported(offset: u64, reason: impl Into<String>) -> NpyError {
        NpyError {
            offset,
            kind: NpyErrorKind::Unsupported(reason.into()),
        }
    }

    pub(super) fn truncated(offset: u64, needed: u64, available: u64) -> NpyError {
        NpyError {
            offset,
            kind: NpyErrorKind::Truncated { needed, available },
        }
    }
}

impl fmt::Display for NpyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            NpyErrorKind::Truncated { needed, available } => write!(
                f,
                "truncated .npy file: needs {needed} bytes, has {available} (at byte {})",
                self.offset
            ),
            NpyErrorKind::Malformed(r) => {
                write!(f, "not a valid .npy file: {r} (at byte {})", self.offset)
            }
            NpyErrorKind::Unsupported(r) => {
                write!(f, "unsupported .npy array: {r} (at byte {})", self.offset)
            }
            NpyErrorKind::Io(e) => write!(f, "read failed at byte {}: {e}", self.offset),
        }
    }
}

impl std::error::Error for NpyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            NpyErrorKind::Io(e) => Some(e),
            _ => None,
        }
    }
}
