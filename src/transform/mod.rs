//! The transform stage: per-record operations (decode, crop, flip, normalize, your own) that
//! turn a gathered batch's bytes into samples, run by the loader's prefetch workers in parallel.
//!
//! A [`Map`] lists, per field, the [`Op`]s every record's value goes through; give it to
//! [`crate::pipeline::LoaderBuilder::map`]. Each operation takes a [`Value`] (stored bytes, an
//! [`Image`] or a [`Tensor`]) and the record's [`Rng`], and returns the next value; the last
//! value of every record lands in the batch, one column per field. With the `images` feature,
//! `image` has the built-in image operations (JPEG and PNG decoding, random resized crop,
//! resize, center crop, flip, normalize, CHW layout).
//!
//! ```
//! use std::sync::Arc;
//! use zrecord::transform::{Map, Op, OpError, Rng, Tensor, Value};
//! use zrecord::DType;
//!
//! /// Adds a random offset in [0, 10) to a one-byte value, as a u16.
//! #[derive(Debug)]
//! struct Jitter;
//!
//! impl Op for Jitter {
//!     fn name(&self) -> String {
//!         "jitter".into()
//!     }
//!     fn apply(&self, value: Value, rng: &mut Rng) -> Result<Value, OpError> {
//!         let Value::Bytes(b) = value else { return Err(OpError::new("expects bytes")) };
//!         let x = u16::from(*b.first().ok_or_else(|| OpError::new("empty"))?);
//!         let y = x + rng.below(10) as u16;
//!         Ok(Value::Tensor(Tensor::new(DType::U16, vec![], y.to_le_bytes().to_vec())?))
//!     }
//! }
//!
//! let map = Map::new().field("x", [Arc::new(Jitter) as Arc<dyn Op>]);
//! assert_eq!(map.describe(), [("x".to_string(), vec!["jitter".to_string()])]);
//! ```

#[cfg(feature = "images")]
pub mod image;
mod map;
mod rng;
mod value;

use std::fmt;

pub use map::{Map, RecordKey};
pub use rng::Rng;
pub use value::{Image, Tensor, Value};

/// One operation of a field's transform: takes a record's value and its generator, returns the
/// next value. Runs on the loader's worker threads (so `Send + Sync`), once per record, in
/// record order within a batch; every random choice must come from `rng`, so resume stays exact.
pub trait Op: Send + Sync + fmt::Debug {
    /// The operation and its arguments, as errors and [`Map::describe`] name it, for example
    /// `random_resized_crop(224, scale=(0.08, 1), ratio=(0.75, 1.333))`.
    fn name(&self) -> String;

    /// Applies the operation to one record's value.
    ///
    /// # Errors
    /// An [`OpError`] saying why the value cannot be transformed: the loader wraps it in
    /// [`crate::Error::Transform`] with the record index, field and operation.
    fn apply(&self, value: Value, rng: &mut Rng) -> Result<Value, OpError>;
}

/// Why an [`Op`] failed on a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpError {
    reason: String,
}

impl OpError {
    /// An error saying `reason`.
    pub fn new(reason: impl Into<String>) -> OpError {
        OpError {
            reason: reason.into(),
        }
    }

    /// The reason.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for OpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for OpError {}

impl From<String> for OpError {
    fn from(reason: String) -> OpError {
        OpError { reason }
    }
}

impl From<&str> for OpError {
    fn from(reason: &str) -> OpError {
        OpError::new(reason)
    }
}
