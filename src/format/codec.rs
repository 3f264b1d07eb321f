//! Whole-record deflate (libdeflater), with the rule that a record which does not shrink is
//! stored raw, and decompression capped at the logical length recorded in the offset entry.

use super::dtype::Codec;
use libdeflater::{CompressionLvl, Compressor, DecompressionError, Decompressor};

/// Compresses records for one writer. Not shared between threads (libdeflater's compressor
/// holds scratch state).
pub struct Deflater {
    compressor: Compressor,
    scratch: Vec<u8>,
}

impl std::fmt::Debug for Deflater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deflater").finish_non_exhaustive()
    }
}

impl Deflater {
    /// A compressor at `level` (1 = fastest … 12 = smallest; out-of-range levels are clamped).
    pub fn new(level: i32) -> Self {
        let lvl = CompressionLvl::new(level.clamp(1, 12)).unwrap_or_default();
        Deflater {
            compressor: Compressor::new(lvl),
            scratch: Vec::new(),
        }
    }

    /// Encodes `data` for a field whose codec is `codec`: returns the codec actually used and the
    /// bytes to store. Deflate falls back to raw when the output would not be smaller.
    pub fn encode<'a>(&'a mut self, codec: Codec, data: &'a [u8]) -> (Codec, &'a [u8]) {
        if codec == Codec::Raw || data.is_empty() {
            return (Codec::Raw, data);
        }
        let bound = self.compressor.deflate_compress_bound(data.len());
        self.scratch.resize(bound, 0);
        match self.compressor.deflate_compress(data, &mut self.scratch) {
            Ok(n) if n < data.len() => (Codec::Deflate, self.scratch.get(..n).unwrap_or(data)),
            _ => (Codec::Raw, data),
        }
    }
}

/// Decompresses a deflate record into `out`, which must be exactly the record's logical length:
/// the output can never exceed it (no decompression bombs), and a stream that decodes to any
/// other length is an error.
pub fn inflate(
    decompressor: &mut Decompressor,
    stored: &[u8],
    out: &mut [u8],
) -> Result<(), String> {
    match decompressor.deflate_decompress(stored, out) {
        Ok(n) if n == out.len() => Ok(()),
        Ok(n) => Err(format!("decoded {n} bytes, the entry says {}", out.len())),
        Err(DecompressionError::InsufficientSpace) => Err(format!(
            "stream decodes to more than the recorded {} bytes",
            out.len()
        )),
        Err(DecompressionError::BadData) => Err("invalid deflate stream".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compressible_data_round_trips() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 7) as u8).collect();
        let mut d = Deflater::new(6);
        let (codec, stored) = d.encode(Codec::Deflate, &data);
        assert_eq!(codec, Codec::Deflate);
        assert!(stored.len() < data.len());
        let stored = stored.to_vec();
        let mut out = vec![0u8; data.len()];
        inflate(&mut Decompressor::new(), &stored, &mut out).unwrap();
        assert_eq!(out, data);
    }

    #[test]
    fn incompressible_data_is_stored_raw() {
        let mut x = 0x1234_5678u32;
        let data: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        let mut d = Deflater::new(6);
        let (codec, stored) = d.encode(Codec::Deflate, &data);
        assert_eq!(codec, Codec::Raw);
        assert_eq!(stored, &data[..]);
    }

    #[test]
    fn corrupt_or_oversized_streams_are_errors() {
        let data = vec![0u8; 100_000];
        let mut d = Deflater::new(6);
        let stored = d.encode(Codec::Deflate, &data).1.to_vec();
        let mut dec = Decompressor::new();
        // A bomb: the stream decodes to more than the recorded length.
        let mut small = vec![0u8; 1000];
        assert!(inflate(&mut dec, &stored, &mut small).is_err());
        // Too short a stream for the recorded length.
        let mut big = vec![0u8; 100_001];
        assert!(inflate(&mut dec, &stored, &mut big).is_err());
        // Garbage and every truncation.
        assert!(inflate(&mut dec, &[0xff; 16], &mut small).is_err());
        for n in 0..stored.len() {
            let mut out = vec![0u8; data.len()];
            assert!(
                inflate(&mut dec, &stored[..n], &mut out).is_err(),
                "truncation to {n}"
            );
        }
    }
}
