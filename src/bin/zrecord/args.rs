//! Argument types every subcommand shares, so one flag means one thing everywhere: byte sizes,
//! read backends and codecs. A bad value is a clap usage error (exit status 2) that lists what
//! is accepted.

use clap::ValueEnum;
use zrecord::{Backend, Codec};

/// Parses a byte size: plain bytes (`1048576`) or a number with a binary suffix, `K`/`KiB`,
/// `M`/`MiB`, `G`/`GiB`, `T`/`TiB` (any case; `64M` = `64MiB` = 64 × 2^20), optionally with a
/// trailing `B` on plain bytes (`4096B`). Decimal suffixes (`KB`, `MB`, …) are refused rather
/// than guessed at. Zero is refused: every size flag needs a positive size.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let bad = |why: &str| format!("{s:?} is not a byte size ({why}; e.g. 4096, 64K, 256MiB, 1GiB)");
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let num: u64 = num.parse().map_err(|_| bad("no number"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        "t" | "tib" => 40,
        "kb" | "mb" | "gb" | "tb" => {
            return Err(bad("decimal units are ambiguous: use K/KiB, M/MiB, G/GiB"))
        }
        _ => return Err(bad("unknown unit")),
    };
    match num.checked_mul(1u64 << shift) {
        Some(0) => Err(bad("must be positive")),
        Some(n) => Ok(n),
        None => Err(bad("too large")),
    }
}

/// [`parse_size`] for flags held in a `usize`.
pub fn parse_size_usize(s: &str) -> Result<usize, String> {
    let n = parse_size(s)?;
    usize::try_from(n).map_err(|_| format!("{s:?} is too large for this machine"))
}

/// `--backend`: which I/O backend reads records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// Zero-copy from the mapping when the batch is in the page cache, io_uring otherwise.
    Auto,
    /// Every read through io_uring (the pread pool where io_uring is unavailable).
    Uring,
    /// Every read through the mapping.
    Mmap,
    /// Every read through the pread thread pool.
    Psync,
}

impl From<BackendArg> for Backend {
    fn from(b: BackendArg) -> Backend {
        match b {
            BackendArg::Auto => Backend::Auto,
            BackendArg::Uring => Backend::Uring,
            BackendArg::Mmap => Backend::Mmap,
            BackendArg::Psync => Backend::Psync,
        }
    }
}

/// `--codec`: how records are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CodecArg {
    /// Stored as given.
    Raw,
    /// Whole-record deflate (records that do not shrink are stored raw).
    Deflate,
    /// One zstd frame per record (`--zstd-level`; format version 2).
    Zstd,
    /// One zstd frame per record with a dictionary trained on the field's first records
    /// (`--zstd-level`; format version 2).
    ZstdDict,
}

impl CodecArg {
    /// The codec, zstd ones at `zstd_level`.
    pub fn codec(self, zstd_level: i32) -> Codec {
        match self {
            CodecArg::Raw => Codec::Raw,
            CodecArg::Deflate => Codec::Deflate,
            CodecArg::Zstd => Codec::Zstd { level: zstd_level },
            CodecArg::ZstdDict => Codec::ZstdDict { level: zstd_level },
        }
    }
}

impl From<CodecArg> for Codec {
    fn from(c: CodecArg) -> Codec {
        c.codec(Codec::ZSTD_DEFAULT_LEVEL)
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_as_binary_multiples() {
        for (s, want) in [
            ("1", 1),
            ("4096", 4096),
            ("4096B", 4096),
            ("1K", 1 << 10),
            ("1k", 1 << 10),
            ("1KiB", 1 << 10),
            ("64M", 64 << 20),
            ("256MiB", 256 << 20),
            ("256mib", 256 << 20),
            ("1GiB", 1 << 30),
            ("1G", 1 << 30),
            ("2T", 2 << 40),
            (" 8 MiB ", 8 << 20),
        ] {
            assert_eq!(parse_size(s), Ok(want), "{s}");
        }
        for s in [
            "",
            "0",
            "0M",
            "lots",
            "1.5M",
            "-1",
            "64MB",
            "1KB",
            "1X",
            "M",
            "99999999999T",
        ] {
            assert!(parse_size(s).is_err(), "{s:?} parsed");
        }
    }
}
