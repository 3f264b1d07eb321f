//! Checkpoint types: what [`super::Prefetch::state`] and [`super::Loader::state`] return, and what
//! resuming takes back. All of them are small (a few integers per worker), serde-serialisable,
//! and independent of the machine that took them.

#![deny(clippy::arithmetic_side_effects)]

use serde::{Deserialize, Serialize};

use super::description::{parse_description, setting, stage};
use super::residual::ElasticState;
use super::shard::{ShardConfig, ShardMode};

pub(crate) use super::description::describe_differences;

pub use super::stage::Position;

/// One prefetch worker's part of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerState {
    /// Number of items of this worker consumed so far (counted from the worker's start, see
    /// [`PrefetchState::base`]).
    pub consumed: u64,
    /// The worker's next item, i.e. its stage state after the last consumed item; `None` if the
    /// worker has no item left.
    pub next: Option<Position>,
}

/// The checkpoint of a [`super::Prefetch`]: the TinyGrad4 resume state.
///
/// Worker `w` of `num_workers` runs the items at global positions
/// `base + w, base + w + num_workers, …` of the index stage, where the global position of
/// `(epoch, position)` is `epoch * epoch_len + position`; the strict round-robin merge therefore
/// yields the items in global order, exactly the order of a single sequential pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefetchState {
    /// Number of workers.
    pub num_workers: u64,
    /// Global position of worker 0's first item.
    pub base: u64,
    /// The worker the merge visits next.
    pub next_worker: u64,
    /// Per worker, in worker order.
    pub workers: Vec<WorkerState>,
}

impl PrefetchState {
    /// Total number of items consumed since `base`.
    pub fn consumed(&self) -> u64 {
        self.workers
            .iter()
            .fold(0u64, |acc, w| acc.saturating_add(w.consumed))
    }

    /// If the consumed items are exactly the global positions `base..G` (always the case under
    /// the strict merge), returns `G`: the global position of the next item.
    pub fn prefix_end(&self) -> Option<u64> {
        let n = self.num_workers;
        if n == 0 {
            return None;
        }
        let total = self.consumed();
        let end = self.base.checked_add(total)?;
        // In `base..end`, worker w owns the positions congruent to base + w modulo n.
        let prefix_shape = self.workers.iter().enumerate().all(|(w, ws)| {
            let w = w as u64;
            // 0 for a worker past `total` (saturating_sub), and n != 0 (checked above).
            let owned = total.saturating_sub(w).div_ceil(n);
            ws.consumed == owned
        });
        prefix_shape.then_some(end)
    }
}

/// The checkpoint of a [`super::Loader`]: the source it read, the configuration of its index
/// chain, and the prefetch state. Serialise it with serde (e.g. `serde_json`) next to the model
/// checkpoint; it is a few hundred bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoaderState {
    /// Format version of this structure.
    pub version: u32,
    /// The source's generation ([`super::Source::generation`]) when the loader was built.
    pub generation: u64,
    /// Number of records of the source.
    pub source_len: u64,
    /// Fingerprint of `config`.
    pub fingerprint: u64,
    /// Human-readable description of the index chain's configuration (sampler, shard, bucket,
    /// batch, and the name of a user stage), quoted in resume errors.
    pub config: String,
    /// The prefetch state.
    pub prefetch: PrefetchState,
    /// What an elastic resume left for this rank to run first (see
    /// [`super::LoaderBuilder::merge_checkpoints`]); `None` for a loader that was never resumed elastically.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elastic: Option<ElasticState>,
    /// The prefetch state of a loader with a user stage ([`super::LoaderBuilder::stage`]): the
    /// stage's own state (as its [`super::Checkpoint::State`] serialises) just after the last
    /// batch of the consumed prefix (`input`), and the batches after it already consumed under
    /// the best-effort merge (`consumed_ahead`, counted from there, omitted when empty). Such a
    /// loader leaves `prefetch` empty (no workers) and names its stage in `config`
    /// (`… | stage(name="…")`). `None` (and not written) for a loader without a user stage, so
    /// its checkpoints are those of a loader before user stages existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<serde_json::Value>,
}

/// The current [`LoaderState::version`].
pub const LOADER_STATE_VERSION: u32 = 1;

/// The shard settings a configuration description records, `None` if it records none that
/// parse.
pub(crate) fn shard_settings(description: &str) -> Option<ShardConfig> {
    let stages = parse_description(description)?;
    let shard = stage(&stages, "shard")?;
    let flag = |key: &str| match setting(shard, key)? {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    };
    let mode = match setting(shard, "mode")? {
        "Interleaved" => ShardMode::Interleaved,
        "Contiguous" => ShardMode::Contiguous,
        _ => return None,
    };
    Some(
        ShardConfig::new(
            setting(shard, "total")?.parse().ok()?,
            setting(shard, "index")?.parse().ok()?,
        )
        .mode(mode)
        .pad_to_equal(flag("pad")?)
        .drop_remainder(flag("drop")?),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: &str =
        "sampler(len=50, mode=Sequential { window_len: 2 }, seed=4, epochs=Some(2)) \
        | shard(total=2, index=0, mode=Contiguous, pad=false, drop=false) \
        | batch(batch_size=4, drop_last=false)";

    #[test]
    fn differences_name_each_setting() {
        let other = PLAIN
            .replace("total=2", "total=3")
            .replace("batch_size=4", "batch_size=5")
            .replace("window_len: 2", "window_len: 3");
        assert_eq!(
            describe_differences(PLAIN, &other).unwrap(),
            "sampler.mode: checkpoint Sequential { window_len: 2 }, this loader \
             Sequential { window_len: 3 }; shard.total: checkpoint 2, this loader 3; \
             batch.batch_size: checkpoint 4, this loader 5"
        );
        let bucketed = PLAIN.replace(
            " | batch(",
            " | bucket(buffer_size=8, pack_size=4, seed=0, key=stored_len(field=\"a, b\")) | batch(",
        );
        assert_eq!(
            describe_differences(PLAIN, &bucketed).unwrap(),
            "bucket: checkpoint off, this loader on (buffer_size=8, pack_size=4, seed=0, \
             key=stored_len(field=\"a, b\"))"
        );
        let keyed = bucketed.replace("\"a, b\"", "\"c\"");
        assert_eq!(
            describe_differences(&bucketed, &keyed).unwrap(),
            "bucket.key: checkpoint stored_len(field=\"a, b\"), this loader stored_len(field=\"c\")"
        );
        assert_eq!(describe_differences(PLAIN, PLAIN), None);
        assert_eq!(describe_differences("garbage", PLAIN), None);
        assert_eq!(describe_differences(PLAIN, "x(y) | z(("), None);
    }

    fn state(n: u64, consumed: &[u64]) -> PrefetchState {
        PrefetchState {
            num_workers: n,
            base: 10,
            next_worker: 0,
            workers: consumed
                .iter()
                .map(|&c| WorkerState {
                    consumed: c,
                    next: None,
                })
                .collect(),
        }
    }

    #[test]
    fn prefix_end_recognises_round_robin_prefixes() {
        assert_eq!(state(3, &[0, 0, 0]).prefix_end(), Some(10));
        assert_eq!(state(3, &[1, 0, 0]).prefix_end(), Some(11));
        assert_eq!(state(3, &[2, 2, 1]).prefix_end(), Some(15));
        assert_eq!(state(3, &[2, 2, 2]).prefix_end(), Some(16));
        assert_eq!(state(3, &[1, 2, 1]).prefix_end(), None);
        assert_eq!(state(3, &[3, 1, 1]).prefix_end(), None);
    }
}
