//! The hash functions every layer shares: the splitmix64 mixer, a keyed hash of several words
//! (the sampler's permutations and draws, bucket and mix seeds, concat's part order), a
//! multiply-shift range reduction, and FNV-1a for names. A leaf: it
//! imports nothing of the crate. Their values are part of every checkpoint's meaning (a resumed
//! loader recomputes its order from them): never change one.

/// The splitmix64 finaliser: a bijective 64-bit mixer.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The initial state of [`hash`].
pub(crate) const HASH_START: u64 = 0x9e37_79b9_7f4a_7c15;

/// One step of [`hash`]: folds `w` into `acc`.
pub(crate) fn fold(acc: u64, w: u64) -> u64 {
    mix(acc.wrapping_add(0x9e37_79b9_7f4a_7c15) ^ mix(w))
}

/// A keyed hash of several words (order-sensitive).
pub(crate) fn hash(words: &[u64]) -> u64 {
    words.iter().fold(HASH_START, |acc, &w| fold(acc, w))
}

/// Maps a uniform 64-bit value to `[0, n)` (Lemire's multiply-shift; `n > 0`).
pub(crate) fn reduce(h: u64, n: u64) -> u64 {
    ((u128::from(h) * u128::from(n)) >> 64) as u64
}

/// 64-bit FNV-1a of `s`: names a URL's mirror directory.
pub(crate) fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
