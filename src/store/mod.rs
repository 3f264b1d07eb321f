//! The storage engine on top of `format/` and `io/`: datasets, snapshots, the writer and its
//! commit protocol.

pub mod collection;
pub mod dataset;
pub(crate) mod gather;
pub mod location;
pub(crate) mod paged;
pub mod read;
pub(crate) mod resolve;
pub mod scan;
pub mod schema;
pub mod snapshot;
pub mod writer;
