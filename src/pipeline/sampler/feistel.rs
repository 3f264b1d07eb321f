//! The keyed pseudo-random permutation behind [`super::SamplerMode::Shuffled`]: a Feistel network
//! with cycle-walking (the construction of Grain's `index_shuffle`).
//!
//! A Feistel network splits a `b`-bit value into a high and a low part and, round after round,
//! XORs a keyed function of one part into the other. Each round is its own inverse, so the
//! network is a permutation of `[0, 2^b)` whatever the round function; cycle-walking (applying
//! it again until the value lands below `n`) restricts it to a permutation of `[0, n)`. Its
//! cost per index is the expected walk, `2^b / n` passes of the network: the smaller the
//! domain, the faster.

use super::super::stage::Sample;
use crate::hash::mix;

/// Rounds of the balanced network (each XORs into one part; the parts alternate).
const BALANCED_ROUNDS: usize = 6;

/// Rounds of the exact network. Four rounds of a pseudo-random round function make a strong
/// pseudo-random permutation (Luby–Rackoff); Grain's and TensorFlow's index shuffles run three.
/// The round function is the splitmix64 finaliser, keyed per round.
const EXACT_ROUNDS: usize = 4;

/// Round keys held: the larger of the two round counts.
const MAX_ROUNDS: usize = BALANCED_ROUNDS;

/// Values [`Feistel::encrypt_lanes`] runs through the network side by side.
const LANES: usize = 8;

/// Which domain the network covers: the one thing that differs between the permutation this
/// version computes and the one earlier versions did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Network {
    /// Up to 0.1: a balanced network over the smallest even number of bits `2h` with
    /// `2^(2h) >= n`, so up to `4n` values: 2.7 passes per index at `n = 10^8`. Kept so that a
    /// checkpoint taken by an earlier version resumes into exactly its order (the loader picks
    /// it when the checkpoint's description has no `permutation` setting). Six rounds.
    Balanced,
    /// An unbalanced network over exactly `⌈log2 n⌉` bits (the high part the shorter by one
    /// bit when the count is odd), so under `2n` values: 1.34 passes per index at `n = 10^8`.
    /// Four rounds.
    #[default]
    Exact,
}

impl Network {
    /// The permutation's version, as the sampler's description names it.
    pub(crate) fn version(self) -> u32 {
        match self {
            Self::Balanced => 1,
            Self::Exact => 2,
        }
    }
}

/// The network for one `(n, key)`: its split and round keys, computed once.
pub(crate) struct Feistel {
    n: u64,
    /// Bits of the low part; the high part is `value >> low`.
    low: u32,
    low_mask: u64,
    high_mask: u64,
    /// [`BALANCED_ROUNDS`] or [`EXACT_ROUNDS`].
    rounds: usize,
    round_keys: [u64; MAX_ROUNDS],
}

/// `(1 << bits) - 1` for `bits` in `0..=64`.
fn mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

impl Feistel {
    pub(crate) fn new(n: u64, key: u64, network: Network) -> Self {
        // ⌈log2 n⌉, in 0..=64 (0 for n <= 1, where nothing is permuted).
        let bits = 64 - n.saturating_sub(1).leading_zeros();
        let (high, low, rounds) = match network {
            Network::Balanced => (bits.div_ceil(2), bits.div_ceil(2), BALANCED_ROUNDS),
            Network::Exact => (bits / 2, bits - bits / 2, EXACT_ROUNDS),
        };
        let mut round_keys = [0u64; MAX_ROUNDS];
        for (round, k) in (1u64..).zip(round_keys.iter_mut()) {
            *k = key ^ round.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
        Self {
            n,
            low,
            low_mask: mask(low),
            high_mask: mask(high),
            rounds,
            round_keys,
        }
    }

    /// One pass of the network (no cycle-walking). The rounds XOR into the high part, then the
    /// low, and so on: the same as the textbook form that swaps the parts after each round, as
    /// the number of rounds is even.
    #[inline(always)]
    fn encrypt<const R: usize>(&self, x: u64) -> u64 {
        let mut high = x >> self.low;
        let mut low = x & self.low_mask;
        for pair in self.round_keys.get(..R).unwrap_or_default().chunks_exact(2) {
            if let [even, odd] = pair {
                // The round function: a keyed splitmix64 finaliser, one `mix` per round.
                high ^= mix(low ^ even) & self.high_mask;
                low ^= mix(high ^ odd) & self.low_mask;
            }
        }
        (high << self.low) | low
    }

    /// [`Feistel::encrypt`] of `L` values at once, the rounds in lockstep: `L` independent
    /// dependency chains the core overlaps (one alone waits on each round's multiplies).
    #[inline(always)]
    fn encrypt_lanes<const R: usize, const L: usize>(&self, x: [u64; L]) -> [u64; L] {
        let mut high = x.map(|v| v >> self.low);
        let mut low = x.map(|v| v & self.low_mask);
        for pair in self.round_keys.get(..R).unwrap_or_default().chunks_exact(2) {
            if let [even, odd] = pair {
                for (h, l) in high.iter_mut().zip(low.iter_mut()) {
                    *h ^= mix(*l ^ even) & self.high_mask;
                    *l ^= mix(*h ^ odd) & self.low_mask;
                }
            }
        }
        let mut out = [0u64; L];
        for ((o, h), l) in out.iter_mut().zip(high).zip(low) {
            *o = (h << self.low) | l;
        }
        out
    }

    /// The element at `position` of the permutation of `[0, n)`. Requires `position < n`.
    pub(crate) fn permute(&self, position: u64) -> u64 {
        match self.rounds {
            EXACT_ROUNDS => self.permute_r::<EXACT_ROUNDS>(position),
            _ => self.permute_r::<BALANCED_ROUNDS>(position),
        }
    }

    fn permute_r<const R: usize>(&self, position: u64) -> u64 {
        if self.n <= 1 {
            return position;
        }
        let mut x = position;
        loop {
            x = self.encrypt::<R>(x);
            if x < self.n {
                return x;
            }
        }
    }

    /// Encrypts the index of every sample `samples[k]` for `k` in `which`, [`LANES`] at a time.
    fn encrypt_at<const R: usize>(&self, samples: &mut [Sample], which: &[u32]) {
        let mut groups = which.chunks_exact(LANES);
        for q in &mut groups {
            let lanes: [u64; LANES] = std::array::from_fn(|i| {
                q.get(i)
                    .and_then(|&k| samples.get(k as usize))
                    .map_or(0, |s| s.index)
            });
            let out = self.encrypt_lanes::<R, LANES>(lanes);
            for (&k, v) in q.iter().zip(out) {
                if let Some(s) = samples.get_mut(k as usize) {
                    s.index = v;
                }
            }
        }
        for &k in groups.remainder() {
            if let Some(s) = samples.get_mut(k as usize) {
                s.index = self.encrypt::<R>(s.index);
            }
        }
    }

    /// Replaces every sample's `index` (its position on entry) with its permuted index: exactly
    /// [`Feistel::permute`] of each, computed pass by pass over the whole batch (every sample
    /// once, then only those whose cycle-walk goes on), so independent samples overlap in the
    /// pipeline instead of waiting on one unpredictable walk branch each.
    pub(crate) fn permute_many(&self, samples: &mut [Sample]) {
        match self.rounds {
            EXACT_ROUNDS => self.permute_many_r::<EXACT_ROUNDS>(samples),
            _ => self.permute_many_r::<BALANCED_ROUNDS>(samples),
        }
    }

    fn permute_many_r<const R: usize>(&self, samples: &mut [Sample]) {
        if self.n <= 1 {
            return;
        }
        let mut walking: Vec<u32> = (0..samples.len() as u32).collect();
        self.encrypt_at::<R>(samples, &walking);
        let n = self.n;
        // Keep those still out of range (without a branch per sample).
        let keep = |walking: &mut Vec<u32>, samples: &[Sample]| {
            let mut kept = 0;
            for i in 0..walking.len() {
                let Some(k) = walking.get(i).copied() else {
                    break;
                };
                if let Some(slot) = walking.get_mut(kept) {
                    *slot = k;
                }
                kept += usize::from(samples.get(k as usize).is_some_and(|s| s.index >= n));
            }
            walking.truncate(kept);
        };
        keep(&mut walking, samples);
        while !walking.is_empty() {
            self.encrypt_at::<R>(samples, &walking);
            keep(&mut walking, samples);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The permutation of versions up to 0.1, as they computed it (a balanced network that
    /// swaps its halves after each round): [`Network::Balanced`] must stay exactly this, or
    /// their checkpoints would resume into another order.
    fn earlier_versions_permute(position: u64, n: u64, key: u64) -> u64 {
        if n <= 1 {
            return position;
        }
        let bits = 64 - (n - 1).leading_zeros();
        let half = bits.div_ceil(2);
        let mask = if half >= 64 {
            u64::MAX
        } else {
            (1u64 << half) - 1
        };
        let mut x = position;
        loop {
            let mut left = x >> half;
            let mut right = x & mask;
            for round in 0..BALANCED_ROUNDS as u64 {
                let round_key = key ^ (round + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                let f = mix(right ^ round_key) & mask;
                let next = left ^ f;
                left = right;
                right = next;
            }
            x = (left << half) | right;
            if x < n {
                return x;
            }
        }
    }

    fn sizes() -> Vec<u64> {
        let mut sizes: Vec<u64> = vec![0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 100_000_000];
        for k in [5u32, 8, 13, 31, 32, 33, 47, 62, 63] {
            sizes.extend([(1u64 << k) - 1, 1u64 << k, (1u64 << k) + 1]);
        }
        sizes.extend([u64::MAX - 2, u64::MAX - 1, u64::MAX]);
        sizes
    }

    fn samples(start: u64, count: usize) -> Vec<Sample> {
        (0..count as u64)
            .map(|k| Sample {
                epoch: 0,
                position: start + k,
                index: start + k,
                padded: false,
            })
            .collect()
    }

    /// Review: the batched network equals the one-at-a-time one at edge sizes (0, 1, 2, powers
    /// of two, 2^k+1, near u64::MAX), over runs longer than a lane group and with remainders,
    /// for both networks; and the balanced one is the earlier versions' permutation.
    #[test]
    fn permute_many_is_permute_and_balanced_is_the_earlier_permutation() {
        for n in sizes() {
            for key in [0u64, 0x1234_5678_9abc_def0, u64::MAX] {
                for (start, count) in [(0u64, 37usize), (n.saturating_sub(19), 19)] {
                    let count = count.min(n.saturating_sub(start) as usize);
                    for network in [Network::Balanced, Network::Exact] {
                        let f = Feistel::new(n, key, network);
                        let mut batch = samples(start, count);
                        f.permute_many(&mut batch);
                        for s in &batch {
                            assert_eq!(s.index, f.permute(s.position), "n={n} key={key}");
                            if n > 0 {
                                assert!(s.index < n);
                            }
                            if network == Network::Balanced {
                                assert_eq!(s.index, earlier_versions_permute(s.position, n, key));
                            }
                        }
                    }
                }
            }
        }
    }

    /// The exact network is a permutation of `[0, n)` for every small `n` (each bit count,
    /// odd and even, and sizes just above and below a power of two), and its order differs from
    /// the balanced one's (all but a few tiny sizes).
    #[test]
    fn the_exact_network_is_a_permutation() {
        let (mut cases, mut differs) = (0, 0);
        for n in (0..=300u64).chain([1023, 1024, 1025, 4097, 65_535, 65_537]) {
            for key in [0u64, 7, u64::MAX] {
                let f = Feistel::new(n, key, Network::Exact);
                let mut batch = samples(0, n as usize);
                f.permute_many(&mut batch);
                let mut got: Vec<u64> = batch.iter().map(|s| s.index).collect();
                let earlier = (0..n).map(|p| earlier_versions_permute(p, n, key));
                cases += 1;
                differs += usize::from(!got.iter().copied().eq(earlier));
                got.sort_unstable();
                assert_eq!(got, (0..n).collect::<Vec<_>>(), "n={n} key={key}");
            }
        }
        assert!(differs + 15 > cases, "{differs} of {cases}");
    }

    /// The point of the exact network: under two passes per index on average, against up to
    /// four for the balanced one (counted, not timed).
    #[test]
    fn the_exact_network_walks_less() {
        let passes = |n: u64, network: Network| {
            let f = Feistel::new(n, 99, network);
            let mut total = 0u64;
            for p in 0..20_000u64 {
                let mut x = p;
                loop {
                    x = match network {
                        Network::Balanced => f.encrypt::<BALANCED_ROUNDS>(x),
                        Network::Exact => f.encrypt::<EXACT_ROUNDS>(x),
                    };
                    total += 1;
                    if x < n {
                        break;
                    }
                }
            }
            total as f64 / 20_000.0
        };
        // 10^8: 2^27 = 1.34 n against 2^28 = 2.68 n.
        let (exact, balanced) = (
            passes(100_000_000, Network::Exact),
            passes(100_000_000, Network::Balanced),
        );
        assert!(exact < 1.45 && balanced > 2.4, "{exact} {balanced}");
        // Just above a power of two: just under 2 passes for both (2^(2h) = 2^b there).
        let exact = passes((1 << 20) + 1, Network::Exact);
        assert!(exact < 2.1, "{exact}");
    }
}
