//! Sharding: one rank's (or one consumer's) view of every epoch of the upstream stage, as in d9d's
//! `ShardedDataset`.

use serde::{Deserialize, Serialize};

use super::stage::{Sample, Stage};
use crate::{Error, Result};

/// How positions are assigned to shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum ShardMode {
    /// Round-robin: shard `k` gets positions `k, k + total, …` (better balance).
    #[default]
    Interleaved,
    /// Contiguous blocks (better locality).
    Contiguous,
}

/// Configuration of a [`Shard`].
///
/// Built from [`ShardConfig::default`] (one shard: everything) or [`ShardConfig::new`] with
/// chainable setters, so options added later do not break callers:
///
/// ```
/// use zrecord::pipeline::{ShardConfig, ShardMode};
///
/// let config = ShardConfig::new(4, 1).mode(ShardMode::Contiguous).pad_to_equal(true);
/// assert_eq!((config.total, config.index), (4, 1));
/// assert!(!config.drop_remainder);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ShardConfig {
    /// Number of shards. Default: 1.
    pub total: u64,
    /// This shard, below `total`. Default: 0.
    pub index: u64,
    /// Assignment of positions. Default: [`ShardMode::Interleaved`].
    pub mode: ShardMode,
    /// Pad every shard to `ceil(L / total)` items by repeating the epoch's last item, marked
    /// padded. Default: false.
    pub pad_to_equal: bool,
    /// Cut every shard to `floor(L / total)` items. Default: false. Exclusive with
    /// `pad_to_equal`.
    pub drop_remainder: bool,
}

impl Default for ShardConfig {
    /// One shard (index 0 of 1: everything), interleaved, neither padded nor cut.
    fn default() -> Self {
        Self {
            total: 1,
            index: 0,
            mode: ShardMode::Interleaved,
            pad_to_equal: false,
            drop_remainder: false,
        }
    }
}

impl ShardConfig {
    /// Shard `index` of `total`; every other option at its default.
    #[must_use]
    pub fn new(total: u64, index: u64) -> Self {
        Self::default().total(total).index(index)
    }

    /// Sets the number of shards, at least 1. Default 1.
    #[must_use]
    pub fn total(mut self, total: u64) -> Self {
        self.total = total;
        self
    }

    /// Sets this shard, below `total`. Default 0.
    #[must_use]
    pub fn index(mut self, index: u64) -> Self {
        self.index = index;
        self
    }

    /// Sets the assignment of positions. Default [`ShardMode::Interleaved`].
    #[must_use]
    pub fn mode(mut self, mode: ShardMode) -> Self {
        self.mode = mode;
        self
    }

    /// Sets whether every shard is padded to `ceil(L / total)` items by repeating the epoch's
    /// last item, marked padded. Default false. Exclusive with `drop_remainder`.
    #[must_use]
    pub fn pad_to_equal(mut self, pad_to_equal: bool) -> Self {
        self.pad_to_equal = pad_to_equal;
        self
    }

    /// Sets whether every shard is cut to `floor(L / total)` items. Default false. Exclusive
    /// with `pad_to_equal`.
    #[must_use]
    pub fn drop_remainder(mut self, drop_remainder: bool) -> Self {
        self.drop_remainder = drop_remainder;
        self
    }
}

/// The shard stage.
///
/// With an upstream epoch of `L` items and `total` shards, shard `k` sees, in each epoch:
///
/// - [`ShardMode::Interleaved`] (d9d "sequential", round-robin): upstream positions
///   `k, k + total, k + 2·total, …`. For 14 items and 4 shards, shard 0 sees 0, 4, 8, 12 and
///   shard 2 sees 2, 6, 10.
/// - [`ShardMode::Contiguous`] (d9d "chunked"): blocks of `ceil(L / total)` positions. For 14
///   items and 4 shards, shard 0 sees 0, 1, 2, 3 and shard 3 sees 12, 13.
///
/// Without padding or dropping, the shards partition the epoch: every upstream item lands in
/// exactly one shard, and shard lengths may differ by one (or more for contiguous: some shards
/// may be empty). `pad_to_equal` makes every shard `ceil(L / total)` long by repeating the last
/// item of the epoch (position `L − 1`, as d9d does) and marking the repeats
/// [`Sample::padded`]. `drop_remainder` makes every shard `floor(L / total)` long by dropping
/// the tail instead.
#[derive(Debug, Clone)]
pub struct Shard<S> {
    upstream: S,
    config: ShardConfig,
    /// Upstream epoch length.
    upstream_len: u64,
    /// Items of this shard's own (not padded) in each epoch.
    own_len: u64,
    /// Items of this shard in each epoch, padding included.
    len: u64,
    /// First upstream position of this shard (contiguous) or the shard index (interleaved).
    start: u64,
}

impl<S: Stage<Item = Sample>> Shard<S> {
    /// Shards `upstream`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if `total` is 0, `index >= total`, or both `pad_to_equal` and
    /// `drop_remainder` are set.
    pub fn new(upstream: S, config: ShardConfig) -> Result<Self> {
        let ShardConfig {
            total,
            index,
            mode,
            pad_to_equal,
            drop_remainder,
        } = config;
        if total == 0 || index >= total {
            return Err(Error::InvalidConfig {
                reason: format!("shard: index {index} is not below total {total}"),
            });
        }
        if pad_to_equal && drop_remainder {
            return Err(Error::InvalidConfig {
                reason: "shard: pad_to_equal and drop_remainder are exclusive".into(),
            });
        }
        let l = upstream.epoch_len();
        let (own_len, start) = match mode {
            ShardMode::Interleaved => {
                let own = if drop_remainder {
                    l / total
                } else if index < l {
                    (l - index).div_ceil(total)
                } else {
                    0
                };
                (own, index)
            }
            ShardMode::Contiguous => {
                let block = if drop_remainder {
                    l / total
                } else {
                    l.div_ceil(total)
                };
                let start = index.saturating_mul(block);
                (block.min(l.saturating_sub(start)), start)
            }
        };
        let len = if pad_to_equal && l > 0 {
            l.div_ceil(total)
        } else {
            own_len
        };
        Ok(Self {
            upstream,
            config,
            upstream_len: l,
            own_len,
            len,
            start,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ShardConfig {
        &self.config
    }

    /// The upstream stage.
    pub fn upstream(&self) -> &S {
        &self.upstream
    }

    /// Where this shard's own items sit upstream.
    pub(crate) fn geometry(&self) -> Geometry {
        Geometry {
            start: self.start,
            step: match self.config.mode {
                ShardMode::Interleaved => self.config.total,
                ShardMode::Contiguous => 1,
            },
            own_len: self.own_len,
            len: self.len,
        }
    }
}

/// A shard's own items are the upstream positions `start + q * step` for `q < own_len`; items
/// `own_len..len` are padding.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geometry {
    pub(crate) start: u64,
    pub(crate) step: u64,
    pub(crate) own_len: u64,
    pub(crate) len: u64,
}

impl<S: Stage<Item = Sample>> Stage for Shard<S> {
    type Item = Sample;

    fn epochs(&self) -> Option<u64> {
        self.upstream.epochs()
    }

    fn epoch_len(&self) -> u64 {
        self.len
    }

    fn get(&mut self, epoch: u64, position: u64) -> Result<Sample> {
        if position >= self.len {
            return Err(Error::IndexOutOfRange {
                index: position,
                len: self.len,
            });
        }
        if position < self.own_len {
            let upstream_position = match self.config.mode {
                ShardMode::Interleaved => self.start + position * self.config.total,
                ShardMode::Contiguous => self.start + position,
            };
            self.upstream.get(epoch, upstream_position)
        } else {
            let last = self.upstream.get(epoch, self.upstream_len - 1)?;
            Ok(Sample {
                padded: true,
                ..last
            })
        }
    }

    fn get_strided(
        &mut self,
        epoch: u64,
        start: u64,
        step: u64,
        count: usize,
        out: &mut Vec<Sample>,
    ) -> Result<()> {
        // The run of own positions maps to one strided run upstream; padding and anything
        // unusual go one at a time.
        let last = (count as u64)
            .checked_sub(1)
            .and_then(|k| k.checked_mul(step))
            .and_then(|d| d.checked_add(start));
        let upstream = match (last, self.config.mode) {
            (Some(last), ShardMode::Interleaved) if last < self.own_len => start
                .checked_mul(self.config.total)
                .and_then(|p| p.checked_add(self.start))
                .zip(step.checked_mul(self.config.total)),
            (Some(last), ShardMode::Contiguous) if last < self.own_len => {
                start.checked_add(self.start).map(|p| (p, step))
            }
            _ => None,
        };
        match upstream {
            Some((first, stride)) => self.upstream.get_strided(epoch, first, stride, count, out),
            None => {
                out.reserve(count);
                let mut position = start;
                for _ in 0..count {
                    out.push(self.get(epoch, position)?);
                    position = position.saturating_add(step);
                }
                Ok(())
            }
        }
    }

    fn describe(&self, out: &mut String) {
        self.upstream.describe(out);
        let c = &self.config;
        out.push_str(&format!(
            " | shard(total={}, index={}, mode={:?}, pad={}, drop={})",
            c.total, c.index, c.mode, c.pad_to_equal, c.drop_remainder
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::super::sampler::{Sampler, SamplerConfig, SamplerMode};
    use super::*;

    fn seq(n: u64) -> Sampler {
        Sampler::new(
            n,
            SamplerConfig::default()
                .mode(SamplerMode::Sequential)
                .seed(0)
                .epochs(Some(1)),
        )
        .unwrap()
    }

    fn items(n: u64, config: ShardConfig) -> Vec<(u64, bool)> {
        let mut s = Shard::new(seq(n), config).unwrap();
        (0..s.epoch_len())
            .map(|p| {
                let x = s.get(0, p).unwrap();
                (x.index, x.padded)
            })
            .collect()
    }

    /// Review: `get_strided` is `get` at every position for every mode, padding and dropping,
    /// including runs that cross into the padding and past the end (same error).
    #[test]
    fn get_strided_is_get_everywhere() {
        for n in [0u64, 1, 2, 5, 13, 14, 16, 101] {
            for total in [1u64, 2, 3, 4, 7, 20] {
                for index in 0..total {
                    for mode in [ShardMode::Interleaved, ShardMode::Contiguous] {
                        for (pad, drop) in [(false, false), (true, false), (false, true)] {
                            let c = ShardConfig::new(total, index)
                                .mode(mode)
                                .pad_to_equal(pad)
                                .drop_remainder(drop);
                            let up = Sampler::new(
                                n,
                                SamplerConfig::default()
                                    .mode(SamplerMode::Shuffled)
                                    .seed(3)
                                    .epochs(Some(2)),
                            )
                            .unwrap();
                            let mut s = Shard::new(up, c).unwrap();
                            let len = s.epoch_len();
                            for e in [0u64, 1, 2] {
                                for start in 0..=len + 1 {
                                    for step in [0u64, 1, 2, 3, u64::MAX / 2] {
                                        for count in [0usize, 1, 2, 3, 5, 40] {
                                            let mut got = Vec::new();
                                            let r = s.get_strided(e, start, step, count, &mut got);
                                            let mut want = Vec::new();
                                            let mut werr = None;
                                            let mut p = start;
                                            for k in 0..count {
                                                match s.get(e, p) {
                                                    Ok(x) => want.push(x),
                                                    Err(er) => {
                                                        werr = Some(er);
                                                        break;
                                                    }
                                                }
                                                if k + 1 < count {
                                                    match p.checked_add(step) {
                                                        Some(q) => p = q,
                                                        None => {
                                                            werr = Some(Error::IndexOutOfRange {
                                                                index: u64::MAX,
                                                                len,
                                                            });
                                                            break;
                                                        }
                                                    }
                                                }
                                            }
                                            let what = format!(
                                                "n={n} total={total} index={index} {mode:?} \
                                                 pad={pad} drop={drop} e={e} start={start} \
                                                 step={step} count={count}"
                                            );
                                            match (r, werr) {
                                                (Ok(()), None) => assert_eq!(got, want, "{what}"),
                                                (Err(a), Some(b)) => assert_eq!(
                                                    format!("{a:?}"),
                                                    format!("{b:?}"),
                                                    "{what}"
                                                ),
                                                (a, b) => panic!("{what}: {a:?} vs {b:?}"),
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn empty_contiguous_shard_pads_with_the_last_item() {
        // 5 items in blocks of 2 over 4 shards: shard 3 owns nothing.
        let c = ShardConfig::new(4, 3).mode(ShardMode::Contiguous);
        assert_eq!(items(5, c), vec![]);
        let padded = c.pad_to_equal(true);
        assert_eq!(items(5, padded), vec![(4, true), (4, true)]);
    }

    #[test]
    fn invalid_configs() {
        let bad = |c| Shard::new(seq(3), c).is_err();
        assert!(bad(ShardConfig::default().total(0)));
        assert!(bad(ShardConfig::new(2, 2)));
        assert!(bad(ShardConfig::default()
            .pad_to_equal(true)
            .drop_remainder(true)));
    }
}
