//! The mix window bound is tight: over windows of every length, the largest deviation of a
//! part's count from `n ×` its weight stays below `ceil(log2 K)` (plus the quantisation term)
//! and, for one heavy part among light ones, comes within 0.5 of it, so a schedule with a worse
//! bound (a chain of nodes: K − 1) fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use zrecord::pipeline::{Exhausted, Mix, MixConfig, SamplerMode, Stage};

/// Positions examined per mix.
const SPAN: u64 = 1 << 16;

/// A seeded splitmix64 step.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The largest deviation, over every window `[a, b)` of `0..SPAN`, of a part's count from
/// `(b − a) ×` its normalised weight, per part. With `D(t) = count(t) − t·w` it is
/// `max D − min D`.
fn deviations(weights: &[f64], seed: u64) -> Vec<f64> {
    let k = weights.len();
    let lens: Vec<u64> = (0..k as u64).map(|s| 1000 + 7 * s).collect();
    let cfg = MixConfig::new(weights.to_vec())
        .exhausted(Exhausted::Restart)
        .mode(SamplerMode::Sequential)
        .seed(seed)
        .epochs(None);
    let mut mix = Mix::new(&lens, cfg).unwrap();
    let total: f64 = weights.iter().sum();
    let len = mix.epoch_len();
    let mut count = vec![0u64; k];
    let mut lo = vec![0.0f64; k];
    let mut hi = vec![0.0f64; k];
    for g in 0..SPAN {
        let item = mix.get(g / len, g % len).unwrap();
        count[mix.locate(item.index).unwrap().0] += 1;
        let t = (g + 1) as f64;
        for s in 0..k {
            let d = count[s] as f64 - t * weights[s] / total;
            lo[s] = lo[s].min(d);
            hi[s] = hi[s].max(d);
        }
    }
    (0..k).map(|s| hi[s] - lo[s]).collect()
}

/// One heavy part among light ones is the worst case: along the heavy part's path every node
/// sends almost everything its way, so the per-level errors (each below 1) add up undamped, and
/// some window catches one extra light item at every level at once. A tree of depth `d` then
/// shows errors close to `d`; a chain puts the last parts `K − 1` levels deep, beyond the bound.
#[test]
fn the_worst_window_comes_close_to_the_depth() {
    let mut rng = 0x5eed_u64;
    for k in [4usize, 8, 16] {
        let depth = f64::from(usize::BITS - (k - 1).leading_zeros());
        let bound = depth + SPAN as f64 * (k as f64 + 1.0) / 4_294_967_296.0;
        let light = 1.0 / (64.0 * k as f64);
        let mut worst = 0.0f64;
        for heavy in [0, k / 2, k - 1] {
            for _ in 0..2 {
                // Light weights of no simple ratio, so every node runs through its phases.
                let weights: Vec<f64> = (0..k)
                    .map(|s| {
                        let u = (splitmix(&mut rng) >> 11) as f64 / (1u64 << 53) as f64;
                        if s == heavy {
                            1.0
                        } else {
                            light * (0.5 + u)
                        }
                    })
                    .collect();
                let seed = splitmix(&mut rng);
                for (s, &d) in deviations(&weights, seed).iter().enumerate() {
                    assert!(
                        d < bound,
                        "k={k} seed={seed}: part {s} deviates by {d:.3} in some window, bound \
                         {bound:.6} (weights {weights:?})"
                    );
                    worst = worst.max(d);
                }
            }
        }
        assert!(
            worst > depth - 0.5,
            "k={k}: the worst window deviates by {worst:.3}, not within 0.5 of the depth {depth}"
        );
    }
}
