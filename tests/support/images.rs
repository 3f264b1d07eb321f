//! Small JPEG and PNG images, made deterministically, and a dataset of them (`image` bytes,
//! `label` i64), for the transform stage's tests.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::path::Path;

use zrecord::{DType, Field, Schema, Writer, WriterConfig};

/// Pixels of a `w` × `h` RGB image: gradients and a seeded pattern (so crops differ).
pub fn pixels(w: u16, h: u16, seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(usize::from(w) * usize::from(h) * 3);
    for y in 0..u64::from(h) {
        for x in 0..u64::from(w) {
            let n = (x * 7 + y * 13 + seed * 31) ^ (x * y + seed);
            out.extend_from_slice(&[
                (x * 255 / u64::from(w)) as u8,
                (y * 255 / u64::from(h)) as u8,
                n as u8,
            ]);
        }
    }
    out
}

/// A JPEG of [`pixels`], quality 90.
pub fn jpeg(w: u16, h: u16, seed: u64) -> Vec<u8> {
    let mut out = Vec::new();
    jpeg_encoder::Encoder::new(&mut out, 90)
        .encode(&pixels(w, h, seed), w, h, jpeg_encoder::ColorType::Rgb)
        .unwrap();
    out
}

/// A dataset at `dir` of `n` JPEGs (sizes 24–48 × 20–40) with labels `i % 10`; record `bad`
/// (if any) holds bytes that are not an image.
pub fn dataset(dir: &Path, n: u64, bad: Option<u64>) {
    let schema = Schema::new()
        .field(Field::new("image", DType::Bytes))
        .field(Field::new("label", DType::I64).shape(vec![]));
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    for i in 0..n {
        let img = if Some(i) == bad {
            b"\xff\xd8\xff\xe0 this is not a JPEG".to_vec()
        } else {
            jpeg(24 + (i % 25) as u16, 20 + (i % 21) as u16, i)
        };
        w.append(&[&img[..], &(i as i64 % 10).to_le_bytes()[..]])
            .unwrap();
    }
    w.commit().unwrap();
}

/// A PNG of `pixels` (`channels` 1, 3 or 4), lossless.
pub fn png(pixels: &[u8], w: usize, h: usize, channels: u8) -> Vec<u8> {
    use zune_core::bit_depth::BitDepth;
    use zune_core::colorspace::ColorSpace;
    use zune_core::options::EncoderOptions;
    let cs = match channels {
        1 => ColorSpace::Luma,
        4 => ColorSpace::RGBA,
        _ => ColorSpace::RGB,
    };
    let mut out = Vec::new();
    zune_png::PngEncoder::new(pixels, EncoderOptions::new(w, h, cs, BitDepth::Eight))
        .encode(&mut out)
        .unwrap();
    out
}
