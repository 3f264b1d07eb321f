//! The stream chain: the pipeline's stages as composable, checkpointable [`futures::Stream`]
//! adapters, one per file; the overview and an example are in the `pipeline` module's
//! documentation.

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
