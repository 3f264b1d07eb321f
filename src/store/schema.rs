//! The schema a dataset is created with: its fields and chunk size.

use crate::error::{Error, Result};
use crate::format::dtype::{Codec, DType};
use crate::format::meta::{validate_fields, FieldMeta};
use crate::format::{MAX_CHUNK_BYTES, MAX_RECORD_BYTES};

/// One field of a dataset: a name, an element type, an optional fixed item shape and a codec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// 1–64 characters of `[A-Za-z0-9_-]` (the name is part of file names).
    pub name: String,
    /// Element type (default `bytes`).
    pub dtype: DType,
    /// Fixed item shape: a present record must hold exactly `product(shape)` items; `Some(vec![])`
    /// is a scalar. `None` (the default) allows any whole number of items.
    pub shape: Option<Vec<u64>>,
    /// Codec for new records (default `raw`).
    pub codec: Codec,
}

impl Field {
    /// A field of untyped bytes, raw, with no fixed shape.
    pub fn new(name: impl Into<String>, dtype: DType) -> Field {
        Field {
            name: name.into(),
            dtype,
            shape: None,
            codec: Codec::Raw,
        }
    }

    /// Sets a fixed item shape.
    pub fn shape(mut self, shape: impl Into<Vec<u64>>) -> Field {
        self.shape = Some(shape.into());
        self
    }

    /// Sets the codec.
    pub fn codec(mut self, codec: Codec) -> Field {
        self.codec = codec;
        self
    }
}

/// The fields of a dataset and its chunk size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schema {
    /// The fields, in order: a record gives one byte string per field in this order.
    pub fields: Vec<Field>,
    /// A chunk is sealed when the next record would take it past this size, and records go to a
    /// fresh chunk. Default 256 MiB; at most 2^40 (the u40 offset).
    pub chunk_size_bytes: u64,
}

/// Default [`Schema::chunk_size_bytes`]: 256 MiB.
pub const DEFAULT_CHUNK_SIZE_BYTES: u64 = 256 << 20;

impl Default for Schema {
    fn default() -> Self {
        Schema {
            fields: Vec::new(),
            chunk_size_bytes: DEFAULT_CHUNK_SIZE_BYTES,
        }
    }
}

impl Schema {
    /// An empty schema with the default chunk size.
    pub fn new() -> Schema {
        Schema::default()
    }

    /// Adds a field.
    pub fn field(mut self, field: Field) -> Schema {
        self.fields.push(field);
        self
    }

    /// Sets the chunk size.
    pub fn chunk_size_bytes(mut self, bytes: u64) -> Schema {
        self.chunk_size_bytes = bytes;
        self
    }

    /// Checks names, shapes and the chunk size.
    pub fn validate(&self) -> Result<()> {
        validate_fields(
            self.fields
                .iter()
                .map(|f| (f.name.as_str(), f.dtype, f.shape.as_deref())),
        )
        .map_err(|reason| Error::InvalidSchema { reason })?;
        if self.chunk_size_bytes == 0 || self.chunk_size_bytes > MAX_CHUNK_BYTES {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "chunk_size_bytes {} must be between 1 and 2^40 (the largest u40 offset)",
                    self.chunk_size_bytes
                ),
            });
        }
        Ok(())
    }
}

/// Checks that `data` is a valid record for `field`: within the size limit, a whole number of
/// items, and of the fixed shape if one is set. Empty data (absent) is always valid.
pub(crate) fn check_record(field: &FieldMeta, data: &[u8]) -> Result<()> {
    let len = data.len() as u64;
    if len > MAX_RECORD_BYTES {
        return Err(Error::RecordTooLarge {
            field: field.name.clone(),
            len,
            max: MAX_RECORD_BYTES,
        });
    }
    if len == 0 {
        return Ok(());
    }
    let item = field.dtype.item_bytes();
    if !len.is_multiple_of(item) {
        return Err(Error::ShapeMismatch {
            field: field.name.clone(),
            reason: format!(
                "{len} bytes is not a whole number of {} items ({item} bytes each)",
                field.dtype
            ),
        });
    }
    if let Some(shape) = &field.shape {
        let items: u64 = shape.iter().product();
        if len != items * item {
            return Err(Error::ShapeMismatch {
                field: field.name.clone(),
                reason: format!(
                    "shape {shape:?} of {} needs {} bytes, got {len}",
                    field.dtype,
                    items * item
                ),
            });
        }
    }
    Ok(())
}
