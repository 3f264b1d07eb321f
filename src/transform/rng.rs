//! The per-record random generator: every random choice a transform makes comes from
//! (loader seed, epoch, record index, field), never from a thread's or a worker's state.

use crate::hash;

/// A random generator seeded from (seed, epoch, record index, field): the same record of the
/// same epoch draws the same numbers on any worker, after any resume, and on any rank after an
/// elastic resume, so a random augmentation needs no state in the checkpoint.
///
/// A counter-based splitmix64 stream: cheap to make (one per record and field), and each draw is
/// one multiply-xorshift mix. Its values are part of what a resumed loader reproduces: they never
/// change between releases.
///
/// ```
/// use zrecord::transform::Rng;
///
/// let mut a = Rng::for_record(7, 0, 42, "image");
/// let mut b = Rng::for_record(7, 0, 42, "image");
/// assert_eq!(a.next_u64(), b.next_u64());
/// assert_ne!(Rng::for_record(7, 1, 42, "image").next_u64(), Rng::for_record(7, 0, 42, "image").next_u64());
/// let x = a.uniform(0.5, 1.0);
/// assert!((0.5..1.0).contains(&x));
/// ```
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

/// The splitmix64 increment.
const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

impl Rng {
    /// A generator seeded from a 64-bit value.
    pub fn new(seed: u64) -> Rng {
        Rng {
            state: hash::mix(seed),
        }
    }

    /// The generator of `field` of record `index` in `epoch`, under the loader's `seed`.
    pub fn for_record(seed: u64, epoch: u64, index: u64, field: &str) -> Rng {
        Rng::new(hash::hash(&[seed, epoch, index, hash::fnv(field)]))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GAMMA);
        hash::mix(self.state)
    }

    /// A uniform draw from `[0, 1)`, with 53 bits of precision.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform draw from `[lo, hi)` (`lo` if the range is empty).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        let x = lo + (hi - lo) * self.next_f64();
        if x < hi {
            x
        } else {
            lo
        }
    }

    /// A uniform integer from `0..n` (0 if `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        hash::reduce(self.next_u64(), n)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.next_f64() < p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_fixed_forever() {
        // The values a checkpoint's resume reproduces: a change here changes every augmentation.
        let mut r = Rng::for_record(0, 0, 0, "image");
        let first = [r.next_u64(), r.next_u64()];
        let mut again = Rng::for_record(0, 0, 0, "image");
        assert_eq!(first, [again.next_u64(), again.next_u64()]);
        assert_ne!(first[0], first[1]);
        assert_ne!(
            Rng::for_record(0, 0, 0, "label").next_u64(),
            Rng::for_record(0, 0, 0, "image").next_u64()
        );
    }

    #[test]
    fn ranges() {
        let mut r = Rng::new(3);
        for _ in 0..10_000 {
            let u = r.uniform(-2.0, 3.0);
            assert!((-2.0..3.0).contains(&u));
            assert!(r.below(7) < 7);
            assert!(r.next_f64() < 1.0);
        }
        assert_eq!(r.below(0), 0);
        assert_eq!(r.uniform(1.0, 1.0), 1.0);
        let heads = (0..10_000).filter(|_| r.chance(0.5)).count();
        assert!((4_500..5_500).contains(&heads), "{heads}");
    }
}
