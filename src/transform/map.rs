//! [`Map`]: each field's operations, run over every record of a gathered batch.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use super::value::Output;
use super::{Op, OpError, Rng, Value};
use crate::format::dtype::DType;
use crate::store::read::batch::{Batch, Span};
use crate::{Error, Result};

/// Per field, the operations every record's value goes through, in order: the transform stage
/// of a loader ([`crate::pipeline::LoaderBuilder::map`]), run by its prefetch workers on their
/// own threads, in parallel, with the batch's records in order.
///
/// A field's last operation decides what lands in the batch: an [`super::Image`] becomes a `u8`
/// value of shape `[height, width, channels]`, a [`super::Tensor`] its dtype and shape, bytes
/// the field's dtype. When every record's value of a field has one shape, the batch declares it
/// ([`Batch::shape`]) and the values lie end to end in one 64-byte-aligned buffer
/// ([`Batch::column`]): one `(batch, height, width, channels)` array, with no copy, in Python.
/// Fields with no operations pass through unchanged (zero-copy).
///
/// Every random choice comes from the record's [`Rng`], seeded from (loader seed, epoch, record
/// index, field): the same record gets the same crop in the same epoch on any worker count,
/// after a resume, and on any rank count after an elastic resume. A checkpoint holds no
/// transform state.
///
/// An operation that fails is [`Error::Transform`], naming the record index, the field and the
/// operation; the loader treats it like a read that failed for good (not retried; the stream
/// stops, or skips the batch with [`crate::pipeline::OnError::Skip`]).
#[derive(Clone, Default)]
pub struct Map {
    fields: Vec<(String, Vec<Arc<dyn Op>>)>,
}

impl fmt::Debug for Map {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for (field, ops) in &self.fields {
            m.entry(field, &ops.iter().map(|o| o.name()).collect::<Vec<_>>());
        }
        m.finish()
    }
}

/// Which record a value belongs to: the [`Rng`]'s seed besides the loader's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordKey {
    /// The sampler epoch of the record.
    pub epoch: u64,
    /// The record index.
    pub index: u64,
}

impl Map {
    /// No operations.
    pub fn new() -> Map {
        Map::default()
    }

    /// Adds `ops` for `field` (after any it has already).
    pub fn field(
        mut self,
        field: impl Into<String>,
        ops: impl IntoIterator<Item = Arc<dyn Op>>,
    ) -> Map {
        let field = field.into();
        let ops = ops.into_iter();
        match self.fields.iter_mut().find(|(f, _)| *f == field) {
            Some((_, have)) => have.extend(ops),
            None => self.fields.push((field, ops.collect())),
        }
        self
    }

    /// True if no field has an operation.
    pub fn is_empty(&self) -> bool {
        self.fields.iter().all(|(_, ops)| ops.is_empty())
    }

    /// The fields with operations, and their operations' names.
    pub fn describe(&self) -> Vec<(String, Vec<String>)> {
        self.fields
            .iter()
            .map(|(f, ops)| (f.clone(), ops.iter().map(|o| o.name()).collect()))
            .collect()
    }

    /// Runs every field's operations over every record of `batch`: record `i` is `records[i]`,
    /// its generators seeded under `seed`.
    ///
    /// # Errors
    /// [`Error::UnknownField`] for a field the batch does not hold; [`Error::Transform`] for an
    /// operation that failed, or a field whose records came out with different dtypes;
    /// [`Error::Internal`] if `records` is not one per record.
    pub fn apply(&self, batch: Batch, seed: u64, records: &[RecordKey]) -> Result<Batch> {
        if self.is_empty() {
            return Ok(batch);
        }
        if records.len() != batch.len() {
            return Err(Error::Internal {
                reason: format!(
                    "a transform of {} records was given {} record keys",
                    batch.len(),
                    records.len()
                ),
            });
        }
        let positions = self
            .fields
            .iter()
            .map(|(f, _)| batch.field_position(f))
            .collect::<Result<Vec<_>>>()?;
        let (mut values, indices, fields, shapes) = batch.into_parts();
        let nf = fields.len();
        let mut new_fields: Vec<(String, DType)> = fields.to_vec();
        let mut new_shapes: Vec<Option<Vec<u64>>> = if shapes.is_empty() {
            vec![None; nf]
        } else {
            shapes.to_vec()
        };
        for ((name, ops), &pos) in self.fields.iter().zip(&positions) {
            if ops.is_empty() {
                continue;
            }
            let Some(&(_, stored)) = fields.get(pos) else {
                continue;
            };
            let mut outs: Vec<Output> = Vec::with_capacity(records.len());
            for (r, key) in records.iter().enumerate() {
                let bytes = values
                    .spans
                    .get(r * nf + pos)
                    .map_or_else(bytes::Bytes::new, |&span| values.bytes_of(span));
                let mut rng = Rng::for_record(seed, key.epoch, key.index, name);
                let mut value = Value::Bytes(bytes);
                for op in ops {
                    // A panic in an operation (a user's, or a decoder's) is this record's error.
                    let applied = catch_unwind(AssertUnwindSafe(|| op.apply(value, &mut rng)))
                        .unwrap_or_else(|panic| {
                            let e = Error::from_panic("the operation", panic.as_ref());
                            Err(OpError::new(e.to_string()))
                        });
                    value = applied.map_err(|e| Error::Transform {
                        field: name.clone(),
                        index: key.index,
                        op: op.name(),
                        reason: e.to_string(),
                    })?;
                }
                let out = value
                    .into_output(stored)
                    .map_err(|reason| Error::Transform {
                        field: name.clone(),
                        index: key.index,
                        op: "output".into(),
                        reason,
                    })?;
                if let Some(first) = outs.first() {
                    if first.dtype != out.dtype {
                        return Err(Error::Transform {
                            field: name.clone(),
                            index: key.index,
                            op: "output".into(),
                            reason: format!(
                                "its value is {}, but the batch's first record's is {}",
                                out.dtype, first.dtype
                            ),
                        });
                    }
                }
                outs.push(out);
            }
            let shape = match outs.split_first() {
                Some((first, rest)) if rest.iter().all(|o| o.shape == first.shape) => {
                    first.shape.clone()
                }
                _ => None,
            };
            if let Some(f) = new_fields.get_mut(pos) {
                f.1 = outs.first().map_or(stored, |o| o.dtype);
            }
            if let Some(s) = new_shapes.get_mut(pos) {
                *s = shape;
            }
            // One buffer, values end to end from a 64-byte-aligned start (a column).
            let total: usize = outs.iter().map(|o| o.data.len()).sum();
            let mut buf = vec![0u8; total + 64];
            let pad = buf.as_ptr().align_offset(64).min(64);
            let owner = values.owners.len() as u32;
            let mut at = pad;
            for (r, out) in outs.iter().enumerate() {
                let data = &out.data[..];
                if let Some(dst) = buf.get_mut(at..at + data.len()) {
                    dst.copy_from_slice(data);
                }
                if let Some(span) = values.spans.get_mut(r * nf + pos) {
                    *span = Span {
                        owner,
                        start: at,
                        len: data.len(),
                    };
                }
                at += data.len();
            }
            values.owners.push(bytes::Bytes::from(buf));
        }
        Ok(Batch::new(values, indices, new_fields.into()).with_shapes(new_shapes.into()))
    }
}
