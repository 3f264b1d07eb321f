//! The sampler: the first stage, mapping `(epoch, position)` to a record index.

use serde::{Deserialize, Serialize};

mod feistel;

use super::stage::{Sample, Stage};
use crate::hash::{fold, hash, reduce, HASH_START};
use crate::{Error, Result};
use feistel::Feistel;
pub(crate) use feistel::Network;

/// How the sampler orders indices.
///
/// Four modes, all seeded and portable (plain 64-bit integer arithmetic, no platform RNG):
///
/// - [`SamplerMode::Sequential`]: every index of `[0, n)` once per epoch, in order; every epoch
///   is the same.
/// - [`SamplerMode::SequentialWrap`]: loaderx's sliding window over a circular index space, an
///   explicit opt-in to wrap-around. The window of `window_len` indices slides forward by
///   `window_len`; the index space `[0, n)` is a circular queue, so the window at the tail wraps
///   to the head instead of being truncated, and the next epoch continues where the circle left
///   off. An epoch is `ceil(n / window_len)` windows, so position `p` of epoch `e` is index
///   `(e * epoch_len + p) mod n`: with `n = 10` and `window_len = 4`, epoch 0 ends `…, 8, 9, 0,
///   1` and epoch 1 starts at 2. With `window_len` dividing `n` it is the same as `Sequential`.
/// - [`SamplerMode::Shuffled`]: a fresh permutation of `[0, n)` per epoch, keyed by
///   `(seed, epoch)`, computed per position with a keyed Feistel network plus cycle-walking (the
///   construction of Grain's `index_shuffle`). No N-sized array; seeking is O(1).
/// - [`SamplerMode::Random`]: `n` draws per epoch with replacement; the index at position `p` is
///   a keyed hash of `(seed, epoch, p)` reduced to `[0, n)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SamplerMode {
    /// In order: every epoch is `0, 1, …, n − 1`, each index exactly once.
    ///
    /// In 0.1.0 this variant was `Sequential { window_len }`, the circular sliding window:
    /// that is [`SamplerMode::SequentialWrap`] now (the same stream), and
    /// `Sequential { window_len: 1 }` is this (see CHANGELOG.md).
    Sequential,
    /// In order, as windows of `window_len` sliding over a circular index space that wraps
    /// around (see above): an epoch is `ceil(n / window_len)` whole windows,
    /// so it repeats indices from the start of the circle, and the next epoch starts where the
    /// last one left off. `window_len` must be at least 1.
    SequentialWrap {
        /// The window length; usually the batch size.
        window_len: u64,
    },
    /// A fresh seeded permutation every epoch.
    Shuffled,
    /// Seeded draws with replacement, `n` per epoch.
    Random,
}

/// Configuration of a [`Sampler`].
///
/// Built from [`SamplerConfig::default`] with chainable setters, so options added later do not
/// break callers:
///
/// ```
/// use zrecord::pipeline::{SamplerConfig, SamplerMode};
///
/// let config = SamplerConfig::default().seed(7).epochs(None);
/// assert_eq!(config.mode, SamplerMode::Shuffled);
/// let in_order = SamplerConfig::default().mode(SamplerMode::Sequential);
/// assert_eq!(in_order.epochs, Some(1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SamplerConfig {
    /// The order. Default: [`SamplerMode::Shuffled`].
    pub mode: SamplerMode,
    /// The seed. Default: 0.
    pub seed: u64,
    /// Number of epochs; `None` runs forever. Default: `Some(1)`.
    pub epochs: Option<u64>,
}

impl Default for SamplerConfig {
    /// Shuffled, seed 0, one epoch.
    fn default() -> Self {
        Self {
            mode: SamplerMode::Shuffled,
            seed: 0,
            epochs: Some(1),
        }
    }
}

impl SamplerConfig {
    /// Sets the order. Default [`SamplerMode::Shuffled`].
    #[must_use]
    pub fn mode(mut self, mode: SamplerMode) -> Self {
        self.mode = mode;
        self
    }

    /// Sets the seed. Default 0.
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Sets the number of epochs; `None` runs forever. Default `Some(1)`.
    #[must_use]
    pub fn epochs(mut self, epochs: Option<u64>) -> Self {
        self.epochs = epochs;
        self
    }
}

/// The sampler stage over an index space `[0, len)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sampler {
    len: u64,
    config: SamplerConfig,
    epoch_len: u64,
    /// The permutation of [`SamplerMode::Shuffled`]: this version's, unless a resume from an
    /// earlier version's checkpoint asked for that one ([`Sampler::set_network`]).
    network: Network,
}

impl Sampler {
    /// A sampler over `[0, len)`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if a wrapping window length is 0.
    pub fn new(len: u64, config: SamplerConfig) -> Result<Self> {
        let epoch_len = match config.mode {
            SamplerMode::SequentialWrap { window_len: 0 } => {
                return Err(Error::InvalidConfig {
                    reason: "sampler: sequential-wrap window_len must be at least 1".into(),
                })
            }
            SamplerMode::SequentialWrap { window_len } => len
                .div_ceil(window_len)
                .checked_mul(window_len)
                .ok_or_else(|| Error::InvalidConfig {
                    reason: format!(
                        "sampler: epoch of {len} records in windows of {window_len} overflows u64"
                    ),
                })?,
            SamplerMode::Sequential | SamplerMode::Shuffled | SamplerMode::Random => len,
        };
        Ok(Self {
            len,
            config,
            epoch_len,
            network: Network::default(),
        })
    }

    /// This sampler with the shuffled order of zrecord 0.1 (a balanced Feistel network of six
    /// rounds, about half as fast; its descriptions have no `permutation` setting), to resume
    /// in a hand-built stream chain a checkpoint that version took. [`crate::pipeline::Loader`]
    /// needs no such call: it picks the order a checkpoint names. Other modes are unchanged.
    #[must_use]
    pub fn earlier_permutation(mut self) -> Self {
        self.network = Network::Balanced;
        self
    }

    /// Runs the shuffled permutation of `network` (the loader sets [`Network::Balanced`] to
    /// resume a checkpoint of an earlier version exactly).
    pub(crate) fn set_network(&mut self, network: Network) {
        self.network = network;
    }

    /// The key of epoch `epoch`'s shuffled permutation.
    fn shuffle_key(&self, epoch: u64) -> u64 {
        hash(&[self.config.seed, epoch, 0x5348_5546])
    }

    /// The size of the index space.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True if the index space is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The configuration.
    pub fn config(&self) -> &SamplerConfig {
        &self.config
    }

    /// The record index at `position` of `epoch`: a pure O(1) function (expected O(1) for
    /// shuffled, which cycle-walks at most a few steps on average).
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] if `position` is not below the epoch length.
    pub fn index_at(&self, epoch: u64, position: u64) -> Result<u64> {
        if position >= self.epoch_len {
            return Err(Error::IndexOutOfRange {
                index: position,
                len: self.epoch_len,
            });
        }
        let n = self.len;
        Ok(match self.config.mode {
            SamplerMode::Sequential => position,
            SamplerMode::SequentialWrap { .. } => {
                let global = u128::from(epoch) * u128::from(self.epoch_len) + u128::from(position);
                // n > 0 here: the epoch is empty otherwise. The remainder is below n: fits u64.
                u64::try_from(global % u128::from(n)).unwrap_or(0)
            }
            SamplerMode::Shuffled => {
                Feistel::new(n, self.shuffle_key(epoch), self.network).permute(position)
            }
            SamplerMode::Random => {
                let h = hash(&[self.config.seed, epoch, position, 0x0052_4e44]);
                reduce(h, n)
            }
        })
    }
}

impl Stage for Sampler {
    type Item = Sample;

    fn epochs(&self) -> Option<u64> {
        self.config.epochs
    }

    fn epoch_len(&self) -> u64 {
        self.epoch_len
    }

    fn get(&mut self, epoch: u64, position: u64) -> Result<Sample> {
        if let Some(e) = self.config.epochs.filter(|&e| epoch >= e) {
            return Err(Error::IndexOutOfRange {
                index: epoch,
                len: e,
            });
        }
        Ok(Sample {
            epoch,
            position,
            index: self.index_at(epoch, position)?,
            padded: false,
        })
    }

    fn get_strided(
        &mut self,
        epoch: u64,
        start: u64,
        step: u64,
        count: usize,
        out: &mut Vec<Sample>,
    ) -> Result<()> {
        if count == 0 {
            return Ok(());
        }
        if let Some(e) = self.config.epochs.filter(|&e| epoch >= e) {
            return Err(Error::IndexOutOfRange {
                index: epoch,
                len: e,
            });
        }
        // Every position is checked up front, so the loops below cannot fail; the error names
        // the first position that `get` would refuse.
        let fits = ((count - 1) as u64)
            .checked_mul(step)
            .and_then(|d| d.checked_add(start))
            .is_some_and(|last| last < self.epoch_len);
        if !fits {
            let first_bad = if start >= self.epoch_len || step == 0 {
                start
            } else {
                // The first k with start + k·step ≥ epoch_len.
                let k = (self.epoch_len - start).div_ceil(step);
                start.saturating_add(k.saturating_mul(step))
            };
            return Err(Error::IndexOutOfRange {
                index: first_bad,
                len: self.epoch_len,
            });
        }
        let n = self.len;
        let first = out.len();
        out.extend((0..count as u64).map(|k| Sample {
            epoch,
            position: start + k * step,
            index: start + k * step,
            padded: false,
        }));
        let Some(samples) = out.get_mut(first..) else {
            return Ok(());
        };
        match self.config.mode {
            SamplerMode::Sequential => {}
            SamplerMode::SequentialWrap { .. } => {
                for s in samples {
                    s.index = self.index_at(epoch, s.position)?;
                }
            }
            SamplerMode::Shuffled => {
                Feistel::new(n, self.shuffle_key(epoch), self.network).permute_many(samples);
            }
            SamplerMode::Random => {
                // `hash(&[seed, epoch, position, tag])`, with the first two words folded once.
                let prefix = fold(fold(HASH_START, self.config.seed), epoch);
                for s in samples {
                    s.index = reduce(fold(fold(prefix, s.position), 0x0052_4e44), n);
                }
            }
        }
        Ok(())
    }

    fn describe(&self, out: &mut String) {
        let c = &self.config;
        out.push_str(&format!(
            "sampler(len={}, mode={:?}, seed={}, epochs={:?}{})",
            self.len,
            c.mode,
            c.seed,
            c.epochs,
            permutation_setting(c.mode, self.network)
        ));
    }
}

/// The `permutation` setting of a shuffled stage's description: `, permutation=2` for this
/// version's network, nothing for the earlier one (whose checkpoints have no such setting) or
/// for another mode.
pub(crate) fn permutation_setting(mode: SamplerMode, network: Network) -> String {
    match (mode, network) {
        (SamplerMode::Shuffled, Network::Exact) => {
            format!(", permutation={}", network.version())
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn epoch(s: &mut Sampler, e: u64) -> Vec<u64> {
        (0..s.epoch_len())
            .map(|p| s.get(e, p).unwrap().index)
            .collect()
    }

    fn shuffled(n: u64, seed: u64) -> Sampler {
        Sampler::new(
            n,
            SamplerConfig::default()
                .mode(SamplerMode::Shuffled)
                .seed(seed)
                .epochs(None),
        )
        .unwrap()
    }

    #[test]
    fn get_strided_is_get_at_every_position() {
        let modes = [
            SamplerMode::Sequential,
            SamplerMode::SequentialWrap { window_len: 3 },
            SamplerMode::Shuffled,
            SamplerMode::Random,
        ];
        for n in [1u64, 2, 3, 5, 64, 1000, 2_000_000, (1 << 40) + 3] {
            for mode in modes {
                for seed in [0, 7] {
                    let config = SamplerConfig::default().mode(mode).seed(seed).epochs(None);
                    let mut s = Sampler::new(n, config).unwrap();
                    let len = s.epoch_len();
                    for (start, step, count) in
                        [(0u64, 1u64, 300usize), (len / 3, 7, 40), (len - 1, 1, 1)]
                    {
                        let count = count.min(((len - start).div_ceil(step)) as usize);
                        for e in [0, 3] {
                            let mut got = Vec::new();
                            s.get_strided(e, start, step, count, &mut got).unwrap();
                            let want: Vec<Sample> = (0..count as u64)
                                .map(|k| s.get(e, start + k * step).unwrap())
                                .collect();
                            assert_eq!(
                                got, want,
                                "n={n} {mode:?} seed={seed} start={start} step={step}"
                            );
                        }
                    }
                    let mut out = Vec::new();
                    assert!(s.get_strided(0, len - 1, 1, 2, &mut out).is_err());
                }
            }
        }
    }

    /// Review: Random mode's batch path is its per-position hash.
    #[test]
    fn random_get_strided_is_the_keyed_hash() {
        // Random mode's folded prefix is hash(&[seed, epoch, position, TAG]).
        for n in [1u64, 2, 1000, u64::MAX] {
            let config = SamplerConfig::default()
                .mode(SamplerMode::Random)
                .seed(99)
                .epochs(None);
            let mut s = Sampler::new(n, config).unwrap();
            let mut got = Vec::new();
            let count = n.min(50) as usize;
            s.get_strided(7, 0, 1, count, &mut got).unwrap();
            for g in got {
                let h = hash(&[99, 7, g.position, 0x0052_4e44]);
                assert_eq!(g.index, reduce(h, n));
            }
        }
    }

    /// Review: `get_strided`'s errors are `get`'s for the first position that fails (its
    /// documented contract, and what the default gives).
    #[test]
    fn get_strided_errors_name_the_first_failing_position() {
        let config = SamplerConfig::default()
            .mode(SamplerMode::Sequential)
            .epochs(Some(1));
        let mut s = Sampler::new(10, config).unwrap();
        let mut out = Vec::new();
        let err = s.get_strided(0, 8, 1, 5, &mut out).unwrap_err();
        let want = s.get(0, 10).unwrap_err();
        assert_eq!(format!("{err:?}"), format!("{want:?}"));
    }

    #[test]
    fn shuffled_is_a_permutation_for_many_sizes() {
        let mut sizes: Vec<u64> = (0..=70).collect();
        sizes.extend([
            97, 127, 128, 129, 255, 256, 257, 1000, 1009, 1024, 4096, 4099,
        ]);
        for n in sizes {
            for seed in [0, 1, 0xdead_beef] {
                let mut s = shuffled(n, seed);
                for e in 0..2 {
                    let mut got = epoch(&mut s, e);
                    assert_eq!(got.len() as u64, n);
                    got.sort_unstable();
                    assert_eq!(got, (0..n).collect::<Vec<_>>(), "n={n} seed={seed} e={e}");
                }
            }
        }
    }

    #[test]
    fn shuffled_changes_with_epoch_and_seed_and_repeats_with_same_seed() {
        let mut a = shuffled(1000, 7);
        let mut b = shuffled(1000, 7);
        let mut c = shuffled(1000, 8);
        assert_eq!(epoch(&mut a, 0), epoch(&mut b, 0));
        assert_eq!(epoch(&mut a, 3), epoch(&mut b, 3));
        assert_ne!(epoch(&mut a, 0), epoch(&mut a, 1));
        assert_ne!(epoch(&mut a, 0), epoch(&mut c, 0));
        assert_ne!(epoch(&mut a, 0), (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn shuffled_seek_is_a_pure_function_of_position() {
        // Seeking far into a huge index space computes one position, nothing before it.
        let n = 100_000_000_000u64;
        let s = shuffled(n, 42);
        let p = 99_999_999_999u64;
        let i = s.index_at(5, p).unwrap();
        assert!(i < n);
        assert_eq!(s.index_at(5, p).unwrap(), i);
        assert_eq!(shuffled(n, 42).index_at(5, p).unwrap(), i);
        // Distinct positions, distinct indices.
        let mut seen: Vec<u64> = (0..2000).map(|p| s.index_at(5, p).unwrap()).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 2000);
        // The largest domains work too.
        let big = shuffled(u64::MAX, 1);
        assert!(big.index_at(0, u64::MAX - 1).unwrap() < u64::MAX);
    }

    #[test]
    fn portable_known_values() {
        // Pin the exact output so a change of hash or Feistel layout is noticed: checkpoints
        // taken by one build must resume identically on another. Both networks are pinned:
        // the earlier versions' order is what their checkpoints resume into.
        for (n, now, earlier) in [
            (10u64, &KNOWN_SHUFFLE_10[..], &KNOWN_SHUFFLE_10_EARLIER[..]),
            (20, &KNOWN_SHUFFLE_20, &KNOWN_SHUFFLE_20_EARLIER),
        ] {
            let mut s = shuffled(n, 0);
            let got: Vec<u64> = (0..n).map(|p| s.index_at(0, p).unwrap()).collect();
            assert_eq!(got, now, "n={n}");
            s.set_network(Network::Balanced);
            let got: Vec<u64> = (0..n).map(|p| s.index_at(0, p).unwrap()).collect();
            assert_eq!(got, earlier, "n={n}, earlier versions");
        }
    }

    const KNOWN_SHUFFLE_10: [u64; 10] = [1, 8, 6, 9, 3, 0, 5, 7, 4, 2];
    const KNOWN_SHUFFLE_10_EARLIER: [u64; 10] = [3, 5, 6, 0, 1, 4, 9, 2, 7, 8];
    const KNOWN_SHUFFLE_20: [u64; 20] = [
        19, 13, 10, 5, 1, 16, 3, 0, 12, 4, 9, 15, 7, 8, 2, 17, 18, 6, 11, 14,
    ];
    const KNOWN_SHUFFLE_20_EARLIER: [u64; 20] = [
        9, 17, 8, 1, 4, 15, 12, 10, 16, 18, 13, 11, 6, 7, 2, 19, 14, 3, 0, 5,
    ];

    #[test]
    fn sequential_wrap_slides_its_window_around_the_circle() {
        let mut s = Sampler::new(
            10,
            SamplerConfig::default()
                .mode(SamplerMode::SequentialWrap { window_len: 4 })
                .seed(0)
                .epochs(Some(3)),
        )
        .unwrap();
        assert_eq!(s.epoch_len(), 12);
        assert_eq!(epoch(&mut s, 0), vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]);
        assert_eq!(epoch(&mut s, 1), vec![2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3]);
        let mut plain = Sampler::new(
            5,
            SamplerConfig::default()
                .mode(SamplerMode::SequentialWrap { window_len: 1 })
                .seed(0)
                .epochs(Some(2)),
        )
        .unwrap();
        assert_eq!(epoch(&mut plain, 1), vec![0, 1, 2, 3, 4]);
        assert!(Sampler::new(
            5,
            SamplerConfig::default().mode(SamplerMode::SequentialWrap { window_len: 0 })
        )
        .is_err());
    }

    #[test]
    fn a_sequential_epoch_is_every_index_once_in_order() {
        let mut s = Sampler::new(
            10,
            SamplerConfig::default()
                .mode(SamplerMode::Sequential)
                .epochs(Some(3)),
        )
        .unwrap();
        assert_eq!(s.epoch_len(), 10);
        for e in 0..3 {
            assert_eq!(epoch(&mut s, e), (0..10).collect::<Vec<_>>(), "epoch {e}");
        }
        let mut describe = String::new();
        s.describe(&mut describe);
        assert_eq!(
            describe,
            "sampler(len=10, mode=Sequential, seed=0, epochs=Some(3))"
        );
        let empty = Sampler::new(0, SamplerConfig::default().mode(SamplerMode::Sequential));
        assert_eq!(empty.unwrap().epoch_len(), 0);
    }

    #[test]
    fn random_draws_in_range_and_deterministic() {
        let mut s = Sampler::new(
            50,
            SamplerConfig::default()
                .mode(SamplerMode::Random)
                .seed(3)
                .epochs(None),
        )
        .unwrap();
        let a = epoch(&mut s, 0);
        assert_eq!(a.len(), 50);
        assert!(a.iter().all(|&i| i < 50));
        assert_eq!(a, epoch(&mut s.clone(), 0));
        assert_ne!(a, epoch(&mut s, 1));
        // With replacement: some index repeats in 50 draws of 50 (birthday bound).
        let mut d = a.clone();
        d.sort_unstable();
        d.dedup();
        assert!(d.len() < 50);
    }

    #[test]
    fn past_the_end_is_an_error() {
        let mut s = shuffled(3, 0);
        assert!(s.get(0, 3).is_err());
        let mut one = Sampler::new(3, SamplerConfig::default()).unwrap();
        assert!(one.get(1, 0).is_err());
    }
}
