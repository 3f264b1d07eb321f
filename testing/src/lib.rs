//! Test machinery for zrecord, kept out of the product: what the crash, I/O-error and
//! object-store tests (and the fuzz targets) run zrecord on.
//!
//! - [`SimFs`], [`FaultFs`] and the crash images ([`CrashState`], [`ImageSpec`], [`Image`]):
//!   a simulated file system that knows what a power cut would keep, and a wrapper that crashes
//!   or fails at a chosen operation. Both implement the writer's file-system seam,
//!   [`zrecord::testing::Vfs`] (feature `testing` of zrecord); a writer runs on them through
//!   [`zrecord::Writer::create_with_vfs`] and [`zrecord::Writer::open_with_vfs`].
//! - [`FaultProxy`]: an HTTP/1.1 proxy that adds latency, 503s, connection resets and truncated
//!   bodies between an object-store client and its server. It knows nothing of zrecord but its
//!   error type.
//!
//! ```
//! use std::path::Path;
//! use std::sync::Arc;
//! use zrecord::testing::Vfs;
//! use zrecord::{DType, Field, Schema, Writer, WriterConfig};
//! use zrecord_testing::{FaultFs, SimFs};
//!
//! # fn main() -> zrecord::Result<()> {
//! let sim = SimFs::new();
//! sim.mkdir_durable(Path::new("/sim"))?;
//! let fault = FaultFs::new(Arc::new(sim.clone()));
//! let vfs: Arc<dyn Vfs> = Arc::new(fault.clone());
//! let schema = Schema::new().field(Field::new("x", DType::U8));
//! let mut w = Writer::create_with_vfs(vfs, "/sim/ds", &schema, WriterConfig::default())?;
//! w.append(&[b"abc"])?;
//! fault.crash_at(fault.ops()); // the power goes out before the commit
//! assert!(w.commit().is_err());
//! # Ok(())
//! # }
//! ```
//!
//! Not a stable API: it follows what zrecord's tests need.

mod fault;
mod proxy;

pub use fault::{
    ContentMode, CrashState, FaultFile, FaultFs, FaultKind, Image, ImageSpec, SimFile, SimFs,
    SECTOR_BYTES,
};
pub use proxy::{FaultConfig, FaultCounts, FaultProxy, Logged};
