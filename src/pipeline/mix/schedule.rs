//! The schedule of a [`super::Mix`]: the balanced tree of Sturmian splits that routes a global
//! position to a part, the weights quantised for it, and the segments of a drop mix.

use crate::hash::hash;
use crate::{Error, Result};

/// The sum the weights are quantised to (about; each weight is at least 1).
pub(super) const QUANTUM_TOTAL: u64 = 1 << 32;

/// Domain tag of the per-node phases.
const PHASE_TAG: u64 = 0x004d_4958_5048;

/// A child of a tree node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Child {
    Node(usize),
    Leaf(usize),
}

/// An inner node of the schedule: left weight `a` of total `w`, phase below `w`.
#[derive(Debug, Clone)]
pub(super) struct Node {
    pub(super) left: Child,
    pub(super) right: Child,
    /// The smallest part index of the right subtree.
    pub(super) split: usize,
    pub(super) a: u128,
    pub(super) w: u128,
    pub(super) phase: u128,
}

impl Node {
    /// `floor((t·a + phase) / w)`: how many of sub-positions `[0, t)` go left. Exact for every
    /// `t` (periodic decomposition), no overflow: `(t / w)·a ≤ t` and `(t mod w)·a < 2^70`.
    fn left_count(&self, t: u128) -> u128 {
        let (q, r) = (t / self.w, t % self.w);
        q * self.a + (r * self.a + self.phase) / self.w
    }
}

/// The schedule over one set of parts.
#[derive(Debug, Clone)]
pub(super) struct Tree {
    pub(super) root: Option<Child>,
    pub(super) nodes: Vec<Node>,
    /// The summed weight of the parts.
    pub(super) weight: u128,
    /// `ceil(log2(number of parts))`.
    pub(super) depth: u32,
}

impl Tree {
    /// The tree over `parts` (ascending part indices with non-zero weights).
    pub(super) fn new(parts: &[usize], weights: &[u64], seed: u64, segment: u64) -> Tree {
        let mut tree = Tree {
            root: None,
            nodes: Vec::new(),
            weight: 0,
            depth: usize::BITS - parts.len().saturating_sub(1).leading_zeros(),
        };
        if !parts.is_empty() {
            let (root, weight) = tree.build(parts, weights, seed, segment, 1);
            tree.root = Some(root);
            tree.weight = weight;
        }
        tree
    }

    fn build(
        &mut self,
        parts: &[usize],
        weights: &[u64],
        seed: u64,
        segment: u64,
        id: u64,
    ) -> (Child, u128) {
        if let [s] = parts {
            return (
                Child::Leaf(*s),
                u128::from(weights.get(*s).copied().unwrap_or(0)),
            );
        }
        let index = self.nodes.len();
        let (l, r) = parts.split_at(parts.len().div_ceil(2));
        let split = r.first().copied().unwrap_or(usize::MAX);
        self.nodes.push(Node {
            left: Child::Leaf(0),
            right: Child::Leaf(0),
            split,
            a: 0,
            w: 1,
            phase: 0,
        });
        let (left, a) = self.build(l, weights, seed, segment, id.wrapping_mul(2));
        let (right, b) = self.build(r, weights, seed, segment, id.wrapping_mul(2) | 1);
        // Weights are at most about 2^32 each: the sum fits and is at least 2.
        let w = (a + b).max(1);
        let phase = u128::from(hash(&[seed, id, segment, PHASE_TAG])) % w;
        if let Some(n) = self.nodes.get_mut(index) {
            *n = Node {
                left,
                right,
                split,
                a,
                w,
                phase,
            };
        }
        (Child::Node(index), w)
    }

    /// The part and its sub-position of the item at root sub-position `t`.
    pub(super) fn route(&self, t: u128) -> Option<(usize, u128)> {
        let mut child = self.root?;
        let mut t = t;
        loop {
            match child {
                Child::Leaf(s) => return Some((s, t)),
                Child::Node(i) => {
                    let n = self.nodes.get(i)?;
                    let c = n.left_count(t);
                    if n.left_count(t.checked_add(1)?) > c {
                        child = n.left;
                        t = c;
                    } else {
                        child = n.right;
                        t -= c;
                    }
                }
            }
        }
    }

    /// How many of root sub-positions `[0, t)` reach part `s` (0 if `s` is not in the tree).
    pub(super) fn count(&self, s: usize, t: u128) -> u128 {
        let Some(mut child) = self.root else {
            return 0;
        };
        let mut t = t;
        loop {
            match child {
                Child::Leaf(leaf) => return if leaf == s { t } else { 0 },
                Child::Node(i) => {
                    let Some(n) = self.nodes.get(i) else {
                        return 0;
                    };
                    let c = n.left_count(t);
                    if s < n.split {
                        child = n.left;
                        t = c;
                    } else {
                        child = n.right;
                        t -= c;
                    }
                }
            }
        }
    }

    /// The smallest `t ≤ hi` with `count(s, t) ≥ r`, or `None` if there is none.
    pub(super) fn first_reaching(&self, s: usize, r: u128, hi: u128) -> Option<u128> {
        if self.count(s, hi) < r {
            return None;
        }
        let (mut lo, mut hi) = (0u128, hi);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.count(s, mid) >= r {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Some(lo)
    }
}

/// A stretch of global positions `[start, …)` scheduled by one tree, each part's draws
/// continuing from its `base` count (`(part, count)` sorted by part; absent means 0).
#[derive(Debug, Clone)]
pub(super) struct Segment {
    pub(super) start: u128,
    pub(super) tree: Tree,
    pub(super) base: Vec<(usize, u128)>,
}

impl Segment {
    pub(super) fn base(&self, s: usize) -> u128 {
        self.base
            .binary_search_by_key(&s, |&(p, _)| p)
            .ok()
            .and_then(|i| self.base.get(i))
            .map_or(0, |&(_, c)| c)
    }
}

/// The segments of a drop mix and its total length (the summed budgets, which the caller
/// checked to fit `u64`).
///
/// A segment ends when its first part reaches its budget. The tree's counts are within `depth`
/// of `t·q_s/Q` (the window bound from position 0), which brackets each part's exhaustion time
/// `t_s` in `((r_s − depth)·Q/q_s, ⌈(r_s + depth)·Q/q_s⌉]`; only the parts whose bracket
/// reaches below the smallest upper end can finish first, and only they are binary-searched.
///
/// Each segment's tree runs on `weights` re-quantised over the parts left in it: integers
/// quantised once against every part would leave light parts with a handful of units each once
/// the heavy ones are gone, far from their ratios (weights 1, 1.5e-8 and 1e-8 quantise to
/// 2^32, 64 and 43: a 64 : 43 split of what follows part 0, not 3 : 2).
pub(super) fn drop_segments(
    active: &[usize],
    weights: &[f64],
    draw_lens: &[u64],
    budgets: &[u128],
    seed: u64,
) -> Result<(Vec<Segment>, u128)> {
    let mut remaining: Vec<(usize, u128)> = active
        .iter()
        .map(|&s| (s, budgets.get(s).copied().unwrap_or(0)))
        .filter(|&(_, b)| b > 0)
        .collect();
    let mut used: Vec<(usize, u128)> = remaining.iter().map(|&(s, _)| (s, 0)).collect();
    let mut start = 0u128;
    let mut segments = Vec::new();
    let mut number = 0u64;
    while !remaining.is_empty() {
        let parts: Vec<usize> = remaining.iter().map(|&(s, _)| s).collect();
        // The draw lengths of the parts left (the others 0), so only they share the quantum.
        let left: Vec<u64> = draw_lens
            .iter()
            .enumerate()
            .map(|(s, &l)| parts.binary_search(&s).map_or(0, |_| l))
            .collect();
        let weights = quantise(weights, &left);
        let tree = Tree::new(&parts, &weights, seed, number);
        let margin = u128::from(tree.depth) + 1;
        let q = |s: usize| u128::from(weights.get(s).copied().unwrap_or(0)).max(1);
        let upper = |s: usize, r: u128| {
            r.saturating_add(margin)
                .saturating_mul(tree.weight)
                .div_ceil(q(s))
        };
        let lower = |s: usize, r: u128| r.saturating_sub(margin).saturating_mul(tree.weight) / q(s);
        let hi = remaining
            .iter()
            .map(|&(s, r)| upper(s, r))
            .min()
            .unwrap_or(0);
        let len = remaining
            .iter()
            .filter(|&&(s, r)| lower(s, r) <= hi)
            .filter_map(|&(s, r)| tree.first_reaching(s, r, hi))
            .min()
            .ok_or_else(|| Error::Internal {
                reason: format!("mix: no part exhausts within segment {number}"),
            })?;
        let base = used.clone();
        for ((s, r), (_, u)) in remaining.iter_mut().zip(used.iter_mut()) {
            let c = tree.count(*s, len);
            *r = r.saturating_sub(c);
            *u = u.saturating_add(c);
        }
        segments.push(Segment { start, tree, base });
        let keep: Vec<bool> = remaining.iter().map(|&(_, r)| r > 0).collect();
        let mut flags = keep.iter();
        remaining.retain(|_| flags.next().copied().unwrap_or(false));
        let mut flags = keep.iter();
        used.retain(|_| flags.next().copied().unwrap_or(false));
        start = start.saturating_add(len);
        number = number.wrapping_add(1);
    }
    if segments.is_empty() {
        segments.push(Segment {
            start: 0,
            tree: Tree::new(&[], &[], seed, 0),
            base: Vec::new(),
        });
    }
    Ok((segments, start))
}

/// Quantises `weights` to integers summing to about 2^32 by largest remainder, each at least
/// 1; parts whose `draw_lens` is 0 get 0.
pub(super) fn quantise(weights: &[f64], draw_lens: &[u64]) -> Vec<u64> {
    let active = |s: usize| draw_lens.get(s).is_some_and(|&l| l > 0);
    // Scale by the largest weight first so the sum cannot overflow to infinity.
    let max = weights
        .iter()
        .enumerate()
        .filter(|&(s, _)| active(s))
        .map(|(_, &w)| w)
        .fold(0.0f64, f64::max);
    if max <= 0.0 {
        return vec![0; weights.len()];
    }
    let scaled: Vec<f64> = weights
        .iter()
        .enumerate()
        .map(|(s, &w)| if active(s) { w / max } else { 0.0 })
        .collect();
    let sum: f64 = scaled.iter().sum();
    let exact: Vec<f64> = scaled
        .iter()
        .map(|&w| w / sum * QUANTUM_TOTAL as f64)
        .collect();
    // Float to integer casts saturate; the values are in [0, 2^32].
    let mut q: Vec<u64> = exact.iter().map(|&e| e.floor() as u64).collect();
    let assigned = q.iter().fold(0u64, |a, &x| a.saturating_add(x));
    let mut order: Vec<usize> = (0..q.len()).filter(|&s| active(s)).collect();
    order.sort_by(|&x, &y| {
        let rem = |s: usize| {
            let e = exact.get(s).copied().unwrap_or(0.0);
            e - e.floor()
        };
        rem(y).total_cmp(&rem(x)).then(x.cmp(&y))
    });
    let missing = QUANTUM_TOTAL.saturating_sub(assigned);
    for &s in order
        .iter()
        .cycle()
        .take(usize::try_from(missing).unwrap_or(0))
    {
        if let Some(x) = q.get_mut(s) {
            *x = x.saturating_add(1);
        }
    }
    for (s, x) in q.iter_mut().enumerate() {
        if active(s) && *x == 0 {
            *x = 1;
        }
    }
    q
}
