//! The storage engine on top of `format/` and `io/`: datasets, snapshots, the writer and its
//! commit protocol.

pub(crate) mod append;
pub mod batch;
pub mod dataset;
mod finish;
pub(crate) mod layout;
pub mod scan;
pub mod schema;
pub mod snapshot;
pub mod writer;
