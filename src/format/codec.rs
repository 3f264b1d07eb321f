//! Per-record codecs: deflate (libdeflater) and zstd, with or without a dictionary trained on
//! the field's records. The rules every codec follows: a record which does not shrink is stored
//! raw, and decoding writes into an output of exactly the logical length recorded in the offset
//! entry, so it can never produce more (no decompression bombs).

use super::dtype::{Codec, StoredCodec};
use libdeflater::{CompressionLvl, Compressor, DecompressionError, Decompressor};
use std::sync::Arc;

/// The largest dictionary the writer trains, in bytes (zstd's own default is 110 KiB).
pub const MAX_DICTIONARY_BYTES: usize = 112_640;

/// A trained zstd dictionary: its number in the field (named by every record compressed with it)
/// and its bytes, with the prepared decoder form built once and shared by every reading thread.
pub struct Dictionary {
    /// The dictionary's number within its field (1–255).
    pub number: u8,
    bytes: Vec<u8>,
    decoder: zstd::zstd_safe::DDict<'static>,
}

impl std::fmt::Debug for Dictionary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dictionary")
            .field("number", &self.number)
            .field("bytes", &self.bytes.len())
            .finish_non_exhaustive()
    }
}

impl Dictionary {
    /// Prepares dictionary `number` from its bytes (a trained zstd dictionary, or any bytes: zstd
    /// uses raw content as a prefix). Fails only if zstd cannot allocate its tables.
    pub fn new(number: u8, bytes: Vec<u8>) -> Result<Arc<Dictionary>, String> {
        let decoder = zstd::zstd_safe::DDict::try_create(&bytes)
            .ok_or_else(|| format!("zstd could not prepare dictionary {number}"))?;
        Ok(Arc::new(Dictionary {
            number,
            bytes,
            decoder,
        }))
    }

    /// The dictionary's bytes, as stored in its file.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Trains a dictionary of at most `max_bytes` from `samples`, the records of one field.
    /// `None` when zstd finds nothing worth a dictionary (too few or too small samples): the
    /// field then stays plain zstd.
    pub fn train(samples: &[&[u8]], max_bytes: usize) -> Option<Vec<u8>> {
        let sizes: Vec<usize> = samples.iter().map(|s| s.len()).collect();
        let total: usize = sizes.iter().sum();
        // zstd refuses fewer than a handful of samples, and a dictionary larger than its
        // samples is mostly their copy.
        if samples.len() < 8 || total < 1024 {
            return None;
        }
        let mut flat = Vec::with_capacity(total);
        for s in samples {
            flat.extend_from_slice(s);
        }
        let cap = max_bytes.min(total / 4).max(256);
        let mut dict = Vec::with_capacity(cap);
        match zstd::zstd_safe::train_from_buffer(&mut dict, &flat, &sizes) {
            Ok(n) if n > 0 => {
                dict.truncate(n);
                Some(dict)
            }
            _ => None,
        }
    }
}

/// Compresses records for one append task. Not shared between threads (the compressors hold
/// scratch state); each holds one zstd context per dictionary it has been given.
pub struct Encoder {
    deflate_level: i32,
    deflate: Option<Compressor>,
    zstd: Option<(i32, zstd::zstd_safe::CCtx<'static>)>,
    dicts: Vec<(usize, u8, i32, zstd::zstd_safe::CCtx<'static>)>,
    scratch: Vec<u8>,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("deflate_level", &self.deflate_level)
            .finish_non_exhaustive()
    }
}

fn zstd_context(level: i32, dictionary: Option<&[u8]>) -> Option<zstd::zstd_safe::CCtx<'static>> {
    use zstd::zstd_safe::CParameter;
    let mut c = zstd::zstd_safe::CCtx::try_create()?;
    c.set_parameter(CParameter::CompressionLevel(level.clamp(1, 19)))
        .ok()?;
    // The offset entry records the dictionary's number and the CRC32C of the record's logical
    // bytes: the frame needs neither its own dictionary id nor its own checksum.
    c.set_parameter(CParameter::DictIdFlag(false)).ok()?;
    c.set_parameter(CParameter::ChecksumFlag(false)).ok()?;
    c.set_parameter(CParameter::ContentSizeFlag(true)).ok()?;
    if let Some(d) = dictionary {
        // Loaded once: zstd digests it into a prepared dictionary kept with the context.
        c.load_dictionary(d).ok()?;
    }
    Some(c)
}

/// Compresses `data` into one frame in `scratch` with `ctx`; its length, `None` if zstd failed.
fn zstd_frame(
    ctx: &mut zstd::zstd_safe::CCtx<'static>,
    scratch: &mut Vec<u8>,
    data: &[u8],
) -> Option<usize> {
    scratch.clear();
    scratch.reserve(zstd::zstd_safe::compress_bound(data.len()));
    ctx.compress2(scratch, data).ok()
}

impl Encoder {
    /// An encoder whose deflate runs at `deflate_level` (1 = fastest … 12 = smallest; clamped).
    pub fn new(deflate_level: i32) -> Self {
        Encoder {
            deflate_level,
            deflate: None,
            zstd: None,
            dicts: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// Encodes `data` for a field whose codec is `codec`: returns the codec actually used and the
    /// bytes to store. `dictionary` is the field's current dictionary for [`Codec::ZstdDict`]
    /// (`field` names the field, so each field keeps its own context); without one such a field
    /// is written as plain zstd. A record that would not shrink is stored raw.
    pub fn encode<'a>(
        &'a mut self,
        codec: Codec,
        field: usize,
        dictionary: Option<&Dictionary>,
        data: &'a [u8],
    ) -> (StoredCodec, &'a [u8]) {
        if data.is_empty() {
            return (StoredCodec::Raw, data);
        }
        let (stored, n) = match codec {
            Codec::Deflate => {
                let level = self.deflate_level;
                let c = self.deflate.get_or_insert_with(|| {
                    Compressor::new(CompressionLvl::new(level.clamp(1, 12)).unwrap_or_default())
                });
                let bound = c.deflate_compress_bound(data.len());
                self.scratch.resize(bound, 0);
                match c.deflate_compress(data, &mut self.scratch) {
                    Ok(n) => (StoredCodec::Deflate, n),
                    Err(_) => return (StoredCodec::Raw, data),
                }
            }
            Codec::ZstdDict { level } if dictionary.is_some() => {
                let Some(d) = dictionary else {
                    return (StoredCodec::Raw, data);
                };
                let slot = self
                    .dicts
                    .iter()
                    .position(|(f, n, l, _)| *f == field && *n == d.number && *l == level);
                let slot = match slot {
                    Some(s) => s,
                    None => {
                        let Some(ctx) = zstd_context(level, Some(d.bytes())) else {
                            return (StoredCodec::Raw, data);
                        };
                        // One context per field: a field's new dictionary replaces its old one.
                        self.dicts.retain(|(f, ..)| *f != field);
                        self.dicts.push((field, d.number, level, ctx));
                        self.dicts.len().saturating_sub(1)
                    }
                };
                let Some((_, _, _, ctx)) = self.dicts.get_mut(slot) else {
                    return (StoredCodec::Raw, data);
                };
                match zstd_frame(ctx, &mut self.scratch, data) {
                    Some(n) => (StoredCodec::ZstdDict(d.number), n),
                    None => return (StoredCodec::Raw, data),
                }
            }
            Codec::Zstd { level } | Codec::ZstdDict { level } => {
                if self.zstd.as_ref().is_none_or(|(l, _)| *l != level) {
                    match zstd_context(level, None) {
                        Some(ctx) => self.zstd = Some((level, ctx)),
                        None => return (StoredCodec::Raw, data),
                    }
                }
                let Some((_, ctx)) = self.zstd.as_mut() else {
                    return (StoredCodec::Raw, data);
                };
                match zstd_frame(ctx, &mut self.scratch, data) {
                    Some(n) => (StoredCodec::Zstd, n),
                    None => return (StoredCodec::Raw, data),
                }
            }
            _ => return (StoredCodec::Raw, data),
        };
        match self.scratch.get(..n) {
            Some(out) if n < data.len() => (stored, out),
            _ => (StoredCodec::Raw, data),
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

/// A zstd decompression context, one per reading thread.
pub struct ZstdDecoder(zstd::zstd_safe::DCtx<'static>);

impl std::fmt::Debug for ZstdDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ZstdDecoder")
    }
}

impl ZstdDecoder {
    /// A new context; `None` if zstd cannot allocate one.
    pub fn new() -> Option<ZstdDecoder> {
        zstd::zstd_safe::DCtx::try_create().map(ZstdDecoder)
    }

    /// Decompresses one zstd frame into `out`, exactly the record's logical length, with the
    /// record's dictionary if it names one. Like [`inflate`], never writes past `out` and treats
    /// any other decoded length as an error.
    pub fn decode(
        &mut self,
        dictionary: Option<&Dictionary>,
        stored: &[u8],
        out: &mut [u8],
    ) -> Result<(), String> {
        let r = match dictionary {
            Some(d) => self.0.decompress_using_ddict(out, stored, &d.decoder),
            None => self.0.decompress(out, stored),
        };
        match r {
            Ok(n) if n == out.len() => Ok(()),
            Ok(n) => Err(format!("decoded {n} bytes, the entry says {}", out.len())),
            Err(code) => Err(format!(
                "invalid zstd frame: {}",
                zstd::zstd_safe::get_error_name(code)
            )),
        }
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use super::*;

    #[test]
    fn compressible_data_round_trips() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 7) as u8).collect();
        let mut d = Encoder::new(6);
        let (codec, stored) = d.encode(Codec::Deflate, 0, None, &data);
        assert_eq!(codec, StoredCodec::Deflate);
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
        let mut d = Encoder::new(6);
        for c in [Codec::Deflate, Codec::zstd(), Codec::zstd_dict()] {
            let (codec, stored) = d.encode(c, 0, None, &data);
            assert_eq!(codec, StoredCodec::Raw);
            assert_eq!(stored, &data[..]);
        }
        let (codec, stored) = d.encode(Codec::Deflate, 0, None, &data);
        assert_eq!(codec, StoredCodec::Raw);
        assert_eq!(stored, &data[..]);
    }

    #[test]
    fn corrupt_or_oversized_streams_are_errors() {
        let data = vec![0u8; 100_000];
        let mut d = Encoder::new(6);
        let stored = d.encode(Codec::Deflate, 0, None, &data).1.to_vec();
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
    fn captions(n: usize) -> Vec<Vec<u8>> {
        let words = [
            "a", "photo", "of", "the", "red", "dog", "running", "on", "beach", "at", "sunset",
            "with", "blue", "sky", "and", "small", "boat", "near", "city", "street",
        ];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        (0..n)
            .map(|_| {
                let mut s = String::from("{\"caption\": \"");
                for _ in 0..12 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    s.push_str(words[(x % words.len() as u64) as usize]);
                    s.push(' ');
                }
                s.push_str("\", \"width\": 512, \"height\": 384, \"source\": \"web\"}");
                s.into_bytes()
            })
            .collect()
    }

    #[test]
    fn zstd_round_trips_with_and_without_a_dictionary() {
        let recs = captions(2000);
        let samples: Vec<&[u8]> = recs.iter().map(|r| r.as_slice()).collect();
        let bytes = Dictionary::train(&samples, MAX_DICTIONARY_BYTES).expect("trained");
        let dict = Dictionary::new(1, bytes).unwrap();
        let mut enc = Encoder::new(6);
        let mut dec = ZstdDecoder::new().unwrap();
        let (mut plain, mut with) = (0usize, 0usize);
        for r in &recs {
            let (c, s) = enc.encode(Codec::zstd(), 0, None, r);
            let s = s.to_vec();
            plain += s.len();
            if c == StoredCodec::Zstd {
                let mut out = vec![0u8; r.len()];
                dec.decode(None, &s, &mut out).unwrap();
                assert_eq!(&out, r);
            }
            let (c, s) = enc.encode(Codec::zstd_dict(), 0, Some(&dict), r);
            assert_eq!(c, StoredCodec::ZstdDict(1));
            let s = s.to_vec();
            with += s.len();
            let mut out = vec![0u8; r.len()];
            dec.decode(Some(&dict), &s, &mut out).unwrap();
            assert_eq!(&out, r);
        }
        assert!(
            with * 3 < plain * 2,
            "dictionary {with} B against plain {plain} B"
        );
    }

    #[test]
    fn bad_zstd_frames_are_errors_never_overruns() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 13) as u8).collect();
        let mut enc = Encoder::new(6);
        let (c, s) = enc.encode(Codec::zstd(), 0, None, &data);
        assert_eq!(c, StoredCodec::Zstd);
        let stored = s.to_vec();
        let mut dec = ZstdDecoder::new().unwrap();
        // A bomb: the frame decodes to more than the recorded length.
        let mut small = vec![0u8; 1000];
        assert!(dec.decode(None, &stored, &mut small).is_err());
        let mut big = vec![0u8; 100_001];
        assert!(dec.decode(None, &stored, &mut big).is_err());
        assert!(dec.decode(None, &[0xff; 16], &mut small).is_err());
        for n in 0..stored.len() {
            let mut out = vec![0u8; data.len()];
            assert!(
                dec.decode(None, &stored[..n], &mut out).is_err(),
                "truncation to {n}"
            );
        }
        // Flipped bytes: an error or other bytes (the entry's CRC32C of the logical bytes
        // catches the latter), never a panic or a write past the output.
        for i in 0..stored.len().min(64) {
            let mut bad = stored.clone();
            bad[i] ^= 0x5a;
            let mut out = vec![0u8; data.len()];
            let _ = dec.decode(None, &bad, &mut out);
        }
    }

    #[test]
    fn too_few_samples_train_no_dictionary() {
        assert!(Dictionary::train(&[b"abc".as_slice(); 4], MAX_DICTIONARY_BYTES).is_none());
        assert!(Dictionary::train(&[], MAX_DICTIONARY_BYTES).is_none());
    }
}
