//! [`EpochCount`]: the place of each item within its epoch, for adapters over a stream of
//! unknown length.

use serde::{Deserialize, Serialize};

/// Counts the items of the current epoch of a stream of [`super::Sample`]s: an item
/// whose epoch differs from the previous item's starts a new count at 0.
///
/// Over a cursor of a seekable stage the count of an item is its position in the epoch, so
/// the stream adapters place items (shard membership, bucket buffers, batch positions) exactly
/// as the seekable stages do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EpochCount {
    /// The epoch of the last item counted; `None` before the first.
    pub epoch: Option<u64>,
    /// Items of that epoch counted so far.
    pub seen: u64,
}

impl EpochCount {
    /// Counts an item of `epoch` and returns its place in the epoch (0 for the first).
    pub(crate) fn next(&mut self, epoch: u64) -> u64 {
        if self.epoch != Some(epoch) {
            self.epoch = Some(epoch);
            self.seen = 0;
        }
        let ordinal = self.seen;
        self.seen = self.seen.saturating_add(1);
        ordinal
    }
}
