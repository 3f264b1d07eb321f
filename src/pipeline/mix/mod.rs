//! Weighted mixing: a root stage that interleaves K sources ("parts") by weight.
//!
//! The rest of this documentation is on [`Mix`], where rustdoc shows it: the module is private
//! and `zrecord::pipeline` re-exports its public items.

mod schedule;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::sampler::{permutation_setting, Network, Sampler, SamplerConfig, SamplerMode};
use super::stage::{Sample, Stage};
use crate::hash::hash;
use crate::{Error, Result};
use schedule::{drop_segments, quantise, Segment, Tree};

/// What happens when a part has served its budget (`part_len × part_epochs` draws).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Exhausted {
    /// The mix ends right before the first item that would come from an exhausted part.
    Stop,
    /// Parts never exhaust: each starts another epoch of its own sampler.
    #[default]
    Restart,
    /// The exhausted part is removed and the remaining weights renormalised; the mix ends when
    /// every part has served its budget.
    Drop,
}

/// Configuration of a [`Mix`].
///
/// Built from [`MixConfig::new`] (or [`MixConfig::default`] and [`MixConfig::weights`]) with
/// chainable setters, so options added later do not break callers:
///
/// ```
/// use zrecord::pipeline::{Exhausted, MixConfig, SamplerMode};
///
/// let config = MixConfig::new(vec![0.7, 0.3]).exhausted(Exhausted::Drop).seed(7);
/// assert_eq!(config.mode, SamplerMode::Shuffled);
/// assert_eq!((config.epochs, config.part_epochs), (Some(1), 1));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MixConfig {
    /// One weight per part, each finite and above 0 (they need not sum to 1). Default: empty
    /// (set it: the count must equal the number of parts).
    pub weights: Vec<f64>,
    /// What happens when a part has served its budget. Default: [`Exhausted::Restart`].
    pub exhausted: Exhausted,
    /// The seed of the schedule and of every part's sampler. Default: 0.
    pub seed: u64,
    /// The order of each part's own sampler. Default: [`SamplerMode::Shuffled`].
    pub mode: SamplerMode,
    /// Number of mix epochs under [`Exhausted::Restart`]; `None` runs forever. Stop and Drop
    /// always make one epoch. Default: `Some(1)`.
    pub epochs: Option<u64>,
    /// Items per mix epoch under [`Exhausted::Restart`]. Default: `None`, the sum of the part
    /// lengths.
    pub epoch_len: Option<u64>,
    /// Epochs each part may serve under [`Exhausted::Stop`] and [`Exhausted::Drop`], at least 1.
    /// Default: 1.
    pub part_epochs: u64,
}

impl Default for MixConfig {
    /// No weights, restart, seed 0, shuffled parts, one epoch of the summed part lengths, one
    /// epoch per part.
    fn default() -> Self {
        Self {
            weights: Vec::new(),
            exhausted: Exhausted::Restart,
            seed: 0,
            mode: SamplerMode::Shuffled,
            epochs: Some(1),
            epoch_len: None,
            part_epochs: 1,
        }
    }
}

impl MixConfig {
    /// Mixes by `weights` (one per part); every other option at its default.
    #[must_use]
    pub fn new(weights: Vec<f64>) -> Self {
        Self::default().weights(weights)
    }

    /// Sets the weights, one per part, each finite and above 0. Default empty.
    #[must_use]
    pub fn weights(mut self, weights: Vec<f64>) -> Self {
        self.weights = weights;
        self
    }

    /// Sets what happens when a part has served its budget. Default [`Exhausted::Restart`].
    #[must_use]
    pub fn exhausted(mut self, exhausted: Exhausted) -> Self {
        self.exhausted = exhausted;
        self
    }

    /// Sets the seed of the schedule and of the parts' samplers. Default 0.
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Sets the order of each part's sampler. Default [`SamplerMode::Shuffled`].
    #[must_use]
    pub fn mode(mut self, mode: SamplerMode) -> Self {
        self.mode = mode;
        self
    }

    /// Sets the number of mix epochs under restart; `None` runs forever. Default `Some(1)`.
    #[must_use]
    pub fn epochs(mut self, epochs: Option<u64>) -> Self {
        self.epochs = epochs;
        self
    }

    /// Sets the items per mix epoch under restart. Default `None` (the summed part lengths).
    #[must_use]
    pub fn epoch_len(mut self, epoch_len: Option<u64>) -> Self {
        self.epoch_len = epoch_len;
        self
    }

    /// Sets the epochs each part may serve under stop and drop, at least 1. Default 1.
    #[must_use]
    pub fn part_epochs(mut self, part_epochs: u64) -> Self {
        self.part_epochs = part_epochs;
        self
    }
}

/// The mix stage.
///
/// Weighted mixing: a root stage that interleaves K sources ("parts") by weight.
///
/// The mix yields [`Sample`]s whose `index` lives in the *concatenated* index space of the
/// parts: part `s` of length `L_s` owns `[offset_s, offset_s + L_s)`, the offsets being the
/// prefix sums of the part lengths (see [`Mix::part_offsets`], [`Mix::locate`], and
/// [`super::Concat`], the source that serves that index space).
///
/// # The schedule
///
/// Which part the item at global position `g = epoch · epoch_len + position` comes from is a
/// pure function of `g`, computed in O(log K) with no state but the cursor:
///
/// - Weights are quantised to integers `q_s` summing to about 2^32 (largest remainder, each at
///   least 1; see [`Mix::quantised_weights`]). The description records the integers, so a
///   checkpoint comparison is exact.
/// - A balanced binary tree splits the parts into a left half and a right half by part index,
///   recursively. A node whose left subtree weighs `A` and right subtree `B` (`W = A + B`) has a
///   seeded phase `φ = hash(seed, node id, segment) mod W`. The items arriving at the node are
///   numbered by their sub-position `t = 0, 1, …`; item `t` goes left iff `c(t + 1) > c(t)`,
///   where `c(t) = floor((t·A + φ) / W)`. The left child sees it at sub-position `c(t)`, the
///   right child at `t − c(t)`.
/// - Leaf `s` at sub-position `c` is part `s`'s `c`-th draw: position `c mod L_s` of epoch
///   `c div L_s` of the part's own [`Sampler`] (mode [`MixConfig::mode`], seed
///   `hash(seed, s)`), so each part runs through its own epochs at its own pace.
///
/// # The window bound
///
/// Over **any** window of `n` consecutive items, part `s` gets `n·q_s/Q` items up to an error
/// strictly below `depth = ceil(log2 K')` (`K'` the number of non-empty parts, `Q = Σ q`).
///
/// Why: `c(t)` counts the items among sub-positions `[0, t)` that go left, and `c(t₀ + m) −
/// c(t₀)` is `floor` or `ceil` of `m·A/W` (the sequence is Sturmian: balanced), so a window of
/// `m` consecutive arrivals at a node sends `m·A/W` of them left, up to an error below 1; and
/// the items sent to a child are again *consecutive* sub-positions there. By induction along the
/// path to leaf `s` with ratios `r₁ … r_d` (`Π r = q_s/Q`): if `|m_k − n·p_k| < k` then
/// `|m_{k+1} − n·p_k·r| ≤ |m_{k+1} − m_k·r| + r·|m_k − n·p_k| < 1 + k`. Against the user's
/// normalised weights `w_s`, quantisation adds at most `n·(K + 1)/2^32`: the counts stay within
/// `depth + n·(K + 1)/2^32` of `n·w_s`. The schedule runs on `g`, not on `(epoch, position)`,
/// so the bound also holds across mix epochs.
///
/// The bound is tight: with one heavy part among light ones, every node on the heavy part's path
/// sends almost everything its way, the levels' errors add up undamped, and some windows come
/// within a fraction of `depth` (`tests/pipeline_mix_tight.rs`). That is why the tree is
/// balanced: a chain of nodes would put the last parts `K − 1` levels deep.
///
/// # Exhaustion
///
/// Part `s` may serve `budget_s = L_s × part_epochs` draws (`L_s` the epoch length of its
/// sampler: its length, or the window-rounded length of a sequential sampler); what happens
/// next is [`Exhausted`]:
///
/// - [`Exhausted::Restart`] never exhausts: a part starts another epoch of its own. The mix has
///   [`MixConfig::epochs`] epochs of [`MixConfig::epoch_len`] items.
/// - [`Exhausted::Stop`]: one mix epoch, ending right before the first item that would overdraw
///   a part (found by binary search on the monotone per-part count functions).
/// - [`Exhausted::Drop`]: one mix epoch of `Σ budget_s` items in at most K segments. When a part
///   has served its budget, a new tree over the remaining parts (phases seeded by the segment
///   number) continues from each part's current draw count, so every record of every part
///   appears exactly `part_epochs` times (with shuffled parts). Each segment's tree runs on the
///   weights as given, renormalised over the parts left and quantised again to about 2^32, so
///   the window bound holds within each segment against those weights, with `K'` the parts
///   left: light parts keep their ratios once the heavy ones are gone. The segments are
///   computed once, in [`Mix::new`]; the description records the weights as given (they, not
///   the first integers, determine the later segments).
///
/// Parts of length 0 get no weight; if every part is empty the mix is empty.
///
/// Cheap to clone (each prefetch worker runs its own copy): the precomputed schedule is shared.
#[derive(Debug, Clone)]
pub struct Mix(Arc<Inner>);

/// What a [`Mix`] computes once.
#[derive(Debug)]
struct Inner {
    config: MixConfig,
    /// The permutation of the parts' shuffled samplers.
    network: Network,
    part_lens: Vec<u64>,
    offsets: Vec<u64>,
    total_len: u64,
    samplers: Vec<Sampler>,
    /// Per part: its sampler's epoch length.
    draw_lens: Vec<u64>,
    quantised: Vec<u64>,
    segments: Vec<Segment>,
    epochs: Option<u64>,
    epoch_len: u64,
}

impl Mix {
    /// Mixes parts of lengths `part_lens` by `config`.
    ///
    /// Builds one schedule tree (O(K)) for restart and stop; for drop it precomputes up to K
    /// trees, one per segment: O(K²) time and memory (a few tens of MB for 1000 parts).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if the number of weights is not the number of parts, a weight is
    /// not finite and above 0 (naming the part), `part_epochs` is 0, a part's sampler is invalid
    /// (a sequential window of 0), or the lengths overflow `u64` (the summed part lengths, or the
    /// summed budgets under drop).
    pub fn new(part_lens: &[u64], config: MixConfig) -> Result<Self> {
        Self::with_network(part_lens, config, Network::default())
    }

    /// This mix with zrecord 0.1's shuffled order in its parts' samplers (see
    /// [`Sampler::earlier_permutation`]), to resume in a hand-built stream chain a checkpoint
    /// that version took. [`crate::pipeline::Loader`] needs no such call.
    ///
    /// # Errors
    /// As [`Mix::new`] (which this mix's configuration passed already).
    pub fn earlier_permutation(&self) -> Result<Self> {
        Self::with_network(&self.0.part_lens, self.0.config.clone(), Network::Balanced)
    }

    /// [`Mix::new`], the parts' shuffled samplers running the permutation of `network` (the
    /// loader passes [`Network::Balanced`] to resume a checkpoint of an earlier version).
    pub(crate) fn with_network(
        part_lens: &[u64],
        config: MixConfig,
        network: Network,
    ) -> Result<Self> {
        let invalid = |reason: String| Error::InvalidConfig {
            reason: format!("mix: {reason}"),
        };
        let k = part_lens.len();
        if config.weights.len() != k {
            return Err(invalid(format!(
                "{} weights for {k} parts: give one weight per part",
                config.weights.len()
            )));
        }
        if let Some((s, w)) = config
            .weights
            .iter()
            .enumerate()
            .find(|(_, w)| !(w.is_finite() && **w > 0.0))
        {
            return Err(invalid(format!(
                "the weight of part {s} is {w}: every weight must be finite and above 0"
            )));
        }
        if config.part_epochs == 0 {
            return Err(invalid("part_epochs must be at least 1".into()));
        }
        let mut offsets = Vec::with_capacity(k);
        let mut total_len = 0u64;
        for &len in part_lens {
            offsets.push(total_len);
            total_len = total_len
                .checked_add(len)
                .ok_or_else(|| invalid("the summed part lengths overflow u64".into()))?;
        }
        let samplers = part_lens
            .iter()
            .enumerate()
            .map(|(s, &len)| {
                let seed = hash(&[config.seed, s as u64]);
                let c = SamplerConfig::default()
                    .mode(config.mode)
                    .seed(seed)
                    .epochs(None);
                let mut sampler =
                    Sampler::new(len, c).map_err(|e| invalid(format!("part {s}: {e}")))?;
                sampler.set_network(network);
                Ok(sampler)
            })
            .collect::<Result<Vec<_>>>()?;
        let draw_lens: Vec<u64> = samplers.iter().map(Stage::epoch_len).collect();
        let quantised = quantise(&config.weights, &draw_lens);
        let active: Vec<usize> = (0..k)
            .filter(|&s| draw_lens.get(s).is_some_and(|&l| l > 0))
            .collect();
        let budgets: Vec<u128> = draw_lens
            .iter()
            .map(|&l| u128::from(l) * u128::from(config.part_epochs))
            .collect();
        let seed = config.seed;
        let single = |segment| Segment {
            start: 0,
            tree: Tree::new(&active, &quantised, seed, segment),
            base: Vec::new(),
        };
        let (segments, epochs, epoch_len) = match config.exhausted {
            Exhausted::Restart => {
                let len = if active.is_empty() {
                    0
                } else {
                    config.epoch_len.unwrap_or(total_len)
                };
                (vec![single(0)], config.epochs, len)
            }
            Exhausted::Stop => {
                let seg = single(0);
                let cap = u128::from(u64::MAX);
                // The first item that would overdraw part s is its draw number budget_s.
                let len = active
                    .iter()
                    .filter_map(|&s| {
                        let budget = budgets.get(s).copied().unwrap_or(0);
                        seg.tree.first_reaching(s, budget.checked_add(1)?, cap)
                    })
                    .map(|t| t.saturating_sub(1))
                    .min()
                    .unwrap_or(cap);
                let len = if active.is_empty() {
                    0
                } else {
                    u64::try_from(len).unwrap_or(u64::MAX)
                };
                (vec![seg], Some(1), len)
            }
            Exhausted::Drop => {
                let total = budgets
                    .iter()
                    .try_fold(0u128, |acc, &b| acc.checked_add(b))
                    .and_then(|t| u64::try_from(t).ok())
                    .ok_or_else(|| {
                        invalid(
                            "the summed part budgets (length × part_epochs) overflow u64".into(),
                        )
                    })?;
                let (segments, scheduled) =
                    drop_segments(&active, &config.weights, &draw_lens, &budgets, seed)?;
                if scheduled != u128::from(total) {
                    return Err(Error::Internal {
                        reason: format!("mix: {scheduled} items scheduled for budgets of {total}"),
                    });
                }
                (segments, Some(1), total)
            }
        };
        Ok(Self(Arc::new(Inner {
            config,
            network,
            part_lens: part_lens.to_vec(),
            offsets,
            total_len,
            samplers,
            draw_lens,
            quantised,
            segments,
            epochs,
            epoch_len,
        })))
    }

    /// The configuration.
    pub fn config(&self) -> &MixConfig {
        &self.0.config
    }

    /// The part lengths.
    pub fn part_lens(&self) -> &[u64] {
        &self.0.part_lens
    }

    /// Where each part starts in the concatenated index space (prefix sums of the lengths).
    pub fn part_offsets(&self) -> &[u64] {
        &self.0.offsets
    }

    /// The part holding concatenated index `index`, and the index within it; `None` past the
    /// end.
    pub fn locate(&self, index: u64) -> Option<(usize, u64)> {
        if index >= self.0.total_len {
            return None;
        }
        // The last part starting at or before `index` that is not empty.
        let s = self
            .0
            .offsets
            .partition_point(|&o| o <= index)
            .checked_sub(1)?;
        let (s, offset) = (0..=s)
            .rev()
            .map(|s| (s, self.0.offsets.get(s).copied().unwrap_or(0)))
            .find(|&(s, o)| self.0.part_lens.get(s).is_some_and(|&l| index - o < l))?;
        Some((s, index - offset))
    }

    /// The integer weights the schedule runs on (0 for an empty part).
    pub fn quantised_weights(&self) -> &[u64] {
        &self.0.quantised
    }

    /// The sampler of part `s`: its `c`-th draw is position `c mod L` of epoch `c div L` of this
    /// sampler, `L` its epoch length.
    pub fn part_sampler(&self, s: usize) -> Option<&Sampler> {
        self.0.samplers.get(s)
    }

    /// The depth of the schedule tree, `ceil(log2 K')` over the `K'` non-empty parts: the
    /// window bound in [`Mix`]'s documentation.
    pub fn depth(&self) -> u32 {
        let active = self.0.draw_lens.iter().filter(|&&l| l > 0).count();
        usize::BITS - active.saturating_sub(1).leading_zeros()
    }

    /// The sample at global position `g`.
    fn at(&self, epoch: u64, position: u64, g: u128) -> Result<Sample> {
        let internal = |what: &str| Error::Internal {
            reason: format!("mix: {what} at global position {g}"),
        };
        let seg = self
            .0
            .segments
            .partition_point(|s| s.start <= g)
            .checked_sub(1)
            .and_then(|i| self.0.segments.get(i))
            .ok_or_else(|| internal("no segment"))?;
        let (s, sub) = seg
            .tree
            .route(g - seg.start)
            .ok_or_else(|| internal("no part"))?;
        let draw = seg.base(s) + sub;
        let l = u128::from(self.0.draw_lens.get(s).copied().unwrap_or(0)).max(1);
        let part_epoch = u64::try_from(draw / l).map_err(|_| Error::IndexOutOfRange {
            index: position,
            len: self.0.epoch_len,
        })?;
        // Below l, a u64.
        let part_position = u64::try_from(draw % l).unwrap_or(0);
        let sampler = self
            .0
            .samplers
            .get(s)
            .ok_or_else(|| internal("no sampler"))?;
        let local = sampler.index_at(part_epoch, part_position)?;
        let index = self
            .0
            .offsets
            .get(s)
            .and_then(|o| o.checked_add(local))
            .ok_or_else(|| internal("index overflow"))?;
        Ok(Sample {
            epoch,
            position,
            index,
            padded: false,
        })
    }
}

impl Stage for Mix {
    type Item = Sample;

    fn epochs(&self) -> Option<u64> {
        self.0.epochs
    }

    fn epoch_len(&self) -> u64 {
        self.0.epoch_len
    }

    fn get(&mut self, epoch: u64, position: u64) -> Result<Sample> {
        if let Some(e) = self.0.epochs.filter(|&e| epoch >= e) {
            return Err(Error::IndexOutOfRange {
                index: epoch,
                len: e,
            });
        }
        if position >= self.0.epoch_len {
            return Err(Error::IndexOutOfRange {
                index: position,
                len: self.0.epoch_len,
            });
        }
        let g = u128::from(epoch) * u128::from(self.0.epoch_len) + u128::from(position);
        self.at(epoch, position, g)
    }

    fn describe(&self, out: &mut String) {
        let c = &self.0.config;
        // Every drop segment after the first re-quantises the weights as given, which the
        // integers do not pin down: record them exactly (`{:?}` of an f64 round-trips). A
        // checkpoint of a drop schedule from before re-quantisation has no such key: refused.
        let drop_weights = match c.exhausted {
            Exhausted::Drop => format!(", drop_weights={:?}", c.weights),
            Exhausted::Stop | Exhausted::Restart => String::new(),
        };
        out.push_str(&format!(
            "mix(parts={:?}, weights={:?}, exhausted={:?}, seed={}, mode={:?}, epochs={:?}, \
             epoch_len={}, part_epochs={}{drop_weights}{})",
            self.0.part_lens,
            self.0.quantised,
            c.exhausted,
            c.seed,
            c.mode,
            self.0.epochs,
            self.0.epoch_len,
            c.part_epochs,
            permutation_setting(c.mode, self.0.network)
        ));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::schedule::Child;
    use super::*;

    #[test]
    fn quantisation_sums_to_2_pow_32_and_keeps_ratios() {
        let q = quantise(&[1.0, 1.0, 1.0], &[5, 5, 5]);
        assert_eq!(q.iter().sum::<u64>(), 1 << 32);
        assert!(q.iter().all(|&x| x.abs_diff((1u64 << 32) / 3) <= 1));
        let q = quantise(&[3.0, 1.0], &[5, 5]);
        assert_eq!(q, vec![3 << 30, 1 << 30]);
        // An empty part gets nothing; the rest share the whole.
        let q = quantise(&[3.0, 100.0, 1.0], &[5, 0, 5]);
        assert_eq!(q, vec![3 << 30, 0, 1 << 30]);
        // A tiny weight is at least 1; huge weights do not overflow.
        let q = quantise(&[1e-300, 1.0], &[1, 1]);
        assert_eq!(q, vec![1, 1 << 32]);
        let q = quantise(&[f64::MAX, f64::MAX], &[1, 1]);
        assert_eq!(q, vec![1 << 31, 1 << 31]);
        assert_eq!(quantise(&[1.0], &[0]), vec![0]);
    }

    #[test]
    fn bad_configs_are_rejected_with_a_reason() {
        let err = |lens: &[u64], c: MixConfig| Mix::new(lens, c).unwrap_err().to_string();
        assert!(err(&[1, 2], MixConfig::new(vec![1.0])).contains("1 weights for 2 parts"));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let e = err(&[1, 2], MixConfig::new(vec![1.0, bad]));
            assert!(e.contains("part 1"), "{e}");
        }
        assert!(err(&[1], MixConfig::new(vec![1.0]).part_epochs(0)).contains("part_epochs"));
        assert!(err(&[u64::MAX, 1], MixConfig::new(vec![1.0, 1.0])).contains("overflow"));
        let seq0 = MixConfig::new(vec![1.0]).mode(SamplerMode::SequentialWrap { window_len: 0 });
        assert!(err(&[3], seq0).contains("part 0"));
        let drop = MixConfig::new(vec![1.0, 1.0])
            .exhausted(Exhausted::Drop)
            .part_epochs(u64::MAX);
        assert!(err(&[2, 2], drop).contains("overflow"));
    }

    #[test]
    fn earlier_permutation_is_0_1s_order_and_its_description() {
        use super::super::stage::Cursor;
        let now = Mix::new(&[10, 20], MixConfig::new(vec![1.0, 3.0])).unwrap();
        let earlier = now.earlier_permutation().unwrap();
        let (dn, de) = (
            super::super::describe(&now),
            super::super::describe(&earlier),
        );
        assert!(dn.ends_with(", permutation=2)"), "{dn}");
        assert_eq!(de, dn.replace(", permutation=2)", ")"));
        let draws = |m: &Mix| -> Vec<u64> {
            let mut m = m.clone();
            (0..30).map(|p| m.get(0, p).unwrap().index).collect()
        };
        assert_ne!(draws(&now), draws(&earlier));
        // A 0.1 cursor state resumes on the earlier order and is refused, with the hint, on
        // this version's.
        let state = Cursor::new(earlier.clone()).state();
        assert!(Cursor::resume(earlier, &state).is_ok());
        let err = Cursor::resume(now, &state).err().unwrap().to_string();
        assert!(err.contains("Mix::earlier_permutation"), "{err}");
    }

    #[test]
    fn description_parses_and_diffs_per_setting() {
        let a = Mix::new(&[10, 20], MixConfig::new(vec![1.0, 3.0])).unwrap();
        let b = Mix::new(&[10, 20], MixConfig::new(vec![1.0, 1.0]).seed(5)).unwrap();
        let (da, db) = (super::super::describe(&a), super::super::describe(&b));
        assert_eq!(
            da,
            "mix(parts=[10, 20], weights=[1073741824, 3221225472], exhausted=Restart, seed=0, \
             mode=Shuffled, epochs=Some(1), epoch_len=30, part_epochs=1, permutation=2)"
        );
        assert_eq!(
            super::super::state::describe_differences(&da, &db).unwrap(),
            "mix.weights: checkpoint [1073741824, 3221225472], this loader [2147483648, \
             2147483648]; mix.seed: checkpoint 0, this loader 5"
        );
    }

    #[test]
    fn a_drop_description_pins_the_weights_its_segments_requantise() {
        // 1.5e-8 and 1.49e-8 both quantise to 64 against part 0, and to 3 : 2 and 1.49 : 1
        // once part 0 is gone: the descriptions must differ.
        let drop = |w1: f64| {
            let cfg = MixConfig::new(vec![1.0, w1, 1e-8]).exhausted(Exhausted::Drop);
            Mix::new(&[10, 60, 40], cfg).unwrap()
        };
        let (a, b) = (drop(1.5e-8), drop(1.49e-8));
        assert_eq!(a.quantised_weights(), b.quantised_weights());
        let (da, db) = (super::super::describe(&a), super::super::describe(&b));
        assert!(
            da.ends_with("part_epochs=1, drop_weights=[1.0, 1.5e-8, 1e-8], permutation=2)"),
            "{da}"
        );
        assert_eq!(
            super::super::state::describe_differences(&da, &db).unwrap(),
            "mix.drop_weights: checkpoint [1.0, 1.5e-8, 1e-8], this loader [1.0, 1.49e-8, 1e-8]"
        );
        // The segment after part 0 runs on integers summing to about 2^32 again.
        let second = &a.0.segments[1].tree;
        assert!(second.weight.abs_diff(1 << 32) <= 2, "{}", second.weight);
        let restart = Mix::new(&[10, 60, 40], MixConfig::new(vec![1.0, 1.5e-8, 1e-8])).unwrap();
        assert!(!super::super::describe(&restart).contains("drop_weights"));
    }

    /// The plain model: every node keeps a Bresenham accumulator, stepped item by item.
    fn model(tree: &Tree, n: u64) -> Vec<(usize, u128)> {
        let mut acc: Vec<u128> = tree.nodes.iter().map(|n| n.phase).collect();
        let mut seen = vec![0u128; 64];
        (0..n)
            .map(|_| {
                let mut child = tree.root.unwrap();
                loop {
                    match child {
                        Child::Leaf(s) => {
                            seen[s] += 1;
                            return (s, seen[s] - 1);
                        }
                        Child::Node(i) => {
                            let node = &tree.nodes[i];
                            acc[i] += node.a;
                            if acc[i] >= node.w {
                                acc[i] -= node.w;
                                child = node.left;
                            } else {
                                child = node.right;
                            }
                        }
                    }
                }
            })
            .collect()
    }

    #[test]
    fn route_equals_an_item_by_item_simulation() {
        for k in 1..=7usize {
            for seed in 0..4 {
                let weights: Vec<f64> = (0..k)
                    .map(|s| 1.0 + ((s as u64 * 7 + seed) % 5) as f64)
                    .collect();
                let lens: Vec<u64> = (0..k as u64).map(|s| 3 + s).collect();
                let mix = Mix::new(&lens, MixConfig::new(weights).seed(seed)).unwrap();
                let tree = &mix.0.segments[0].tree;
                let expected = model(tree, 5000);
                for (t, e) in expected.iter().enumerate() {
                    assert_eq!(
                        tree.route(t as u128).unwrap(),
                        *e,
                        "k={k} seed={seed} t={t}"
                    );
                }
                for s in 0..k {
                    let n = expected.iter().filter(|(p, _)| *p == s).count() as u128;
                    assert_eq!(tree.count(s, 5000), n);
                }
                // `Mix::get` maps the model's draws through each part's sampler, across mix
                // epochs of 7 items.
                let cfg = mix.config().clone().epochs(None).epoch_len(Some(7));
                let mut mix = Mix::new(&lens, cfg).unwrap();
                for (g, &(s, c)) in expected.iter().enumerate() {
                    let l = u128::from(lens[s]);
                    let sampler = mix.part_sampler(s).unwrap();
                    let local = sampler.index_at((c / l) as u64, (c % l) as u64).unwrap();
                    let g = g as u64;
                    let item = mix.get(g / 7, g % 7).unwrap();
                    assert_eq!(item.index, mix.part_offsets()[s] + local, "g={g}");
                }
            }
        }
    }

    #[test]
    fn locate_skips_empty_parts() {
        let mix = Mix::new(&[2, 0, 3], MixConfig::new(vec![1.0, 1.0, 1.0])).unwrap();
        assert_eq!(mix.part_offsets(), &[0, 2, 2]);
        assert_eq!(mix.locate(1), Some((0, 1)));
        assert_eq!(mix.locate(2), Some((2, 0)));
        assert_eq!(mix.locate(4), Some((2, 2)));
        assert_eq!(mix.locate(5), None);
        assert_eq!(mix.depth(), 1);
    }

    #[test]
    fn drop_over_many_parts_serves_every_draw_once() {
        let k = 1000;
        let lens: Vec<u64> = (0..k).map(|s| 1 + s % 4).collect();
        let weights: Vec<f64> = (0..k).map(|s| 1.0 + (s % 7) as f64).collect();
        let cfg = MixConfig::new(weights)
            .exhausted(Exhausted::Drop)
            .part_epochs(2);
        let mix = Mix::new(&lens, cfg).unwrap();
        let total: u64 = lens.iter().sum();
        assert_eq!(mix.epoch_len(), 2 * total);
        assert_eq!(mix.0.segments.len(), k as usize);
        let mut times = vec![0u32; total as usize];
        for item in mix.cursor() {
            times[item.unwrap().index as usize] += 1;
        }
        assert!(times.iter().all(|&t| t == 2));
    }

    #[test]
    fn empty_mixes_are_empty() {
        for ex in [Exhausted::Stop, Exhausted::Restart, Exhausted::Drop] {
            let cfg = MixConfig::new(vec![1.0, 2.0])
                .exhausted(ex)
                .epoch_len(Some(9));
            let mix = Mix::new(&[0, 0], cfg).unwrap();
            assert_eq!(mix.epoch_len(), 0);
            let mix = Mix::new(&[], MixConfig::new(vec![]).exhausted(ex)).unwrap();
            assert_eq!(mix.epoch_len(), 0);
            assert_eq!(mix.cursor().into_iter().count(), 0);
        }
    }
}
