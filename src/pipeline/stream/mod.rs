//! The stream chain: the pipeline's stages as composable, checkpointable [`futures::Stream`]
//! adapters.
//!
//! ```text
//! any Checkpoint stream ─► shard ─► bucket ─► batch ─► prefetch ─► Result<LoaderBatch<T>>
//!   (a Cursor over a stage,    (each adapter a Checkpoint stream; map_items / filter_items
//!    or your own stage)         or your own stage fit between any two)
//! ```
//!
//! - [`Checkpoint`] says what a checkpointable stream is: a [`futures::Stream`] with a serde
//!   [`Checkpoint::State`], the position after the last item yielded, and
//!   [`Checkpoint::restore`] to go back there. Its documentation is the contract.
//! - [`CheckpointExt`] (blanket-implemented) adds the adapters, one per file here:
//!   [`ShardStream`], [`BucketStream`], [`BatchStream`], [`PrefetchStream`], [`MapItems`],
//!   [`FilterItems`]. Each adapter's state is a small serde struct holding its input's state,
//!   so the state of a whole chain is one nested value, checkpointed wherever each input can
//!   report and restore its position.
//! - A [`super::Cursor`] over any seekable [`super::Stage`] is a [`Checkpoint`] stream (its
//!   state is its [`super::CursorState`]): `sampler.cursor()` starts a stream chain.
//!
//! Over a cursor, the adapters place items exactly as the seekable stages do (they count the
//! items of each epoch, an epoch being a run of one [`super::Sample::epoch`] value), so
//! `sampler.cursor().shard(c)?.bucket(..)?.batch(..)?` yields the batches of
//! `sampler.shard(c)?.bucket(..)?.batch(..)?.cursor()`, for the interleaved shard.
//!
//! # Which chain
//!
//! - The **seekable chain** ([`super::StageExt`], [`super::LoaderBuilder`]) is the fast path:
//!   every stage is a pure function of `(epoch, position)`, so each prefetch worker runs its own
//!   share without coordination, a resume is O(1), the shard has every mode, and the merge can
//!   be best-effort. Use it (through [`super::Loader`]) unless you need a stage of your own.
//! - The **stream chain** accepts any stage: a filter, a stage that drops or repeats items, a
//!   stream read from elsewhere. The index side runs on the consumer's task, the gathers on
//!   worker threads; a restore replays at most one bucket buffer from its input.
//!
//! ```
//! use std::sync::Arc;
//! use futures::executor::block_on;
//! use futures::{StreamExt, TryStreamExt};
//! use zrecord::pipeline::{
//!     BatchConfig, Checkpoint, CheckpointExt, MemorySource, PrefetchConfig, Sampler,
//!     SamplerConfig, ShardConfig, Stage,
//! };
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let source = Arc::new(MemorySource::new((0..20u8).map(|i| vec![i]).collect()));
//! let sampler = Sampler::new(20, SamplerConfig::default().seed(3).epochs(Some(1)))?;
//! let chain = || {
//!     sampler
//!         .clone()
//!         .cursor()
//!         .filter_items(|s| s.index % 4 != 0) // a stage of your own: drop every fourth record
//!         .shard(ShardConfig::new(2, 0))? // rank 0 of 2
//!         .batch(BatchConfig::new(3))?
//!         .prefetch(Arc::clone(&source), PrefetchConfig::default())
//! };
//! let mut stream = chain()?;
//! let first = block_on(stream.next()).expect("a batch")?;
//! assert_eq!(first.indices().len(), 3);
//! let saved = serde_json::to_string(&stream.checkpoint())?;
//!
//! // Later, perhaps in another process: the same chain, restored.
//! let mut resumed = chain()?;
//! resumed.restore(serde_json::from_str(&saved)?)?;
//! let rest: Vec<Vec<u64>> = block_on(resumed.map_ok(|b| b.indices()).try_collect())?;
//! let expected: Vec<Vec<u64>> = block_on(stream.map_ok(|b| b.indices()).try_collect())?;
//! assert_eq!(rest, expected);
//! # Ok(())
//! # }
//! ```

mod batch;
mod bucket;
mod checkpoint;
mod count;
mod cursor;
mod ext;
mod filter;
mod group;
mod map;
mod prefetch;
mod shard;

pub use batch::{BatchStream, BatchStreamState};
pub use bucket::{BucketStream, BucketStreamState};
pub use checkpoint::Checkpoint;
pub use count::EpochCount;
pub use ext::CheckpointExt;
pub use filter::FilterItems;
pub use group::{Counted, GroupStart};
pub use map::MapItems;
pub use prefetch::{PrefetchStream, PrefetchStreamState};
pub use shard::{ShardStream, ShardStreamState};

#[cfg(test)]
pub(crate) mod testing {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
    //! Shared checks of the adapters' unit tests.

    use std::fmt::Debug;

    use futures::executor::block_on;
    use futures::StreamExt;

    use super::Checkpoint;
    use crate::pipeline::{Sampler, SamplerConfig, SamplerMode};
    use crate::Result;

    /// A shuffled sampler over `n` records, `epochs` epochs.
    pub(crate) fn sampler(n: u64, epochs: u64) -> Sampler {
        Sampler::new(
            n,
            SamplerConfig::default()
                .mode(SamplerMode::Shuffled)
                .seed(7)
                .epochs(Some(epochs)),
        )
        .unwrap()
    }

    /// Every item of `stream`, through `project`.
    pub(crate) fn all<C, T, X>(stream: C, project: impl Fn(T) -> X) -> Vec<X>
    where
        C: Checkpoint<Item = Result<T>> + Unpin,
    {
        block_on(stream.map(|r| project(r.unwrap())).collect())
    }

    /// A checkpoint after every item, through JSON, restored into a fresh stream, yields the
    /// rest of the uninterrupted run; returns that run.
    pub(crate) fn every_split<C, F, T, X>(make: F, project: impl Fn(T) -> X) -> Vec<X>
    where
        C: Checkpoint<Item = Result<T>> + Unpin,
        F: Fn() -> C,
        X: PartialEq + Debug,
    {
        let full = all(make(), &project);
        for k in 0..=full.len() {
            let mut s = make();
            for expected in &full[..k] {
                assert_eq!(&project(block_on(s.next()).unwrap().unwrap()), expected);
            }
            let json = serde_json::to_string(&s.checkpoint()).unwrap();
            // Restored into the stream that was read (dropping its buffers) and into a new one.
            let mut again = make();
            again.restore(serde_json::from_str(&json).unwrap()).unwrap();
            s.restore(serde_json::from_str(&json).unwrap()).unwrap();
            assert_eq!(
                all(again, &project)[..],
                full[k..],
                "fresh stream, split {k}"
            );
            assert_eq!(all(s, &project)[..], full[k..], "same stream, split {k}");
        }
        full
    }
}
