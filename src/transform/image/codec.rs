//! Encoded images: the header read at once (size, channels), the pixels decoded when an
//! operation needs them.

use std::panic::{catch_unwind, AssertUnwindSafe};

use bytes::Bytes;
use zune_core::bytestream::ZCursor;
use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions;

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

fn options(channels: u8) -> DecoderOptions {
    let cs = match channels {
        1 => ColorSpace::Luma,
        4 => ColorSpace::RGBA,
        _ => ColorSpace::RGB,
    };
    DecoderOptions::default()
        .set_max_width(MAX_SIDE as usize)
        .set_max_height(MAX_SIDE as usize)
        .jpeg_set_out_colorspace(cs)
        .png_set_strip_to_8bit(true)
}

impl Encoded {
    /// Sniffs the format and reads the header of `bytes`; `channels` is what the pixels will
    /// have (1, 3 or 4; `None`: the image's own, grey as 1, colour as 3, with alpha 4).
    pub(crate) fn open(bytes: Bytes, channels: Option<u8>) -> Result<(Encoded, Header), String> {
        let format = if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
            Format::Jpeg
        } else if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
            Format::Png
        } else {
            let head: Vec<String> = bytes.iter().take(4).map(|b| format!("{b:02x}")).collect();
            return Err(format!(
                "not a JPEG or PNG image ({} bytes starting {})",
                bytes.len(),
                head.join(" ")
            ));
        };
        let (width, height, own) = match format {
            Format::Jpeg => guarded("JPEG", || {
                let mut d =
                    zune_jpeg::JpegDecoder::new_with_options(ZCursor::new(&bytes[..]), options(3));
                d.decode_headers()
                    .map_err(|e| format!("bad JPEG header: {e:?}"))?;
                let info = d.info().ok_or("bad JPEG header")?;
                let own = if info.components == 1 { 1 } else { 3 };
                Ok((u32::from(info.width), u32::from(info.height), own))
            })?,
            Format::Png => guarded("PNG", || {
                let mut d =
                    zune_png::PngDecoder::new_with_options(ZCursor::new(&bytes[..]), options(3));
                d.decode_headers()
                    .map_err(|e| format!("bad PNG header: {e:?}"))?;
                let (w, h) = d.dimensions().ok_or("bad PNG header")?;
                let own = d.colorspace().map_or(3, |c| c.num_components()) as u8;
                Ok((w as u32, h as u32, own))
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
            Format::Jpeg => guarded("JPEG", || {
                let mut d = zune_jpeg::JpegDecoder::new_with_options(
                    ZCursor::new(&self.bytes[..]),
                    options(channels),
                );
                d.decode().map_err(|e| format!("bad JPEG data: {e:?}"))
            }),
            Format::Png => guarded("PNG", || {
                let mut d = zune_png::PngDecoder::new_with_options(
                    ZCursor::new(&self.bytes[..]),
                    options(channels),
                );
                d.decode_headers()
                    .map_err(|e| format!("bad PNG header: {e:?}"))?;
                let have = d.colorspace().map_or(3, |c| c.num_components());
                let raw = d.decode_raw().map_err(|e| format!("bad PNG data: {e:?}"))?;
                Ok(super::geometry::convert_channels(
                    raw,
                    have,
                    usize::from(channels),
                ))
            }),
        }
    }
}
