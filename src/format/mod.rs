//! Pure encode/decode of the on-disk format: dtypes and codecs, offset entries, patch entries and
//! `meta.json`; and the decoder of NumPy `.npy` input files ([`npy`]). No I/O and no unsafe:
//! every decoder takes `&[u8]` (or, for `.npy` rows, any reader) and returns a `Result`.
//!
//! The byte-level specification is `docs/FORMAT.md`.

pub mod codec;
pub mod dtype;
pub mod entry;
pub mod meta;
pub mod npy;

/// The format version this build reads and writes.
pub const FORMAT_VERSION: u32 = 1;

/// The largest record, logical or stored, in bytes: the physical length is a u24.
pub const MAX_RECORD_BYTES: u64 = (1 << 24) - 1;

/// The largest byte offset a chunk can reach: offsets are u40.
pub const MAX_CHUNK_BYTES: u64 = 1 << 40;

/// The number of chunk ids (u16); ids run from 0 to `MAX_CHUNKS - 1`.
pub const MAX_CHUNKS: u32 = 65_535;
