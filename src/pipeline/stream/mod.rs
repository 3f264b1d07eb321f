//! The stream prefetch (moving into `prefetch/` with #31).

mod prefetch;

pub use prefetch::{PrefetchStream, PrefetchStreamState};
