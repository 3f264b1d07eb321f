//! Encoded images: the header read at once (size, channels), the pixels decoded when an
//! operation needs them.

use std::panic::{catch_unwind, AssertUnwindSafe};

use bytes::Bytes;

pub(crate) use crate::io::jpeg::Region;

/// The largest side an image may have: larger headers are refused before any pixel memory is
/// allocated (a corrupt header must not ask for gigabytes).
pub(crate) const MAX_SIDE: u32 = 1 << 14;

/// An image's encoded bytes and what its header says.
#[derive(Clone)]
pub(crate) struct Encoded {
    pub(crate) bytes: Bytes,
    pub(crate) format: Format,
}

/// The formats zrecord decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    Jpeg,
    Png,
    WebP,
}

/// What a header says: width, height, and the channels the decoder will hand out.
pub(crate) struct Header {
    pub(crate) width: u32,
    pub(crate) height: u32,
    pub(crate) channels: u8,
}

/// A decoder's panic as an error (a decoder must never take the worker down).
fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(format!(
            "the {what} decoder failed on these bytes (it panicked)"
        ))
    })
}

/// A PNG reader over `bytes`, its header read: palettes and low bit depths expanded to 8-bit
/// samples, 16-bit samples cut to 8, at most 1 GiB of decoder memory.
fn png_reader(bytes: &[u8]) -> Result<png::Reader<std::io::Cursor<&[u8]>>, String> {
    let mut d =
        png::Decoder::new_with_limits(std::io::Cursor::new(bytes), png::Limits { bytes: 1 << 30 });
    d.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    d.read_info().map_err(|e| format!("bad PNG header: {e}"))
}

/// A WebP decoder over `bytes`, its header read (still images only: an animation is refused).
fn webp(bytes: &[u8]) -> Result<image_webp::WebPDecoder<std::io::Cursor<&[u8]>>, String> {
    let d = image_webp::WebPDecoder::new(std::io::Cursor::new(bytes))
        .map_err(|e| format!("bad WebP header: {e}"))?;
    if d.is_animated() {
        return Err("an animated WebP (only still images decode)".into());
    }
    Ok(d)
}

impl Encoded {
    /// Sniffs the format and reads the header of `bytes`; `channels` is what the pixels will
    /// have (1, 3 or 4; `None`: the image's own, grey as 1, colour as 3, with alpha 4).
    pub(crate) fn open(bytes: Bytes, channels: Option<u8>) -> Result<(Encoded, Header), String> {
        let format = if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
            Format::Jpeg
        } else if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
            Format::Png
        } else if bytes.starts_with(b"RIFF") && bytes.get(8..12) == Some(b"WEBP".as_slice()) {
            Format::WebP
        } else {
            let head: Vec<String> = bytes.iter().take(4).map(|b| format!("{b:02x}")).collect();
            return Err(format!(
                "not a JPEG, PNG or WebP image ({} bytes starting {})",
                bytes.len(),
                head.join(" ")
            ));
        };
        let (width, height, own) = match format {
            Format::Jpeg => {
                let h = crate::io::jpeg::header(&bytes).map_err(|e| format!("bad JPEG: {e}"))?;
                (h.width, h.height, h.channels)
            }
            Format::WebP => guarded("WebP", || {
                let d = webp(&bytes)?;
                let (w, h) = d.dimensions();
                Ok((w, h, if d.has_alpha() { 4 } else { 3 }))
            })?,
            Format::Png => guarded("PNG", || {
                let r = png_reader(&bytes)?;
                let info = r.info();
                let own = r.output_color_type().0.samples() as u8;
                Ok((info.width, info.height, own))
            })?,
        };
        if width == 0 || height == 0 || width > MAX_SIDE || height > MAX_SIDE {
            return Err(format!(
                "image of {width}x{height} pixels (sides must be 1 to {MAX_SIDE})"
            ));
        }
        let channels = match channels {
            Some(c) => c,
            None => own.clamp(1, 4),
        };
        Ok((
            Encoded { bytes, format },
            Header {
                width,
                height,
                channels,
            },
        ))
    }

    /// Decodes every pixel, with `channels` per pixel.
    pub(crate) fn decode_all(&self, channels: u8) -> Result<Vec<u8>, String> {
        match self.format {
            Format::Jpeg => crate::io::jpeg::decode(&self.bytes, channels, None, MAX_SIDE)
                .map(|(pixels, _)| pixels)
                .map_err(|e| format!("bad JPEG: {e}")),
            Format::WebP => guarded("WebP", || {
                let mut d = webp(&self.bytes)?;
                let (w, h) = d.dimensions();
                if w > MAX_SIDE || h > MAX_SIDE {
                    return Err(format!(
                        "image of {w}x{h} pixels (sides must be 1 to {MAX_SIDE})"
                    ));
                }
                let have = if d.has_alpha() { 4 } else { 3 };
                let mut raw = vec![0u8; w as usize * h as usize * have];
                d.read_image(&mut raw)
                    .map_err(|e| format!("bad WebP data: {e}"))?;
                Ok(super::geometry::convert_channels(
                    raw,
                    have,
                    usize::from(channels),
                ))
            }),
            Format::Png => guarded("PNG", || {
                let mut r = png_reader(&self.bytes)?;
                let (w, h) = (r.info().width, r.info().height);
                if w > MAX_SIDE || h > MAX_SIDE {
                    return Err(format!(
                        "image of {w}x{h} pixels (sides must be 1 to {MAX_SIDE})"
                    ));
                }
                let have = r.output_color_type().0.samples();
                let size = r.output_buffer_size().ok_or("PNG too large")?;
                let mut raw = vec![0u8; size];
                let frame = r
                    .next_frame(&mut raw)
                    .map_err(|e| format!("bad PNG data: {e}"))?;
                raw.truncate(frame.buffer_size());
                Ok(super::geometry::convert_channels(
                    raw,
                    have,
                    usize::from(channels),
                ))
            }),
        }
    }

    /// Decodes at least the pixels of columns `left..right` and rows `top..bottom`, with
    /// `channels` per pixel: a JPEG decodes only those rows and the iMCU columns around them,
    /// a PNG decodes whole. The pixels are those [`Encoded::decode_all`] gives at the same
    /// places; the region says where they are.
    pub(crate) fn decode_region(
        &self,
        channels: u8,
        (left, top, right, bottom): (u32, u32, u32, u32),
        (width, height): (u32, u32),
    ) -> Result<(Vec<u8>, Region), String> {
        match self.format {
            Format::Jpeg => crate::io::jpeg::decode(
                &self.bytes,
                channels,
                Some((left, top, right, bottom)),
                MAX_SIDE,
            )
            .map_err(|e| format!("bad JPEG: {e}")),
            Format::Png | Format::WebP => self.decode_all(channels).map(|p| {
                let whole = Region {
                    left: 0,
                    top: 0,
                    width,
                    height,
                };
                (p, whole)
            }),
        }
    }
}
