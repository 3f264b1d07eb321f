//! Built-in image operations (feature `images`): decode JPEG, PNG and WebP, random resized crop,
//! resize, center crop, flips, and normalize to `f32`, `f16` or `bf16` in HWC or CHW layout.
//! Each writes no per-record object: the last one's pixels land in the batch's column.
//!
//! [`decode`] reads only the header; the pixels are decoded when the first operation needs
//! them, and only the part it needs: a crop of a JPEG decodes its rows and the columns around
//! it (libjpeg-turbo's decoder skips the rest), a resize of the whole image or a flip decodes
//! everything. PNG decodes whole (the png crate).
//!
//! The functions return the operations as `Arc<dyn Op>`, ready for [`super::Map::field`]:
//!
//! ```
//! use zrecord::transform::{image, Map};
//!
//! let train = Map::new().field(
//!     "image",
//!     [image::decode(), image::random_resized_crop(224), image::random_flip()],
//! );
//! let eval = Map::new().field(
//!     "image",
//!     [image::decode(), image::resize(256), image::center_crop(224), image::normalize_imagenet()],
//! );
//! # let _ = (train, eval);
//! ```

mod codec;
mod geometry;
mod prepare;

use std::sync::Arc;

pub(crate) use codec::Encoded;
use geometry::Rect;
pub(crate) use prepare::Prepare;

use super::value::Repr;
use super::{Image, Op, OpError, Rng, Tensor, Value};
use crate::format::dtype::DType;

/// Decodes stored JPEG, PNG or WebP bytes to RGB (`decode()`); see [`Decode`].
pub fn decode() -> Arc<dyn Op> {
    Arc::new(Decode { channels: Some(3) })
}

/// Crops a random area and aspect ratio, resized to `size` × `size`, as torchvision's
/// `RandomResizedCrop(size)` (scale 0.08–1, ratio 3/4–4/3); see [`RandomResizedCrop`].
pub fn random_resized_crop(size: u32) -> Arc<dyn Op> {
    Arc::new(RandomResizedCrop::new(size, size))
}

/// A `size` × `size` window at a random place, as torchvision's `RandomCrop(size,
/// pad_if_needed=True)`; see [`RandomCrop`].
pub fn random_crop(size: u32) -> Arc<dyn Op> {
    Arc::new(RandomCrop {
        width: size,
        height: size,
    })
}

/// Resizes the shorter side to `size`, keeping the aspect ratio, as torchvision's
/// `Resize(size)`; see [`Resize`].
pub fn resize(size: u32) -> Arc<dyn Op> {
    Arc::new(Resize::ShorterSide(size))
}

/// The centred `size` × `size` window, padded with zeros where the image is smaller; see
/// [`CenterCrop`].
pub fn center_crop(size: u32) -> Arc<dyn Op> {
    Arc::new(CenterCrop {
        width: size,
        height: size,
    })
}

/// Mirrors left to right with probability one half; see [`RandomFlip`].
pub fn random_flip() -> Arc<dyn Op> {
    Arc::new(RandomFlip {
        horizontal: true,
        p: 0.5,
    })
}

/// Normalizes with ImageNet's mean and std to `f32` CHW, as torchvision's
/// `Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])` after `ToTensor`; see
/// [`Normalize`].
pub fn normalize_imagenet() -> Arc<dyn Op> {
    Arc::new(Normalize {
        mean: vec![0.485, 0.456, 0.406],
        std: vec![0.229, 0.224, 0.225],
        dtype: DType::F32,
        layout: Layout::Chw,
    })
}

fn image_of(value: Value, op: &str) -> Result<Image, OpError> {
    match value {
        Value::Image(img) => Ok(img),
        Value::Bytes(_) => Err(OpError::new(format!(
            "{op} takes an image: put decode() before it"
        ))),
        Value::Tensor(_) => Err(OpError::new(format!(
            "{op} takes an image, not a tensor: put it before normalize()"
        ))),
    }
}

/// Decodes JPEG, PNG or WebP bytes (the format is sniffed) into an image of `channels` channels
/// (`None`: the image's own). Only the header is read here; the pixels are decoded by the
/// first operation that needs them.
#[derive(Debug, Clone)]
pub struct Decode {
    /// Channels of the result: 1 (grey), 3 (RGB), 4 (RGBA), or `None` for the image's own.
    pub channels: Option<u8>,
}

impl Op for Decode {
    fn name(&self) -> String {
        match self.channels {
            Some(3) => "decode()".into(),
            Some(c) => format!("decode(channels={c})"),
            None => "decode(channels=None)".into(),
        }
    }

    fn apply(&self, value: Value, _rng: &mut Rng) -> Result<Value, OpError> {
        let bytes = match value {
            Value::Bytes(b) => b,
            other => return Ok(other),
        };
        if let Some(c) = self.channels {
            if !matches!(c, 1 | 3 | 4) {
                return Err(OpError::new(format!("channels must be 1, 3 or 4, not {c}")));
            }
        }
        let (encoded, header) = Encoded::open(bytes, self.channels)?;
        Ok(Value::Image(Image {
            width: header.width,
            height: header.height,
            channels: header.channels,
            repr: Repr::Encoded(encoded),
        }))
    }
}

/// Refuses an output side of 0 or over [`codec::MAX_SIDE`].
fn check_sides(width: u32, height: u32) -> Result<(), OpError> {
    match (1..=codec::MAX_SIDE).contains(&width) && (1..=codec::MAX_SIDE).contains(&height) {
        true => Ok(()),
        false => Err(OpError::new(format!(
            "sides must be 1 to {}, not {width}x{height}",
            codec::MAX_SIDE
        ))),
    }
}

/// The `width` × `height` window of `img` whose top left corner is at (`left`, `top`)
/// (negative: before the image), zeros where it leaves the image. An encoded image decodes only
/// the part the window covers.
fn window_of(img: Image, left: i64, top: i64, width: u32, height: u32) -> Result<Value, OpError> {
    let (w, h, c) = (img.width, img.height, img.channels);
    let out = match img.repr {
        Repr::Encoded(e) => {
            let clamp = |v: i64, size: u32| v.clamp(0, i64::from(size)) as u32;
            let (l, r) = (clamp(left, w), clamp(left + i64::from(width), w));
            let (t, b) = (clamp(top, h), clamp(top + i64::from(height), h));
            if l >= r || t >= b {
                // The window misses the image: nothing to decode (the header was checked).
                geometry::window(&[], 0, 0, c, 0, 0, width, height)
            } else {
                let (pixels, region) = e.decode_region(c, (l, t, r, b), (w, h))?;
                geometry::window(
                    &pixels,
                    region.width,
                    region.height,
                    c,
                    left - i64::from(region.left),
                    top - i64::from(region.top),
                    width,
                    height,
                )
            }
        }
        Repr::Pixels(pixels) => geometry::window(&pixels, w, h, c, left, top, width, height),
    };
    Ok(Value::Image(Image::from_pixels(width, height, c, out)?))
}

/// `rect` of `img`, resized to `out_w` × `out_h`. An encoded image decodes only the part the
/// resize reads: the rectangle and the filter's reach around it.
fn crop_resize(img: Image, rect: Rect, out_w: u32, out_h: u32) -> Result<Image, OpError> {
    let (w, h, c) = (img.width, img.height, img.channels);
    let out = match img.repr {
        Repr::Encoded(e) => {
            let (l, r) = reach(rect.left, rect.width, out_w, w);
            let (t, b) = reach(rect.top, rect.height, out_h, h);
            let (pixels, region) = e.decode_region(c, (l, t, r, b), (w, h))?;
            let local = Rect {
                left: rect.left - f64::from(region.left),
                top: rect.top - f64::from(region.top),
                ..rect
            };
            geometry::crop_resize(&pixels, region.width, region.height, c, local, out_w, out_h)?
        }
        Repr::Pixels(pixels) => geometry::crop_resize(&pixels, w, h, c, rect, out_w, out_h)?,
    };
    Ok(Image::from_pixels(out_w, out_h, c, out)?)
}

/// The source pixels (`from..to`, on an axis of `size` pixels) that resizing `start..start +
/// len` to `out` pixels reads: the bilinear filter reaches one source pixel past each sample,
/// times the shrink factor when it antialiases, and two more are kept for rounding.
fn reach(start: f64, len: f64, out: u32, size: u32) -> (u32, u32) {
    let support = (len / f64::from(out.max(1))).max(1.0) + 2.0;
    let from = (start - support).floor().clamp(0.0, f64::from(size - 1));
    let to = (start + len + support)
        .ceil()
        .clamp(from + 1.0, f64::from(size));
    (from as u32, to as u32)
}

/// torchvision's `RandomResizedCrop`: a rectangle of a random share of the area (`scale`) and a
/// random aspect ratio (log-uniform in `ratio`), resized to `width` × `height`.
#[derive(Debug, Clone)]
pub struct RandomResizedCrop {
    /// Output width.
    pub width: u32,
    /// Output height.
    pub height: u32,
    /// The share of the image's area, drawn uniformly. Default (0.08, 1.0).
    pub scale: (f64, f64),
    /// The aspect ratio (width / height), drawn log-uniformly. Default (3/4, 4/3).
    pub ratio: (f64, f64),
}

impl RandomResizedCrop {
    /// torchvision's defaults: scale (0.08, 1), ratio (3/4, 4/3).
    pub fn new(width: u32, height: u32) -> RandomResizedCrop {
        RandomResizedCrop {
            width,
            height,
            scale: (0.08, 1.0),
            ratio: (3.0 / 4.0, 4.0 / 3.0),
        }
    }

    fn check(&self) -> Result<(), OpError> {
        let ok = self.width > 0
            && self.height > 0
            && self.width <= codec::MAX_SIDE
            && self.height <= codec::MAX_SIDE
            && 0.0 < self.scale.0
            && self.scale.0 <= self.scale.1
            && self.scale.1 <= 1.0
            && 0.0 < self.ratio.0
            && self.ratio.0 <= self.ratio.1
            && self.ratio.1.is_finite();
        match ok {
            true => Ok(()),
            false => Err(OpError::new(
                "needs a size of 1 to 16384, 0 < scale.0 <= scale.1 <= 1 and 0 < ratio.0 <= ratio.1",
            )),
        }
    }
}

impl Op for RandomResizedCrop {
    fn name(&self) -> String {
        format!(
            "random_resized_crop({}x{}, scale=({}, {}), ratio=({:.3}, {:.3}))",
            self.width, self.height, self.scale.0, self.scale.1, self.ratio.0, self.ratio.1
        )
    }

    fn apply(&self, value: Value, rng: &mut Rng) -> Result<Value, OpError> {
        self.check()?;
        let img = image_of(value, "random_resized_crop")?;
        let rect =
            geometry::random_resized_rect(img.width, img.height, self.scale, self.ratio, rng);
        Ok(Value::Image(crop_resize(
            img,
            rect,
            self.width,
            self.height,
        )?))
    }
}

/// Resizes an image (bilinear, antialiased when shrinking).
#[derive(Debug, Clone)]
pub enum Resize {
    /// The shorter side to this many pixels, keeping the aspect ratio (torchvision's
    /// `Resize(int)`).
    ShorterSide(u32),
    /// Exactly this width and height.
    Exact {
        /// Output width.
        width: u32,
        /// Output height.
        height: u32,
    },
}

impl Op for Resize {
    fn name(&self) -> String {
        match self {
            Resize::ShorterSide(s) => format!("resize({s})"),
            Resize::Exact { width, height } => format!("resize({width}x{height})"),
        }
    }

    fn apply(&self, value: Value, _rng: &mut Rng) -> Result<Value, OpError> {
        let img = image_of(value, "resize")?;
        let (w, h) = (img.width, img.height);
        let (ow, oh) = match *self {
            Resize::ShorterSide(s) if w <= h => {
                (s, ((u64::from(h) * u64::from(s)) / u64::from(w)) as u32)
            }
            Resize::ShorterSide(s) => (((u64::from(w) * u64::from(s)) / u64::from(h)) as u32, s),
            Resize::Exact { width, height } => (width, height),
        };
        if ow == 0 || oh == 0 || ow > codec::MAX_SIDE || oh > codec::MAX_SIDE {
            return Err(OpError::new(format!(
                "resizing {w}x{h} gives {ow}x{oh} (sides must be 1 to {})",
                codec::MAX_SIDE
            )));
        }
        let whole = Rect {
            left: 0.0,
            top: 0.0,
            width: f64::from(w),
            height: f64::from(h),
        };
        Ok(Value::Image(crop_resize(img, whole, ow, oh)?))
    }
}

/// The centred `width` × `height` window, padded with zeros where the image is smaller
/// (torchvision's `CenterCrop`).
#[derive(Debug, Clone)]
pub struct CenterCrop {
    /// Output width.
    pub width: u32,
    /// Output height.
    pub height: u32,
}

impl Op for CenterCrop {
    fn name(&self) -> String {
        format!("center_crop({}x{})", self.width, self.height)
    }

    fn apply(&self, value: Value, _rng: &mut Rng) -> Result<Value, OpError> {
        check_sides(self.width, self.height)?;
        let img = image_of(value, "center_crop")?;
        // torchvision rounds the centred window's offsets.
        let left = ((f64::from(img.width) - f64::from(self.width)) / 2.0).round() as i64;
        let top = ((f64::from(img.height) - f64::from(self.height)) / 2.0).round() as i64;
        window_of(img, left, top, self.width, self.height)
    }
}

/// A `width` × `height` window placed uniformly at random (torchvision's `RandomCrop` with
/// `pad_if_needed=True`): where the image is narrower or shorter than the window, it is
/// centred on that side and padded with zeros.
#[derive(Debug, Clone)]
pub struct RandomCrop {
    /// Output width.
    pub width: u32,
    /// Output height.
    pub height: u32,
}

impl Op for RandomCrop {
    fn name(&self) -> String {
        format!("random_crop({}x{})", self.width, self.height)
    }

    fn apply(&self, value: Value, rng: &mut Rng) -> Result<Value, OpError> {
        check_sides(self.width, self.height)?;
        let img = image_of(value, "random_crop")?;
        let (w, h) = (img.width, img.height);
        // Both draws are made whatever the sizes, so later operations draw the same numbers.
        let dx = rng.below(u64::from(w.saturating_sub(self.width)) + 1) as i64;
        let dy = rng.below(u64::from(h.saturating_sub(self.height)) + 1) as i64;
        let left = if w >= self.width {
            dx
        } else {
            -(i64::from(self.width - w) / 2)
        };
        let top = if h >= self.height {
            dy
        } else {
            -(i64::from(self.height - h) / 2)
        };
        window_of(img, left, top, self.width, self.height)
    }
}

/// Mirrors an image with probability `p`: left to right (`horizontal`) or top to bottom.
#[derive(Debug, Clone)]
pub struct RandomFlip {
    /// Left to right if true, top to bottom if false.
    pub horizontal: bool,
    /// The probability of a flip.
    pub p: f64,
}

impl Op for RandomFlip {
    fn name(&self) -> String {
        let dir = if self.horizontal {
            "horizontal"
        } else {
            "vertical"
        };
        format!("random_flip({dir}, p={})", self.p)
    }

    fn apply(&self, value: Value, rng: &mut Rng) -> Result<Value, OpError> {
        let mut img = image_of(value, "random_flip")?;
        // The draw is made whatever the outcome, so later operations draw the same numbers.
        if !rng.chance(self.p) {
            return Ok(Value::Image(img));
        }
        let (w, c) = (img.width, img.channels);
        let pixels = img.pixels()?;
        match self.horizontal {
            true => geometry::flip_horizontal(pixels, w, c),
            false => geometry::flip_vertical(pixels, w, c),
        }
        Ok(Value::Image(img))
    }
}

/// Where channels go in a normalized tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `[height, width, channels]` (TensorFlow, JAX).
    Hwc,
    /// `[channels, height, width]` (PyTorch).
    Chw,
}

/// `(x / 255 - mean[c]) / std[c]` per channel, as `dtype` (`f32`, `f16` or `bf16`), in `layout`.
#[derive(Debug, Clone)]
pub struct Normalize {
    /// Per-channel mean, on the 0–1 scale.
    pub mean: Vec<f32>,
    /// Per-channel standard deviation, on the 0–1 scale.
    pub std: Vec<f32>,
    /// `F32`, `F16` or `Bf16`.
    pub dtype: DType,
    /// HWC or CHW.
    pub layout: Layout,
}

impl Op for Normalize {
    fn name(&self) -> String {
        format!(
            "normalize(mean={:?}, std={:?}, dtype={}, layout={:?})",
            self.mean, self.std, self.dtype, self.layout
        )
    }

    fn apply(&self, value: Value, _rng: &mut Rng) -> Result<Value, OpError> {
        let img = image_of(value, "normalize")?;
        let (w, h, c) = (
            img.width as usize,
            img.height as usize,
            usize::from(img.channels),
        );
        if self.mean.len() != c || self.std.len() != c || self.std.contains(&0.0) {
            return Err(OpError::new(format!(
                "a {c}-channel image needs {c} means and {c} non-zero stds (got {} and {})",
                self.mean.len(),
                self.std.len()
            )));
        }
        let pixels = img.into_pixels()?;
        // x * scale[c] + shift[c] == (x / 255 - mean) / std
        let scale: Vec<f32> = self.std.iter().map(|s| 1.0 / (255.0 * s)).collect();
        let shift: Vec<f32> = self
            .mean
            .iter()
            .zip(&self.std)
            .map(|(m, s)| -m / s)
            .collect();
        let item = self.dtype.item_bytes() as usize;
        let mut out = vec![0u8; w * h * c * item];
        let write: fn(&mut [u8], f32) = match self.dtype {
            DType::F32 => |o, v| o.copy_from_slice(&v.to_le_bytes()),
            DType::F16 => |o, v| o.copy_from_slice(&half::f16::from_f32(v).to_le_bytes()),
            DType::Bf16 => |o, v| o.copy_from_slice(&half::bf16::from_f32(v).to_le_bytes()),
            other => {
                return Err(OpError::new(format!(
                    "normalizes to f32, f16 or bf16, not {other}"
                )))
            }
        };
        let plane = w * h;
        for (p, px) in pixels.chunks_exact(c).enumerate() {
            for (k, ((&x, sc), sh)) in px.iter().zip(&scale).zip(&shift).enumerate() {
                let at = match self.layout {
                    Layout::Hwc => p * c + k,
                    Layout::Chw => k * plane + p,
                };
                if let Some(slot) = out.get_mut(at * item..(at + 1) * item) {
                    write(slot, f32::from(x) * sc + sh);
                }
            }
        }
        let shape = match self.layout {
            Layout::Hwc => vec![h as u64, w as u64, c as u64],
            Layout::Chw => vec![c as u64, h as u64, w as u64],
        };
        Ok(Value::Tensor(Tensor::new(self.dtype, shape, out)?))
    }
}
