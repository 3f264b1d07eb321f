//! Pure encode/decode of the on-disk format: dtypes and codecs, offset entries, patch entries and
//! `meta.json`; the file names inside a dataset directory (`layout`, crate-private); and the
//! decoder of NumPy `.npy` input files ([`npy`]). No I/O and no unsafe: every decoder takes `&[u8]`
//! (or, for `.npy` rows, any reader) and returns a `Result`.
//!
//! The byte-level specification is `docs/FORMAT.md`.

#![deny(clippy::arithmetic_side_effects)]

pub mod codec;
pub mod collection;
pub mod dtype;
pub mod entry;
pub(crate) mod envelope;
pub(crate) mod layout;
#[cfg(feature = "remote")]
pub mod lease;
pub mod meta;
pub mod npy;
pub mod source;

/// The newest format version this build reads and writes. A dataset is written at the lowest
/// version that holds it ([`meta::Meta::required_version`]): 1 unless a field uses zstd (2) or
/// the dataset has user attributes (3), so a dataset without them stays readable by builds that
/// know only version 1, and one with them is refused by older builds with an unsupported-version
/// error instead of being misread.
pub const FORMAT_VERSION: u32 = 3;

/// The largest record, logical or stored, in bytes: the physical length is a u24.
pub const MAX_RECORD_BYTES: u64 = (1 << 24) - 1;

/// The largest byte offset a chunk can reach: offsets are u40.
pub const MAX_CHUNK_BYTES: u64 = 1 << 40;

/// The number of chunk ids (u16); ids run from 0 to `MAX_CHUNKS - 1`.
pub const MAX_CHUNKS: u32 = 65_535;

/// The most records a dataset holds (2^40): `len` in `meta.json` is refused above it, and an
/// append past it is [`crate::Error::TooManyRecords`].
pub const MAX_RECORDS: u64 = 1 << 40;

/// The most entries an offset table or a patch log holds (2^48): with it, every byte offset
/// computed from `table_len` or `patch_len` (× 24 bytes) fits in a `u64` with room to spare.
pub const MAX_TABLE_ENTRIES: u64 = 1 << 48;
