//! zrecord: a record store and data loader for ML training.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod error;
pub mod format;
pub mod pipeline;

pub use error::{Error, Result};
pub use format::dtype::{Codec, DType};
pub mod io;
pub mod store;

pub use store::batch::{Batch, Element};
pub use store::dataset::Dataset;
pub use store::schema::{Field, Schema};
pub use store::snapshot::Snapshot;
pub use store::writer::{Writer, WriterConfig};
