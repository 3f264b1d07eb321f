//! Elastic resume: the checkpoints of N ranks, resumed by M ranks, mid-epoch.
//!
//! # Representation
//!
//! A residual is small whatever the epoch's size. Each old rank's shard of an epoch is an
//! arithmetic progression of positions of its parent sequence (`first, first + step, …`), and
//! what a rank left of it is a prefix it consumed in full (not stored), a window where consumption
//! was scattered (a bucket buffer in progress, or the items a best-effort merge ran ahead on:
//! a bitmap), and the untouched rest (a [`Run`]). A second elastic resume within the same epoch
//! adds a level whose runs select from the previous level's sequence.

use std::collections::HashMap;
use std::sync::Arc;

use super::batch::IndexBatch;
use super::chain::IndexChain;
use super::prefetch::{restore, Split};
use super::residual::{masked_run, ElasticState, ResidualEpoch, Run, Selection};
use super::root::{ResidualRoot, Root};
use super::shard::{Shard, ShardConfig};
use super::stage::{Layout, Stage};
use super::state::{LoaderState, Position};
use crate::{Error, Result};
/// The most batches (and items) of a rank's chain between its first unconsumed and its last
/// consumed one that a merge examines (a best-effort merge keeps this below workers × lead
/// batches, a bucket below its buffer size in items).
const MAX_WINDOW: u64 = 1 << 24;
/// How a loader builds its index chain over a root for a shard: what the merge needs to rebuild
/// the old ranks' chains and the new rank's.
pub(crate) struct ChainSpec<'a> {
    /// The root of every full epoch.
    pub(crate) base: Root,
    /// Builds sampler-to-batch over `root` for `shard`.
    pub(crate) build: &'a dyn Fn(Root, ShardConfig) -> Result<IndexChain>,
    /// Items per batch.
    pub(crate) batch_size: u64,
    /// The bucket buffer size, if bucketing.
    pub(crate) bucket_buffer: Option<u64>,
}

/// One residual epoch of an [`ElasticChain`].
#[derive(Debug, Clone)]
struct Segment {
    epoch: u64,
    root: Root,
    chain: IndexChain,
}

/// A rank's index chain after an elastic resume: the residual epochs first (epoch `k` of this
/// stage is residual epoch `k`, for `k` below [`Stage::irregular_epochs`]), then the full root
/// epochs from [`ElasticState::resume_epoch`] on. Its items carry root epochs; its description
/// is the full-epoch chain's.
#[derive(Debug, Clone)]
pub struct ElasticChain {
    segments: Vec<Segment>,
    regular: IndexChain,
    resume_epoch: u64,
}

impl ElasticChain {
    /// The chain for `shard`, after `elastic` (or from the start).
    pub(crate) fn new(
        spec: &ChainSpec<'_>,
        elastic: Option<&ElasticState>,
        shard: ShardConfig,
    ) -> Result<Self> {
        let regular = (spec.build)(spec.base.clone(), shard)?;
        let Some(elastic) = elastic else {
            return Ok(Self {
                segments: Vec::new(),
                regular,
                resume_epoch: 0,
            });
        };
        let bad = |reason: String| Error::ResumeMismatch {
            reason: format!("the checkpoint's elastic residual: {reason}"),
        };
        if let Some(e) = spec.base.epochs().filter(|&e| elastic.resume_epoch > e) {
            return Err(bad(format!(
                "resumes at epoch {}, past the loader's {e} epochs",
                elastic.resume_epoch
            )));
        }
        let mut segments = Vec::with_capacity(elastic.residual.len());
        let mut previous: Option<u64> = None;
        for r in &elastic.residual {
            if previous.is_some_and(|p| r.epoch <= p) || r.epoch >= elastic.resume_epoch {
                return Err(bad(format!(
                    "epoch {} is out of order (epochs must increase and stay below the resume \
                     epoch {})",
                    r.epoch, elastic.resume_epoch
                )));
            }
            previous = Some(r.epoch);
            let selection = Selection::new(&r.levels, spec.base.epoch_len())
                .map_err(|e| bad(format!("epoch {}: {e}", r.epoch)))?;
            let root = Root::Residual(Box::new(ResidualRoot::new(
                spec.base.clone(),
                r.epoch,
                Arc::new(selection),
            )));
            let chain = (spec.build)(root.clone(), shard)?;
            segments.push(Segment {
                epoch: r.epoch,
                root,
                chain,
            });
        }
        Ok(Self {
            segments,
            regular,
            resume_epoch: elastic.resume_epoch,
        })
    }

    /// The root epoch of this chain's epoch `k`.
    fn root_epoch(&self, k: u64) -> u64 {
        let s = self.segments.len() as u64;
        match usize::try_from(k).ok().and_then(|k| self.segments.get(k)) {
            Some(seg) => seg.epoch,
            None => self.resume_epoch.saturating_add(k.saturating_sub(s)),
        }
    }

    /// Epoch `k`'s parent root (a residual or the base root), with its old levels.
    fn parent(&self, k: u64, spec: &ChainSpec<'_>, elastic: Option<&ElasticState>) -> Parent {
        match usize::try_from(k).ok().and_then(|i| {
            Some((
                self.segments.get(i)?,
                elastic.and_then(|e| e.residual.get(i)),
            ))
        }) {
            Some((seg, Some(old))) => Parent {
                root: seg.root.clone(),
                levels: old.levels.clone(),
            },
            _ => Parent {
                root: spec.base.clone(),
                levels: Vec::new(),
            },
        }
    }

    /// Batch `b` of epoch `k`, computed by the chain that serves it.
    fn batch_at(&mut self, k: u64, b: u64) -> Result<IndexBatch> {
        let e = self.root_epoch(k);
        match usize::try_from(k)
            .ok()
            .and_then(|k| self.segments.get_mut(k))
        {
            Some(seg) => seg.chain.get(e, b),
            None => self.regular.get(e, b),
        }
    }
}

struct Parent {
    root: Root,
    levels: Vec<Vec<Run>>,
}

impl Stage for ElasticChain {
    type Item = IndexBatch;

    fn epochs(&self) -> Option<u64> {
        let s = self.segments.len() as u64;
        self.regular
            .epochs()
            .map(|e| s.saturating_add(e.saturating_sub(self.resume_epoch)))
    }

    fn epoch_len(&self) -> u64 {
        self.regular.epoch_len()
    }

    fn irregular_epochs(&self) -> u64 {
        self.segments.len() as u64
    }

    fn epoch_len_at(&self, epoch: u64) -> u64 {
        match usize::try_from(epoch)
            .ok()
            .and_then(|k| self.segments.get(k))
        {
            Some(seg) => seg.chain.epoch_len(),
            None => self.regular.epoch_len(),
        }
    }

    fn get(&mut self, epoch: u64, position: u64) -> Result<IndexBatch> {
        self.batch_at(epoch, position)
    }

    fn describe(&self, out: &mut String) {
        self.regular.describe(out);
    }
}

/// One old rank's progress, rebuilt from its checkpoint.
struct Progress {
    rank: u64,
    chain: ElasticChain,
    layout: Layout,
    shard: ShardConfig,
    split: Split,
    consumed: Vec<u64>,
    /// The first unconsumed global position (the total if all are consumed).
    lo: u64,
    /// One past the last consumed global position (at least `lo`).
    hi: u64,
}

impl Progress {
    fn new(
        rank: u64,
        chain: ElasticChain,
        shard: ShardConfig,
        state: &LoaderState,
    ) -> Result<Self> {
        let workers = state.prefetch.num_workers;
        let mut split = Split::of(&chain, workers);
        let (consumed, _) = restore(&state.prefetch, &mut split).map_err(|e| match e {
            Error::ResumeMismatch { reason } => Error::ResumeMismatch {
                reason: format!("rank {rank}'s checkpoint: {reason}"),
            },
            other => other,
        })?;
        let layout = Layout::of(&chain);
        let end = layout.total().unwrap_or(u64::MAX);
        let mut lo = end;
        let mut hi = split.base();
        for (w, &c) in consumed.iter().enumerate() {
            let w = w as u64;
            if split.count(w).is_none_or(|n| c < n) {
                if let Some(g) = split.global(w, c) {
                    lo = lo.min(g);
                }
            }
            if let Some(last) = c.checked_sub(1).and_then(|k| split.global(w, k)) {
                hi = hi.max(last.saturating_add(1));
            }
        }
        let hi = hi.max(lo.min(end));
        if hi.saturating_sub(lo) > MAX_WINDOW {
            return Err(Error::ResumeMismatch {
                reason: format!(
                    "rank {rank}'s checkpoint: its workers are {} batches apart, more than the \
                     {MAX_WINDOW} a merge examines",
                    hi - lo
                ),
            });
        }
        Ok(Self {
            rank,
            chain,
            layout,
            shard,
            split,
            consumed,
            lo,
            hi,
        })
    }

    fn is_consumed(&self, g: u64) -> bool {
        if g < self.lo {
            return true;
        }
        if g >= self.hi {
            return false;
        }
        let n = self.split.num_workers().max(1);
        let Some(d) = g.checked_sub(self.split.base()) else {
            return true;
        };
        let w = usize::try_from(d % n).unwrap_or(usize::MAX);
        self.consumed.get(w).is_some_and(|&c| d / n < c)
    }

    fn done(&self) -> bool {
        self.layout.total().is_some_and(|t| self.lo >= t)
    }

    /// What this rank left of its epoch `k`, as runs over the epoch's parent sequence.
    fn runs(&mut self, k: u64, parent: &Root, spec: &ChainSpec<'_>) -> Result<Vec<Run>> {
        let mut shard = Shard::new(parent.clone(), self.shard)?;
        let g = shard.geometry();
        let e = self.chain.root_epoch(k);
        let start = self
            .layout
            .global(Position {
                epoch: k,
                position: 0,
            })
            .ok_or_else(|| internal(format!("epoch {k} of rank {} has no start", self.rank)))?;
        let batches = self.chain.epoch_len_at(k);
        let end = start.saturating_add(batches);
        let b_pre = self.lo.clamp(start, end) - start;
        let b_hi = self.hi.clamp(start, end) - start;
        let mut runs = Vec::new();
        if b_hi == 0 {
            if g.own_len > 0 {
                runs.push(Run {
                    first: g.start,
                    step: g.step,
                    count: g.own_len,
                    mask: None,
                });
            }
            return Ok(runs);
        }
        let bs = spec.batch_size;
        let o_pre = b_pre.saturating_mul(bs).min(g.len);
        let o_hi = b_hi.saturating_mul(bs).min(g.len);
        let (q_lo, q_hi) = match spec.bucket_buffer {
            Some(buf) => (
                o_pre / buf * buf,
                o_hi.div_ceil(buf).saturating_mul(buf).min(g.len),
            ),
            None => (o_pre, o_hi),
        };
        let q_hi = q_hi.max(q_lo);
        let real_hi = q_hi.min(g.own_len);
        if q_lo < real_hi {
            let width = usize::try_from(real_hi - q_lo)
                .ok()
                .filter(|&w| w as u64 <= MAX_WINDOW)
                .ok_or_else(|| Error::ResumeMismatch {
                    reason: format!(
                        "rank {}'s checkpoint: {} items between its first unconsumed and its \
                         last consumed item in epoch {e}, more than the {MAX_WINDOW} a merge \
                         examines",
                        self.rank,
                        real_hi - q_lo
                    ),
                })?;
            let mut at = HashMap::with_capacity(width);
            for q in q_lo..real_hi {
                at.insert(shard.get(e, q)?.position, q - q_lo);
            }
            let mut kept = vec![true; width];
            for b in (q_lo / bs)..b_hi {
                if !self.is_consumed(start.saturating_add(b)) {
                    continue;
                }
                for s in self.chain.batch_at(k, b)?.samples {
                    if s.padded {
                        continue;
                    }
                    // Items before the window belong to buffers consumed in full.
                    if let Some(slot) = at
                        .get(&s.position)
                        .and_then(|&i| usize::try_from(i).ok())
                        .and_then(|i| kept.get_mut(i))
                    {
                        *slot = false;
                    }
                }
            }
            if let Some(run) = masked_run(g.start + q_lo * g.step, g.step, &kept) {
                runs.push(run);
            }
        }
        if q_hi < g.own_len {
            runs.push(Run {
                first: g.start + q_hi * g.step,
                step: g.step,
                count: g.own_len - q_hi,
                mask: None,
            });
        }
        Ok(runs)
    }
}

fn internal(what: String) -> Error {
    Error::Internal {
        reason: format!("elastic merge: {what}"),
    }
}

/// Merges the checkpoints of every old rank into the state every new rank resumes from.
///
/// `old[r]` is rank `r`'s chain (already checked against its checkpoint's configuration) and
/// checkpoint; `elastic` is the residual they all ran (they must agree).
pub(crate) fn merge(
    spec: &ChainSpec<'_>,
    elastic: Option<&ElasticState>,
    old: Vec<(ElasticChain, ShardConfig, &LoaderState)>,
) -> Result<ElasticState> {
    let n = old.len() as u64;
    let mut ranks = Vec::with_capacity(old.len());
    for (r, (chain, shard, state)) in old.into_iter().enumerate() {
        ranks.push(Progress::new(r as u64, chain, shard, state)?);
    }
    let old_resume = elastic.map_or(0, |e| e.resume_epoch);
    // Epochs every old rank finished are closed; the first epoch no old rank consumed from is
    // where the new ranks run full epochs again.
    let first_open = ranks
        .iter()
        .filter(|p| !p.done())
        .map(|p| p.chain.root_epoch(p.layout.position(p.lo).epoch))
        .min();
    let resume_epoch = ranks
        .iter()
        .filter(|p| p.hi > 0)
        .map(|p| {
            p.chain
                .root_epoch(p.layout.position(p.hi - 1).epoch)
                .saturating_add(1)
        })
        .fold(old_resume, u64::max);
    let mut residual = Vec::new();
    let Some(first_open) = first_open else {
        return Ok(ElasticState {
            residual,
            resume_epoch,
        });
    };
    let Some(lead) = ranks.first().map(|p| p.chain.segments.len() as u64) else {
        return Err(internal("no rank".into()));
    };
    // This chain's epochs whose root epoch is open and below the resume epoch: residual
    // segments, then full epochs from the old resume epoch.
    let full = resume_epoch.saturating_sub(old_resume);
    let epochs = (0..lead).chain((0..full).map(|i| lead.saturating_add(i)));
    for k in epochs {
        let Some(first) = ranks.first() else { break };
        let e = first.chain.root_epoch(k);
        if e < first_open {
            continue;
        }
        let parent = first.chain.parent(k, spec, elastic);
        let parent_len = parent.root.epoch_len();
        let mut runs = Vec::new();
        for p in &mut ranks {
            runs.extend(p.runs(k, &parent.root, spec)?);
        }
        let shard = ranks.first().map(|p| p.shard).unwrap_or_default();
        if shard.drop_remainder {
            // Positions no shard owns (the remainder the old shards dropped).
            let owned = parent_len / n * n;
            if owned < parent_len {
                runs.push(Run {
                    first: owned,
                    step: 1,
                    count: parent_len - owned,
                    mask: None,
                });
            }
        }
        let kept: u64 = runs
            .iter()
            .map(|r| match &r.mask {
                None => r.count,
                Some(m) => m.iter().map(|w| u64::from(w.count_ones())).sum(),
            })
            .sum();
        if kept == 0 {
            continue;
        }
        let mut levels = parent.levels;
        levels.push(runs);
        residual.push(ResidualEpoch { epoch: e, levels });
    }
    Ok(ElasticState {
        residual,
        resume_epoch,
    })
}
