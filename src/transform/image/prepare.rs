//! Images as a converter stores them: checked (format sniffed, header read) and, when asked,
//! scaled down so the longer side fits a maximum and re-encoded as JPEG (FFCV's practice: smaller
//! records, less decoding per epoch).

use super::codec::Encoded;
use super::geometry::{crop_resize, Rect};
use bytes::Bytes;

/// How the converters store an image.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Prepare {
    /// Scale images whose longer side is over this down to it (`None`: store as they are).
    pub(crate) max_side: Option<u32>,
    /// JPEG quality (1–100) of the images that are scaled down.
    pub(crate) quality: u8,
}

/// The side lengths of a `width` × `height` image scaled so its longer side is `max_side`
/// (rounded, at least 1).
fn scaled(width: u32, height: u32, max_side: u32) -> (u32, u32) {
    let long = f64::from(width.max(height));
    let s = f64::from(max_side) / long;
    let w = (f64::from(width) * s)
        .round()
        .clamp(1.0, f64::from(max_side)) as u32;
    let h = (f64::from(height) * s)
        .round()
        .clamp(1.0, f64::from(max_side)) as u32;
    (w, h)
}

impl Prepare {
    /// Checks that `bytes` is a JPEG or PNG image with a readable header and returns what to
    /// store: the bytes themselves, or, for an image over `max_side`, a scaled-down JPEG (grey
    /// stays grey, alpha is dropped). The error says what is wrong.
    pub(crate) fn apply(&self, bytes: Vec<u8>) -> Result<Vec<u8>, String> {
        let (encoded, header) = Encoded::open(Bytes::from(bytes), None)?;
        let max_side = match self.max_side {
            Some(m) if header.width.max(header.height) > m => m.max(1),
            _ => return Ok(Vec::from(encoded.bytes)),
        };
        let channels = if header.channels == 1 { 1 } else { 3 };
        let pixels = encoded.decode_all(channels)?;
        let (w, h) = scaled(header.width, header.height, max_side);
        let whole = Rect {
            left: 0.0,
            top: 0.0,
            width: f64::from(header.width),
            height: f64::from(header.height),
        };
        let small = crop_resize(&pixels, header.width, header.height, channels, whole, w, h)?;
        let color = if channels == 1 {
            jpeg_encoder::ColorType::Luma
        } else {
            jpeg_encoder::ColorType::Rgb
        };
        let mut out = Vec::new();
        // Sides are at most max_side ≤ MAX_SIDE (2^14): they fit a u16.
        let (w16, h16) = (
            u16::try_from(w).map_err(|e| e.to_string())?,
            u16::try_from(h).map_err(|e| e.to_string())?,
        );
        jpeg_encoder::Encoder::new(&mut out, self.quality.clamp(1, 100))
            .encode(&small, w16, h16, color)
            .map_err(|e| format!("JPEG encoding of the scaled image failed: {e}"))?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    fn jpeg(w: u16, h: u16) -> Vec<u8> {
        let pixels: Vec<u8> = (0..usize::from(w) * usize::from(h) * 3)
            .map(|i| (i % 251) as u8)
            .collect();
        let mut out = Vec::new();
        jpeg_encoder::Encoder::new(&mut out, 90)
            .encode(&pixels, w, h, jpeg_encoder::ColorType::Rgb)
            .unwrap();
        out
    }

    #[test]
    fn small_images_are_kept_and_large_ones_scaled() {
        let p = Prepare {
            max_side: Some(32),
            quality: 90,
        };
        let small = jpeg(20, 10);
        assert_eq!(p.apply(small.clone()).unwrap(), small);
        let big = p.apply(jpeg(100, 50)).unwrap();
        let (_, h) = Encoded::open(Bytes::from(big), None).unwrap();
        assert_eq!((h.width, h.height), (32, 16));
        assert_eq!(scaled(3, 1000, 10), (1, 10));
    }

    #[test]
    fn a_non_image_is_an_error() {
        let p = Prepare {
            max_side: None,
            quality: 90,
        };
        assert!(p
            .apply(b"hello".to_vec())
            .unwrap_err()
            .contains("not a JPEG, PNG or WebP"));
        let mut cut = jpeg(20, 10);
        cut.truncate(8);
        assert!(p.apply(cut).is_err());
    }
}
