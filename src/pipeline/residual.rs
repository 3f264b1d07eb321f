//! What an elastic resume left of an epoch: the serde residual a checkpoint carries ([`Run`]s in
//! levels, see `pipeline/elastic.rs` for how a merge computes it) and its compiled form, a
//! sequence of root positions looked up in O(log runs).

use serde::{Deserialize, Serialize};

/// Positions `first + i * step` of a parent sequence, for `i` in `0..count`, keeping only those
/// whose bit `i` is set in `mask` when there is one (bit `i % 64` of word `i / 64`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// The first position.
    pub first: u64,
    /// The distance between positions.
    pub step: u64,
    /// The number of positions, masked ones included.
    pub count: u64,
    /// Which positions are kept; `None` keeps all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mask: Option<Vec<u64>>,
}

/// What elastic resumes left of one epoch of the root stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResidualEpoch {
    /// The root epoch.
    pub epoch: u64,
    /// Level 0 selects positions of the root epoch; every later level selects positions of the
    /// sequence the level before it selected (one level per elastic resume within this epoch).
    pub levels: Vec<Vec<Run>>,
}

/// The part of a checkpoint an elastic resume adds: the residual epochs a rank runs first, and
/// the root epoch it runs in full from.
///
/// # What is delivered
///
/// Every item of a loader is a position of its root stage (the sampler, or a mix): `(epoch,
/// position)`. Old ranks consumed some of them. The merge computes, for every epoch some old rank
/// was still inside of, the **residual**: every position of that epoch that no old rank consumed
/// (items prefetched but not consumed count as not consumed). The new ranks then run:
///
/// 1. the residual of each interrupted epoch, in epoch order, each as one epoch of its own:
///    sharded over the M new ranks, bucketed and batched by the new configuration;
/// 2. then every later epoch in full, exactly as an M-rank loader from the same seed runs it.
///
/// So every item of an interrupted epoch is delivered exactly once across old and new ranks,
/// whatever the old ranks' merge policy and however unevenly they progressed, and from the first
/// epoch no old rank had started the order is the deterministic M-rank order.
///
/// The new configuration's settings apply to the residual as to any epoch: `pad_to_equal` pads
/// the new ranks' shards of it to equal length with marked repeats, `drop_remainder` and
/// `drop_last` leave out its tail. The residual itself holds every unconsumed item, including
/// any the old configuration's drop settings would have left out of that epoch.
///
/// A partially consumed bucket buffer is not kept as a buffer: its unconsumed items go back into
/// the residual in their shard order, and the new ranks' bucket stages sort them again with the
/// rest of their shard of the residual.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ElasticState {
    /// The residual of every interrupted epoch, in epoch order.
    pub residual: Vec<ResidualEpoch>,
    /// The first root epoch run in full.
    pub resume_epoch: u64,
}
/// A [`Run`] checked against its parent, ready for lookups.
#[derive(Debug)]
struct CompiledRun {
    first: u64,
    step: u64,
    /// The mask's words and, per word, the number of kept positions before it.
    mask: Option<(Vec<u64>, Vec<u64>)>,
    /// Number of kept positions.
    len: u64,
}

impl CompiledRun {
    fn new(run: &Run, parent_len: u64) -> std::result::Result<Self, String> {
        let mut len = run.count;
        if run.count > 0 {
            if run.count > 1 && run.step == 0 {
                return Err("a step of 0 repeats a position".into());
            }
            let last = run
                .step
                .checked_mul(run.count - 1)
                .and_then(|d| run.first.checked_add(d))
                .filter(|&last| last < parent_len)
                .ok_or_else(|| {
                    format!(
                        "positions from {} every {} for {} leave the parent's {parent_len} \
                         positions",
                        run.first, run.step, run.count
                    )
                })?;
            let _ = last;
        }
        let mask = match &run.mask {
            None => None,
            Some(words) => {
                let expected = run.count.div_ceil(64);
                if words.len() as u64 != expected {
                    return Err(format!(
                        "a mask of {} words for {} positions (expected {expected})",
                        words.len(),
                        run.count
                    ));
                }
                let tail_bits = run.count % 64;
                if tail_bits != 0 && words.last().is_some_and(|w| w >> tail_bits != 0) {
                    return Err("mask bits set past the run's count".into());
                }
                let mut ranks = Vec::with_capacity(words.len());
                len = 0;
                for w in words {
                    ranks.push(len);
                    len += u64::from(w.count_ones());
                }
                Some((words.clone(), ranks))
            }
        };
        Ok(Self {
            first: run.first,
            step: run.step,
            mask,
            len,
        })
    }

    /// The parent position of the `i`-th kept position.
    fn nth(&self, i: u64) -> Option<u64> {
        if i >= self.len {
            return None;
        }
        let j = match &self.mask {
            None => i,
            Some((words, ranks)) => {
                let w = ranks.partition_point(|&r| r <= i).checked_sub(1)?;
                let mut word = *words.get(w)?;
                for _ in 0..i.checked_sub(*ranks.get(w)?)? {
                    word &= word.wrapping_sub(1);
                }
                if word == 0 {
                    return None;
                }
                (w as u64)
                    .checked_mul(64)?
                    .checked_add(u64::from(word.trailing_zeros()))?
            }
        };
        self.step.checked_mul(j)?.checked_add(self.first)
    }
}

/// One level of a selection: runs, and their cumulative lengths.
#[derive(Debug)]
struct Level {
    runs: Vec<CompiledRun>,
    ends: Vec<u64>,
}

/// A residual epoch's levels, compiled: a sequence of root positions.
#[derive(Debug)]
pub(crate) struct Selection {
    levels: Vec<Level>,
    pub(crate) len: u64,
}

impl Selection {
    pub(crate) fn new(levels: &[Vec<Run>], root_len: u64) -> std::result::Result<Self, String> {
        if levels.is_empty() {
            return Err("no level".into());
        }
        let mut parent_len = root_len;
        let mut compiled = Vec::with_capacity(levels.len());
        for (l, runs) in levels.iter().enumerate() {
            let mut level = Level {
                runs: Vec::with_capacity(runs.len()),
                ends: Vec::with_capacity(runs.len()),
            };
            let mut len = 0u64;
            for (i, run) in runs.iter().enumerate() {
                let run = CompiledRun::new(run, parent_len)
                    .map_err(|e| format!("level {l}, run {i}: {e}"))?;
                len = len
                    .checked_add(run.len)
                    .ok_or_else(|| format!("level {l}: more than 2^64 positions"))?;
                level.runs.push(run);
                level.ends.push(len);
            }
            if len > parent_len {
                return Err(format!(
                    "level {l} selects {len} positions of a sequence of {parent_len}"
                ));
            }
            parent_len = len;
            compiled.push(level);
        }
        Ok(Self {
            levels: compiled,
            len: parent_len,
        })
    }

    /// The root position of the `t`-th item.
    pub(crate) fn lookup(&self, t: u64) -> Option<u64> {
        let mut t = t;
        for level in self.levels.iter().rev() {
            let r = level.ends.partition_point(|&end| end <= t);
            let start = r
                .checked_sub(1)
                .and_then(|p| level.ends.get(p))
                .copied()
                .unwrap_or(0);
            t = level.runs.get(r)?.nth(t.checked_sub(start)?)?;
        }
        Some(t)
    }
}
/// The run over `kept.len()` positions from `first` every `step` keeping `kept`, `None` if it
/// keeps nothing.
pub(crate) fn masked_run(first: u64, step: u64, kept: &[bool]) -> Option<Run> {
    let count = kept.len() as u64;
    if !kept.contains(&true) {
        return None;
    }
    let mask = (!kept.iter().all(|&k| k)).then(|| {
        kept.chunks(64)
            .map(|c| {
                c.iter()
                    .enumerate()
                    .fold(0u64, |w, (i, &k)| w | (u64::from(k) << i))
            })
            .collect()
    });
    Some(Run {
        first,
        step,
        count,
        mask,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_runs_select_in_order() {
        let kept: Vec<bool> = (0..130).map(|i| i % 3 != 0).collect();
        let run = masked_run(5, 2, &kept).unwrap();
        let c = CompiledRun::new(&run, 1000).unwrap();
        let expected: Vec<u64> = (0..130u64)
            .filter(|i| i % 3 != 0)
            .map(|i| 5 + 2 * i)
            .collect();
        assert_eq!(c.len, expected.len() as u64);
        for (i, &p) in expected.iter().enumerate() {
            assert_eq!(c.nth(i as u64), Some(p));
        }
        assert_eq!(c.nth(c.len), None);
    }

    #[test]
    fn bad_runs_are_refused() {
        let run = |first, step, count, mask| Run {
            first,
            step,
            count,
            mask,
        };
        assert!(CompiledRun::new(&run(0, 1, 10, None), 10).is_ok());
        assert!(CompiledRun::new(&run(0, 1, 11, None), 10).is_err());
        assert!(CompiledRun::new(&run(1, 0, 2, None), 10).is_err());
        assert!(CompiledRun::new(&run(u64::MAX, u64::MAX, 3, None), u64::MAX).is_err());
        assert!(CompiledRun::new(&run(0, 1, 3, Some(vec![0b1000])), 10).is_err());
        assert!(CompiledRun::new(&run(0, 1, 3, Some(vec![1, 1])), 10).is_err());
        let nested = Selection::new(
            &[
                vec![run(0, 2, 5, None)],          // 0, 2, 4, 6, 8
                vec![run(1, 1, 3, Some(vec![5]))], // parent positions 1 and 3: 2, 6
            ],
            10,
        )
        .unwrap();
        assert_eq!(nested.len, 2);
        assert_eq!(nested.lookup(0), Some(2));
        assert_eq!(nested.lookup(1), Some(6));
        assert_eq!(nested.lookup(2), None);
        assert!(Selection::new(&[vec![run(0, 1, 5, None)], vec![run(0, 1, 6, None)]], 10).is_err());
    }
}
