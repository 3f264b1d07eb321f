//! What a transform's operations pass along: a record's value as stored bytes, an image, or a
//! tensor.

use bytes::Bytes;

use crate::format::dtype::DType;

/// One record's value of one field, as it moves through a field's operations.
#[derive(Debug, Clone)]
pub enum Value {
    /// The bytes as stored (what the loader gathered), or bytes an operation made.
    Bytes(Bytes),
    /// An image, height × width × channels of `u8` (interleaved, rows top to bottom).
    Image(Image),
    /// A dense array of `dtype`, `shape`, row-major, little-endian.
    Tensor(Tensor),
}

/// An image: `height` rows of `width` pixels of `channels` bytes (1: grey, 3: RGB, 4: RGBA).
///
/// An image `image::decode()` made is still encoded (its header read, so its size is
/// known): [`Image::pixels`] and [`Image::into_pixels`] decode it, once, when an operation
/// first needs its pixels.
#[derive(Clone)]
pub struct Image {
    pub(crate) width: u32,
    pub(crate) height: u32,
    pub(crate) channels: u8,
    pub(crate) repr: Repr,
}

/// An image's pixels, or the encoded bytes they come from.
#[derive(Clone)]
pub(crate) enum Repr {
    Pixels(Vec<u8>),
    #[cfg(feature = "images")]
    Encoded(super::image::Encoded),
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.repr {
            Repr::Pixels(_) => "pixels",
            #[cfg(feature = "images")]
            Repr::Encoded(_) => "encoded",
        };
        f.debug_struct("Image")
            .field("width", &self.width)
            .field("height", &self.height)
            .field("channels", &self.channels)
            .field("state", &state)
            .finish()
    }
}

impl Image {
    /// An image of decoded pixels: `pixels.len()` must be `width * height * channels`.
    ///
    /// # Errors
    /// A reason if the length does not match or `channels` is not 1 to 4.
    pub fn from_pixels(
        width: u32,
        height: u32,
        channels: u8,
        pixels: Vec<u8>,
    ) -> Result<Image, String> {
        if !(1..=4).contains(&channels) {
            return Err(format!("an image has 1 to 4 channels, not {channels}"));
        }
        let want = (width as usize)
            .checked_mul(height as usize)
            .and_then(|n| n.checked_mul(usize::from(channels)));
        if want != Some(pixels.len()) {
            return Err(format!(
                "{width}x{height}x{channels} pixels need {} bytes, got {}",
                want.map_or_else(|| "too many".to_string(), |n| n.to_string()),
                pixels.len()
            ));
        }
        Ok(Image {
            width,
            height,
            channels,
            repr: Repr::Pixels(pixels),
        })
    }

    /// Width in pixels.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Height in pixels.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// Bytes per pixel: 1 (grey), 3 (RGB) or 4 (RGBA).
    pub fn channels(&self) -> u8 {
        self.channels
    }

    /// True if the pixels are decoded (an operation that needs them decodes them first).
    pub fn is_decoded(&self) -> bool {
        matches!(self.repr, Repr::Pixels(_))
    }

    /// The decoded pixels, decoding them first if the image is still encoded.
    ///
    /// # Errors
    /// A reason if the encoded bytes cannot be decoded.
    pub fn into_pixels(self) -> Result<Vec<u8>, String> {
        match self.repr {
            Repr::Pixels(p) => Ok(p),
            #[cfg(feature = "images")]
            Repr::Encoded(e) => e.decode_all(self.channels),
        }
    }

    /// Decodes the image in place if it is still encoded, and returns its pixels.
    ///
    /// # Errors
    /// A reason if the encoded bytes cannot be decoded.
    pub fn pixels(&mut self) -> Result<&mut Vec<u8>, String> {
        #[cfg(feature = "images")]
        if let Repr::Encoded(e) = &self.repr {
            self.repr = Repr::Pixels(e.decode_all(self.channels)?);
        }
        match &mut self.repr {
            Repr::Pixels(p) => Ok(p),
            #[cfg(feature = "images")]
            Repr::Encoded(_) => Err("the image was not decoded (a zrecord bug)".into()),
        }
    }
}

/// A dense array: `shape` items of `dtype`, row-major, little-endian, in `data`.
#[derive(Debug, Clone)]
pub struct Tensor {
    dtype: DType,
    shape: Vec<u64>,
    data: Vec<u8>,
}

impl Tensor {
    /// A tensor of `dtype` and `shape` over `data`, which must hold exactly its items.
    ///
    /// # Errors
    /// A reason if `data.len()` is not `product(shape) * dtype.item_bytes()`.
    pub fn new(dtype: DType, shape: Vec<u64>, data: Vec<u8>) -> Result<Tensor, String> {
        let want = shape
            .iter()
            .try_fold(dtype.item_bytes(), |acc, &d| acc.checked_mul(d));
        if want != Some(data.len() as u64) {
            return Err(format!(
                "a {dtype} tensor of shape {shape:?} needs {} bytes, got {}",
                want.map_or_else(|| "too many".to_string(), |n| n.to_string()),
                data.len()
            ));
        }
        Ok(Tensor { dtype, shape, data })
    }

    /// The item type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// The items' bytes.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The items' bytes, owned.
    pub fn into_data(self) -> Vec<u8> {
        self.data
    }
}

/// A value's final form in a batch: its dtype, its shape (`None`: a byte string of any length)
/// and its bytes.
pub(crate) struct Output {
    pub(crate) dtype: DType,
    pub(crate) shape: Option<Vec<u64>>,
    pub(crate) data: Bytes,
}

impl Value {
    /// The value as it lands in the batch; `stored` is the field's dtype (for bytes).
    pub(crate) fn into_output(self, stored: DType) -> Result<Output, String> {
        Ok(match self {
            Value::Bytes(b) => Output {
                dtype: stored,
                shape: None,
                data: b,
            },
            Value::Image(img) => {
                let shape = vec![
                    u64::from(img.height),
                    u64::from(img.width),
                    u64::from(img.channels),
                ];
                Output {
                    dtype: DType::U8,
                    shape: Some(shape),
                    data: Bytes::from(img.into_pixels()?),
                }
            }
            Value::Tensor(t) => Output {
                dtype: t.dtype,
                shape: Some(t.shape),
                data: Bytes::from(t.data),
            },
        })
    }
}
