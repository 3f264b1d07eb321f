//! Sharding: one rank's (or one consumer's) view of every epoch of the upstream stage, as in d9d's
//! `ShardedDataset`: seekable over a seekable stage, a checkpointable stream over a stream
//! (`stream.rs`).

mod stream;

use serde::{Deserialize, Serialize};

use super::epoch_count::EpochCount;
use super::stage::{Sample, Stage};
use crate::{Error, Result};

pub use stream::ShardState;

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
///
/// # Seekable or stream
///
/// Like every stage of the chain, `Shard` is what its input is. Over a seekable [`Stage`]
/// ([`Shard::new`], `StageExt::shard`) it is a seekable stage: every mode, O(1) seeks. Over a
/// [`super::Checkpoint`] stream (`CheckpointExt::shard`: a [`super::Cursor`] over a stage, or a
/// stream of your own) it is a checkpointable stream: of the items of every epoch (counted from
/// 0 at each change of [`Sample::epoch`]), it keeps those whose count is `index` modulo `total`,
/// and its checkpoint is a [`ShardState`]. Which counts it keeps is decided by the same
/// arithmetic, so over a cursor of a stage it yields exactly what the seekable form yields. A
/// stream has no known epoch length, so the modes that need one are refused there:
/// [`ShardMode::Contiguous`] (its block size is `ceil(L / total)`), `pad_to_equal` and
/// `drop_remainder` (they need `ceil` and `floor` of `L / total` before the epoch's end).
#[derive(Debug, Clone)]
pub struct Shard<S> {
    upstream: S,
    config: ShardConfig,
    /// Upstream epoch length (0 over a stream, whose length is unknown).
    upstream_len: u64,
    /// Where this shard's items sit upstream: the order, computed once.
    geometry: Geometry,
    /// Over a stream: the count of input items in the current epoch (unused when seeking).
    count: EpochCount,
}

impl<S> Shard<S> {
    /// The configuration.
    pub fn config(&self) -> &ShardConfig {
        &self.config
    }

    /// The upstream stage or stream.
    pub fn upstream(&self) -> &S {
        &self.upstream
    }

    /// The input stream: the name of [`Shard::upstream`] in `ShardStream`, kept for one release.
    #[deprecated(note = "use `upstream()`; `ShardStream` is `Shard` now, see CHANGELOG.md")]
    pub fn get_ref(&self) -> &S {
        &self.upstream
    }

    /// Where this shard's own items sit upstream.
    pub(crate) fn geometry(&self) -> Geometry {
        self.geometry
    }
}

impl<S: Stage<Item = Sample>> Shard<S> {
    /// Shards `upstream`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if `total` is 0, `index >= total`, or both `pad_to_equal` and
    /// `drop_remainder` are set.
    pub fn new(upstream: S, config: ShardConfig) -> Result<Self> {
        let upstream_len = upstream.epoch_len();
        let geometry = Geometry::new(&config, Some(upstream_len))?;
        Ok(Self {
            upstream,
            config,
            upstream_len,
            geometry,
            count: EpochCount::default(),
        })
    }
}

/// Where a shard's items sit in the upstream epoch: its own items are the upstream positions
/// `start + q * step` for `q < own_len`; items `own_len..len` are padding (repeats of the
/// epoch's last item).
///
/// This is the one place a shard's order is computed. The seekable [`Shard`] maps its
/// positions upstream with [`Geometry::slot`] and [`Geometry::own_run`]; over a stream it maps the upstream ordinals it counts to its own positions
/// with [`Geometry::position_of`], the inverse. [`Geometry::new`] validates a configuration for
/// both and decides what a stream of unknown epoch length can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub(crate) start: u64,
    pub(crate) step: u64,
    pub(crate) own_len: u64,
    pub(crate) len: u64,
}

/// What a shard's position holds upstream (see [`Geometry::slot`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// One of the shard's own items: this upstream position.
    Own(u64),
    /// Padding: a repeat of the epoch's last item, marked padded.
    Pad,
}

impl Geometry {
    /// The geometry of shard `config.index` of `config.total` over an upstream epoch of
    /// `upstream_len` items, or `None` for a stream, whose epoch length is unknown until the
    /// epoch ended.
    ///
    /// Without the length, only the interleaved mode with neither `pad_to_equal` nor
    /// `drop_remainder` is possible: the contiguous block size is `ceil(L / total)`, padding
    /// needs `ceil(L / total)` and dropping `floor(L / total)`. The geometry is then unbounded
    /// (`own_len` and `len` are `u64::MAX`): an epoch ends where its items end.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if `total` is 0, `index >= total`, both `pad_to_equal` and
    /// `drop_remainder` are set, or the length is unknown and the configuration needs it.
    pub(crate) fn new(config: &ShardConfig, upstream_len: Option<u64>) -> Result<Self> {
        let ShardConfig {
            total,
            index,
            mode,
            pad_to_equal,
            drop_remainder,
        } = *config;
        if total == 0 || index >= total {
            return Err(Error::InvalidConfig {
                reason: format!("shard: index {index} is not below total {total}"),
            });
        }
        let Some(l) = upstream_len else {
            if mode != ShardMode::Interleaved || pad_to_equal || drop_remainder {
                return Err(Error::InvalidConfig {
                    reason: format!(
                        "shard over a stream: the epoch's length is unknown, so only the \
                         interleaved mode without pad_to_equal or drop_remainder is possible \
                         (got mode {mode:?}, pad_to_equal {pad_to_equal}, drop_remainder \
                         {drop_remainder}); shard the seekable stage (StageExt::shard) for the \
                         others"
                    ),
                });
            }
            return Ok(Self {
                start: index,
                step: total,
                own_len: u64::MAX,
                len: u64::MAX,
            });
        };
        if pad_to_equal && drop_remainder {
            return Err(Error::InvalidConfig {
                reason: "shard: pad_to_equal and drop_remainder are exclusive".into(),
            });
        }
        let (own_len, start, step) = match mode {
            ShardMode::Interleaved => {
                let own = if drop_remainder {
                    l / total
                } else if index < l {
                    (l - index).div_ceil(total)
                } else {
                    0
                };
                (own, index, total)
            }
            ShardMode::Contiguous => {
                let block = if drop_remainder {
                    l / total
                } else {
                    l.div_ceil(total)
                };
                let start = index.saturating_mul(block);
                (block.min(l.saturating_sub(start)), start, 1)
            }
        };
        let len = if pad_to_equal && l > 0 {
            l.div_ceil(total)
        } else {
            own_len
        };
        Ok(Self {
            start,
            step,
            own_len,
            len,
        })
    }

    /// What the shard's `position` holds, `None` past the epoch's end.
    pub(crate) fn slot(&self, position: u64) -> Option<Slot> {
        if position < self.own_len {
            position
                .checked_mul(self.step)
                .and_then(|d| d.checked_add(self.start))
                .map(Slot::Own)
        } else if position < self.len {
            Some(Slot::Pad)
        } else {
            None
        }
    }

    /// The upstream run `(first, stride)` of the shard's positions `start + k * step` for
    /// `k < count`, if they are all own items (no padding, nothing past the end).
    pub(crate) fn own_run(&self, start: u64, step: u64, count: usize) -> Option<(u64, u64)> {
        let last = (count as u64)
            .checked_sub(1)
            .and_then(|k| k.checked_mul(step))
            .and_then(|d| d.checked_add(start))?;
        if last >= self.own_len {
            return None;
        }
        let first = start.checked_mul(self.step)?.checked_add(self.start)?;
        Some((first, step.checked_mul(self.step)?))
    }

    /// The shard's position of the upstream position (or, in a stream, the ordinal within its
    /// epoch) `ordinal`, if it is one of the shard's own items; the inverse of
    /// [`Geometry::slot`]'s [`Slot::Own`].
    pub(crate) fn position_of(&self, ordinal: u64) -> Option<u64> {
        let d = ordinal.checked_sub(self.start)?;
        let step = self.step.max(1);
        let q = d / step;
        (d % step == 0 && q < self.own_len).then_some(q)
    }
}

impl<S: Stage<Item = Sample>> Stage for Shard<S> {
    type Item = Sample;

    fn epochs(&self) -> Option<u64> {
        self.upstream.epochs()
    }

    fn epoch_len(&self) -> u64 {
        self.geometry.len
    }

    fn get(&mut self, epoch: u64, position: u64) -> Result<Sample> {
        match self.geometry.slot(position) {
            Some(Slot::Own(upstream_position)) => self.upstream.get(epoch, upstream_position),
            Some(Slot::Pad) => {
                let last = self
                    .upstream
                    .get(epoch, self.upstream_len.saturating_sub(1))?;
                Ok(Sample {
                    padded: true,
                    ..last
                })
            }
            None => Err(Error::IndexOutOfRange {
                index: position,
                len: self.geometry.len,
            }),
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
        let upstream = self.geometry.own_run(start, step, count);
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

    /// The stream form's map (upstream ordinal → own position) is the inverse of the seekable
    /// one, and without an epoch length it keeps exactly what the known length keeps.
    #[test]
    fn position_of_inverts_slot_and_needs_no_length_where_the_stream_allows() {
        for l in [0u64, 1, 2, 5, 13, 14, 16, 101] {
            for total in [1u64, 2, 3, 4, 7, 20] {
                for index in 0..total {
                    for mode in [ShardMode::Interleaved, ShardMode::Contiguous] {
                        for (pad, drop) in [(false, false), (true, false), (false, true)] {
                            let c = ShardConfig::new(total, index)
                                .mode(mode)
                                .pad_to_equal(pad)
                                .drop_remainder(drop);
                            let g = Geometry::new(&c, Some(l)).unwrap();
                            let mut owned = vec![None; usize::try_from(l).unwrap()];
                            for p in 0..g.len {
                                if let Some(Slot::Own(u)) = g.slot(p) {
                                    owned[usize::try_from(u).unwrap()] = Some(p);
                                }
                            }
                            assert_eq!(g.slot(g.len), None);
                            let stream = Geometry::new(&c, None);
                            assert_eq!(
                                stream.is_ok(),
                                mode == ShardMode::Interleaved && !pad && !drop
                            );
                            for (u, want) in owned.iter().enumerate() {
                                let u = u as u64;
                                assert_eq!(g.position_of(u), *want, "{c:?} l={l} u={u}");
                                if let Ok(s) = &stream {
                                    assert_eq!(s.position_of(u), *want, "stream {c:?} u={u}");
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
