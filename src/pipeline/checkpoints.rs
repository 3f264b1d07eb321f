//! Loader checkpoints checked and merged: the header a checkpoint must match to be resumed (source
//! generation and length, configuration), and the merge of every old rank's checkpoint into the
//! one a new rank resumes from (the computation itself is `pipeline/elastic.rs`).

use super::elastic::{self, ChainSpec, ElasticChain};
use super::prefetch::fresh_state;
use super::shard::ShardConfig;
use super::stage::describe;
use super::state::{describe_differences, shard_settings, LoaderState, LOADER_STATE_VERSION};
use crate::{Error, Result};

/// Ranks named in a merge refusal before "and N more".
const RANKS_NAMED: usize = 8;

/// Why checkpoints with shard settings `shards` (one per checkpoint, in the order given) are not
/// every rank of one run once, naming the ranks that are missing or given twice; `None` if they
/// are.
fn rank_coverage(shards: &[ShardConfig]) -> Option<String> {
    let n = shards.len();
    let first = shards.first()?;
    let total = first.total;
    if let Some((i, other)) = shards.iter().enumerate().find(|(_, s)| s.total != total) {
        return Some(format!(
            "checkpoint {i} was taken by rank {} of {}, checkpoint 0 by rank {} of {total}: \
             not one run's ranks",
            other.index, other.total, first.index
        ));
    }
    if let Some((i, bad)) = shards.iter().enumerate().find(|(_, s)| s.index >= total) {
        return Some(format!(
            "checkpoint {i} names rank {} of {total}: a malformed shard index",
            bad.index
        ));
    }
    let mut ranks: Vec<u64> = shards.iter().map(|s| s.index).collect();
    ranks.sort_unstable();
    let mut twice: Vec<u64> = ranks
        .windows(2)
        .filter_map(|w| match w {
            [a, b] if a == b => Some(*a),
            _ => None,
        })
        .collect();
    twice.dedup();
    ranks.dedup();
    // The ranks below `total` not in `ranks` (sorted, distinct, each below `total`).
    let missing_count = total.saturating_sub(ranks.len() as u64);
    let mut missing = Vec::new();
    let mut next = 0u64;
    for &r in ranks.iter().chain(std::iter::once(&total)) {
        missing.extend((next..r).take(RANKS_NAMED - missing.len()));
        if missing.len() == RANKS_NAMED {
            break;
        }
        next = r.saturating_add(1);
    }
    if missing_count == 0 && twice.is_empty() {
        return None;
    }
    let given = match n {
        1 => "1 checkpoint was".to_string(),
        _ => format!("{n} checkpoints were"),
    };
    let mut problems = Vec::new();
    if missing_count > 0 {
        problems.push(rank_list(&missing, missing_count, "missing"));
    }
    if !twice.is_empty() {
        problems.push(rank_list(&twice, twice.len() as u64, "given twice"));
    }
    Some(format!(
        "{given} given for {total} ranks: {}: merge every rank's checkpoint, once",
        problems.join(", ")
    ))
}

/// "rank 2 is missing", "ranks 1 and 2 are missing", "ranks 1, 2, …, 8 and 29 more are
/// missing": `named` are the first of `count` ranks.
fn rank_list(named: &[u64], count: u64, what: &str) -> String {
    let shown = named.iter().take(RANKS_NAMED).map(u64::to_string);
    let mut items: Vec<String> = shown.collect();
    let more = count.saturating_sub(items.len() as u64);
    if more > 0 {
        items.push(format!("{more} more"));
    }
    let list = match items.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => items.concat(),
    };
    match count {
        1 => format!("rank {list} is {what}"),
        _ => format!("ranks {list} are {what}"),
    }
}

/// A portable 64-bit fingerprint of a description string (FNV-1a then a splitmix finaliser).
fn fingerprint(description: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in description.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    crate::hash::mix(h)
}

/// What a checkpoint records besides the prefetch state.
#[derive(Debug, Clone)]
pub(crate) struct Header {
    pub(crate) generation: u64,
    pub(crate) source_len: u64,
    pub(crate) fingerprint: u64,
    pub(crate) config: String,
}

impl Header {
    /// The header of a loader over a source at `generation` of `source_len` records whose index
    /// chain is described by `config`.
    pub(crate) fn new(generation: u64, source_len: u64, config: String) -> Self {
        Self {
            generation,
            source_len,
            fingerprint: fingerprint(&config),
            config,
        }
    }

    /// Checks the checkpoint's format version and source.
    pub(crate) fn check_source(&self, state: &LoaderState) -> Result<()> {
        let mismatch = |reason: String| Err(Error::ResumeMismatch { reason });
        if state.version != LOADER_STATE_VERSION {
            return mismatch(format!(
                "checkpoint format version {} is not the supported version {LOADER_STATE_VERSION}",
                state.version
            ));
        }
        if state.generation != self.generation {
            return mismatch(format!(
                "the checkpoint was taken on dataset generation {}, the source is at generation {}",
                state.generation, self.generation
            ));
        }
        if state.source_len != self.source_len {
            return mismatch(format!(
                "the checkpoint was taken on a source of {} records, this one has {}",
                state.source_len, self.source_len
            ));
        }
        Ok(())
    }

    pub(crate) fn check(&self, state: &LoaderState) -> Result<()> {
        let mismatch = |reason: String| Err(Error::ResumeMismatch { reason });
        self.check_source(state)?;
        if state.config != self.config {
            if let Some(differences) = describe_differences(&state.config, &self.config) {
                return mismatch(format!("the pipeline configuration differs: {differences}"));
            }
        }
        if state.fingerprint != self.fingerprint || state.config != self.config {
            return mismatch(format!(
                "the pipeline configuration differs: checkpoint has `{}` (fingerprint {:#018x}), \
                 this loader has `{}` (fingerprint {:#018x})",
                state.config, state.fingerprint, self.config, self.fingerprint
            ));
        }
        Ok(())
    }
}

/// Merges the checkpoints `states` of every rank of an earlier run into the checkpoint the rank
/// `own_shard` of a new run with `num_workers` workers resumes from (see
/// [`super::LoaderBuilder::merge_checkpoints`]); `header` describes the new run's loader.
pub(crate) fn merge(
    spec: &ChainSpec<'_>,
    header: &Header,
    states: &[LoaderState],
    own_shard: ShardConfig,
    num_workers: usize,
) -> Result<LoaderState> {
    let n = states.len() as u64;
    let mismatch = |reason: String| Error::ResumeMismatch { reason };
    let first = states
        .first()
        .ok_or_else(|| mismatch("no checkpoint to merge".into()))?;
    let mut shards = Vec::with_capacity(states.len());
    for (i, state) in states.iter().enumerate() {
        header.check_source(state).map_err(|e| match e {
            Error::ResumeMismatch { reason } => {
                mismatch(format!("checkpoint {i} of {n}: {reason}"))
            }
            other => other,
        })?;
        let shard = shard_settings(&state.config).ok_or_else(|| {
            mismatch(format!(
                "checkpoint {i} of {n} records no shard settings in `{}`",
                state.config
            ))
        })?;
        shards.push(shard);
    }
    if let Some(reason) = rank_coverage(&shards) {
        return Err(mismatch(reason));
    }
    let first_shard = shards
        .first()
        .copied()
        .ok_or_else(|| mismatch("no checkpoint to merge".into()))?;
    let mut by_rank: Vec<Option<(ShardConfig, &LoaderState)>> =
        (0..states.len()).map(|_| None).collect();
    for (state, shard) in states.iter().zip(shards) {
        if first_shard.index(shard.index) != shard {
            return Err(mismatch(format!(
                "rank {}'s shard settings ({shard:?}) differ from checkpoint 0's \
                     ({first_shard:?}) beyond the rank index: not one run's ranks",
                shard.index
            )));
        }
        if state.elastic != first.elastic {
            return Err(mismatch(format!(
                "rank {}'s checkpoint resumed from another elastic merge than checkpoint 0's",
                shard.index
            )));
        }
        // `rank_coverage` found every rank below the count, once.
        let slot = usize::try_from(shard.index)
            .ok()
            .and_then(|r| by_rank.get_mut(r))
            .ok_or_else(|| Error::Internal {
                reason: format!("merging checkpoints: rank {} of {n}", shard.index),
            })?;
        *slot = Some((shard, state));
    }
    let old = by_rank.into_iter().flatten().collect::<Vec<_>>();
    let elastic = first.elastic.as_ref();
    let mut chains = Vec::with_capacity(old.len());
    for (shard, state) in old {
        let chain = ElasticChain::new(spec, elastic, shard)?;
        let theirs = describe(&chain);
        if theirs != state.config {
            let what = describe_differences(&state.config, &theirs).unwrap_or_else(|| {
                format!("checkpoint has `{}`, this loader `{theirs}`", state.config)
            });
            return Err(mismatch(format!(
                "rank {} of {n}'s checkpoint: the pipeline configuration differs: {what}",
                shard.index
            )));
        }
        chains.push((chain, shard, state));
    }
    let merged = elastic::merge(spec, elastic, chains)?;
    let chain = ElasticChain::new(spec, Some(&merged), own_shard)?;
    Ok(LoaderState {
        version: LOADER_STATE_VERSION,
        generation: header.generation,
        source_len: header.source_len,
        fingerprint: header.fingerprint,
        prefetch: fresh_state(&chain, num_workers),
        config: header.config.clone(),
        elastic: Some(merged),
        stage: None,
    })
}
