//! [`Loader`]: the usual chain — sampler (or mix) → shard → (bucket) → batch → prefetch —
//! behind one builder, with a checkpoint that records the source generation and the configuration.

mod stages;

use stages::MapStep;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::stream::{FusedStream, Stream, StreamExt};
use serde::{Deserialize, Serialize};

use super::batch::{BatchConfig, Batcher, IndexBatch};
use super::bucket::{Bucket, BucketConfig, BucketKey};
use super::chain::IndexChain;
use super::checkpoint::Checkpoint;
use super::checkpoint_ext::CheckpointExt;
use super::checkpoints::{self, Header};
use super::description::{balanced_network_in, user_stage_in};
use super::elastic::{ChainSpec, ElasticChain};
use super::mix::{Mix, MixConfig};
use super::prefetch::{
    identity, LoaderBatch, MergePolicy, OnError, Prefetch, PrefetchConfig, RetryPolicy, Transform,
};
use super::residual::ElasticState;
use super::root::Root;
use super::sampler::{Network, Sampler, SamplerConfig};
use super::shard::{Shard, ShardConfig};
use super::source::Source;
use super::stage::{describe, Stage};
use super::staged_chain::{StagedChain, UserStage};
use super::state::{LoaderState, PrefetchState, LOADER_STATE_VERSION};
use super::stats::LoaderStats;
use crate::{Error, Result};

/// The prefetch a loader with a user stage runs over the stage: the stream form.
type StagedPrefetch<T> = Prefetch<T, StagedChain>;

/// Every option of a [`Loader`] but the bucket key and the transform (which are functions).
///
/// Built from [`LoaderConfig::default`] with chainable setters, so options added later do not
/// break callers:
///
/// ```
/// use zrecord::pipeline::{BatchConfig, BucketConfig, LoaderConfig, PrefetchConfig, SamplerConfig};
///
/// let config = LoaderConfig::default()
///     .sampler(SamplerConfig::default().seed(42))
///     .bucket(Some(BucketConfig::default().pack_size(64)))
///     .batch(BatchConfig::new(64))
///     .prefetch(PrefetchConfig::default().num_workers(4));
/// assert_eq!(config.shard.total, 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[non_exhaustive]
pub struct LoaderConfig {
    /// The sampler. Default: [`SamplerConfig::default`] (shuffled, seed 0, one epoch).
    pub sampler: SamplerConfig,
    /// The shard of this rank. Default: [`ShardConfig::default`] (one shard: everything).
    pub shard: ShardConfig,
    /// Length bucketing. Default: `None` (off).
    pub bucket: Option<BucketConfig>,
    /// Batching. Default: [`BatchConfig::default`] (32, keep the last short batch).
    pub batch: BatchConfig,
    /// Workers, queues and merge. Default: [`PrefetchConfig::default`].
    pub prefetch: PrefetchConfig,
}

impl LoaderConfig {
    /// Sets the sampler. Default [`SamplerConfig::default`] (shuffled, seed 0, one epoch).
    #[must_use]
    pub fn sampler(mut self, sampler: SamplerConfig) -> Self {
        self.sampler = sampler;
        self
    }

    /// Sets the shard of this rank. Default [`ShardConfig::default`] (one shard: everything).
    #[must_use]
    pub fn shard(mut self, shard: ShardConfig) -> Self {
        self.shard = shard;
        self
    }

    /// Sets length bucketing: `Some` turns it on, `None` off. Default `None` (off).
    #[must_use]
    pub fn bucket(mut self, bucket: Option<BucketConfig>) -> Self {
        self.bucket = bucket;
        self
    }

    /// Sets batching. Default [`BatchConfig::default`] (32, keep the last short batch).
    #[must_use]
    pub fn batch(mut self, batch: BatchConfig) -> Self {
        self.batch = batch;
        self
    }

    /// Sets workers, queues, merge, retries and error handling. Default
    /// [`PrefetchConfig::default`] (2 workers, queues of 2, strict merge, 3 tries per batch,
    /// stop at a failed batch).
    #[must_use]
    pub fn prefetch(mut self, prefetch: PrefetchConfig) -> Self {
        self.prefetch = prefetch;
        self
    }
}

/// Builds a [`Loader`]; see [`Loader::builder`].
#[must_use = "a builder does nothing until built"]
pub struct LoaderBuilder<S: Source, T = <S as Source>::Batch> {
    source: Arc<S>,
    config: LoaderConfig,
    key: Option<BucketKey>,
    /// The mix replacing the sampler, if any (not in [`LoaderConfig`], which stays `Copy`).
    mix: Option<MixConfig>,
    /// The seed given to [`LoaderBuilder::seed`], applied to a bucket or mix configuration set
    /// later.
    seed: Option<u64>,
    /// The shuffled permutation: this version's, or an earlier one's while resuming a checkpoint
    /// an earlier version took (set by [`LoaderBuilder::resume`], never by a user).
    network: Network,
    /// The user stage over the index chain, if any ([`LoaderBuilder::stage`]).
    stage: Option<UserStage>,
    /// The transform stage ([`LoaderBuilder::map`]), run before `transform`.
    map: Option<MapStep<S::Batch>>,
    transform: Transform<S::Batch, T>,
}

/// A copy of the builder (sources, keys and transforms are shared): one per rank, say.
impl<S: Source, T> Clone for LoaderBuilder<S, T> {
    fn clone(&self) -> Self {
        Self {
            source: Arc::clone(&self.source),
            config: self.config,
            key: self.key.clone(),
            mix: self.mix.clone(),
            seed: self.seed,
            network: self.network,
            stage: self.stage.clone(),
            map: self.map.clone(),
            transform: Arc::clone(&self.transform),
        }
    }
}

impl<S: Source, T> fmt::Debug for LoaderBuilder<S, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoaderBuilder")
            .field("config", &self.config)
            .field("key", &self.key)
            .field("mix", &self.mix)
            .field("stage", &self.stage.as_ref().map(UserStage::name))
            .finish_non_exhaustive()
    }
}

impl<S: Source> LoaderBuilder<S> {
    /// A builder over `source` with the default configuration and no transform.
    pub fn new(source: Arc<S>) -> Self {
        Self {
            source,
            config: LoaderConfig::default(),
            key: None,
            mix: None,
            seed: None,
            network: Network::default(),
            stage: None,
            map: None,
            transform: identity(),
        }
    }
}

impl<S: Source, T: Send + 'static> LoaderBuilder<S, T> {
    /// Replaces the whole configuration, seeds included (a seed given to
    /// [`LoaderBuilder::seed`] before this is forgotten). A mix set with [`LoaderBuilder::mix`]
    /// is kept, with its own seed.
    pub fn config(mut self, config: LoaderConfig) -> Self {
        self.config = config;
        self.seed = None;
        self
    }

    /// The sampler configuration.
    pub fn sampler(mut self, sampler: SamplerConfig) -> Self {
        self.config.sampler = sampler;
        self
    }

    /// The seed of the sampler, of the bucket and of the mix, whether [`LoaderBuilder::bucket`]
    /// or [`LoaderBuilder::mix`] is called before or after this (it overrides the seed of the
    /// [`BucketConfig`] and of the [`MixConfig`]).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self.config.sampler.seed = seed;
        if let Some(b) = &mut self.config.bucket {
            b.seed = seed;
        }
        if let Some(m) = &mut self.mix {
            m.seed = seed;
        }
        self
    }

    /// Mixes the source's parts ([`Source::part_lens`], e.g. the parts of a
    /// [`super::Concat`]) by weight: a [`Mix`] replaces the sampler at the root of the index
    /// chain. The mix has its own order of each part ([`MixConfig::mode`]), its own epochs
    /// ([`MixConfig::epochs`]) and exhaustion policy; the sampler settings
    /// ([`LoaderBuilder::sampler`], [`LoaderBuilder::epochs`]) are then unused. A seed given to
    /// [`LoaderBuilder::seed`] (before or after this) replaces `mix.seed`. Sharding, bucketing,
    /// batching and prefetch apply to the mixed stream as to a sampled one.
    ///
    /// Building fails with [`Error::InvalidConfig`] if the number of weights is not the number
    /// of parts.
    pub fn mix(mut self, mut mix: MixConfig) -> Self {
        if let Some(seed) = self.seed {
            mix.seed = seed;
        }
        self.mix = Some(mix);
        self
    }

    /// Number of sampler epochs; `None` runs forever. A mix has its own
    /// ([`MixConfig::epochs`]).
    ///
    /// Shorthand for [`SamplerConfig::epochs`] on the builder's current sampler configuration
    /// (the configuration is where the setting lives): it changes that option only.
    pub fn epochs(mut self, epochs: Option<u64>) -> Self {
        self.config.sampler = self.config.sampler.epochs(epochs);
        self
    }

    /// The shard of this rank.
    pub fn shard(mut self, shard: ShardConfig) -> Self {
        self.config.shard = shard;
        self
    }

    /// Turns length bucketing on. The key defaults to [`Source::item_len`]. A seed given to
    /// [`LoaderBuilder::seed`] (before or after this) replaces `bucket.seed`.
    pub fn bucket(mut self, mut bucket: BucketConfig) -> Self {
        if let Some(seed) = self.seed {
            bucket.seed = seed;
        }
        self.config.bucket = Some(bucket);
        self
    }

    /// The bucketing key, instead of [`Source::item_len`].
    pub fn bucket_key(mut self, key: BucketKey) -> Self {
        self.key = Some(key);
        self
    }

    /// Batching: every option of the batch stage (default [`BatchConfig::default`]: 32 items,
    /// the last short batch of every epoch kept). [`LoaderBuilder::batch_size`] and
    /// [`LoaderBuilder::drop_last`] change one option of it.
    pub fn batch(mut self, batch: BatchConfig) -> Self {
        self.config.batch = batch;
        self
    }

    /// Items per batch, at least 1.
    ///
    /// Shorthand for [`BatchConfig::batch_size`] on the builder's current batch configuration
    /// ([`LoaderBuilder::batch`]): it changes that option only.
    pub fn batch_size(mut self, batch_size: u64) -> Self {
        self.config.batch = self.config.batch.batch_size(batch_size);
        self
    }

    /// Drop the last, short batch of every epoch.
    ///
    /// Shorthand for [`BatchConfig::drop_last`] on the builder's current batch configuration
    /// ([`LoaderBuilder::batch`]): it changes that option only.
    pub fn drop_last(mut self, drop_last: bool) -> Self {
        self.config.batch = self.config.batch.drop_last(drop_last);
        self
    }

    /// Workers, queues, merge, lookahead, gathers in flight, retries and error handling: every
    /// option of the prefetch, set here and only here (default [`PrefetchConfig::default`]: 2
    /// workers, queues of 2, strict merge, 3 tries per batch, stop at a failed batch).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use zrecord::pipeline::{Loader, MemorySource, MergePolicy, PrefetchConfig};
    ///
    /// let source = Arc::new(MemorySource::new(vec![vec![0u8; 4]; 100]));
    /// let builder = Loader::builder(source)
    ///     .batch_size(10)
    ///     .prefetch(PrefetchConfig::default().num_workers(4).merge(MergePolicy::Strict));
    /// assert_eq!(builder.current_config().prefetch.num_workers, 4);
    /// ```
    pub fn prefetch(mut self, prefetch: PrefetchConfig) -> Self {
        self.config.prefetch = prefetch;
        self
    }

    /// Deprecated: sets [`PrefetchConfig::num_workers`] in the builder's current prefetch
    /// configuration; use [`LoaderBuilder::prefetch`].
    #[deprecated(
        note = "use `.prefetch(PrefetchConfig)` and `PrefetchConfig::num_workers`; \
                kept for one release, see CHANGELOG.md"
    )]
    pub fn num_workers(mut self, num_workers: usize) -> Self {
        self.config.prefetch = self.config.prefetch.num_workers(num_workers);
        self
    }

    /// Deprecated: sets [`PrefetchConfig::worker_queue_size`] in the builder's current prefetch
    /// configuration; use [`LoaderBuilder::prefetch`].
    #[deprecated(
        note = "use `.prefetch(PrefetchConfig)` and `PrefetchConfig::worker_queue_size`; \
                kept for one release, see CHANGELOG.md"
    )]
    pub fn worker_queue_size(mut self, size: usize) -> Self {
        self.config.prefetch = self.config.prefetch.worker_queue_size(size);
        self
    }

    /// Deprecated: sets [`PrefetchConfig::consumer_queue_size`] in the builder's current prefetch
    /// configuration; use [`LoaderBuilder::prefetch`].
    #[deprecated(
        note = "use `.prefetch(PrefetchConfig)` and `PrefetchConfig::consumer_queue_size`; \
                kept for one release, see CHANGELOG.md"
    )]
    pub fn consumer_queue_size(mut self, size: usize) -> Self {
        self.config.prefetch = self.config.prefetch.consumer_queue_size(size);
        self
    }

    /// Deprecated: sets [`PrefetchConfig::lookahead`] in the builder's current prefetch
    /// configuration; use [`LoaderBuilder::prefetch`].
    #[deprecated(
        note = "use `.prefetch(PrefetchConfig)` and `PrefetchConfig::lookahead`; \
                kept for one release, see CHANGELOG.md"
    )]
    pub fn lookahead(mut self, batches: usize) -> Self {
        self.config.prefetch = self.config.prefetch.lookahead(batches);
        self
    }

    /// Deprecated: sets [`PrefetchConfig::gathers_in_flight`] in the builder's current prefetch
    /// configuration; use [`LoaderBuilder::prefetch`].
    #[deprecated(
        note = "use `.prefetch(PrefetchConfig)` and `PrefetchConfig::gathers_in_flight`; \
                kept for one release, see CHANGELOG.md"
    )]
    pub fn gathers_in_flight(mut self, gathers: usize) -> Self {
        self.config.prefetch = self.config.prefetch.gathers_in_flight(gathers);
        self
    }

    /// Deprecated: sets [`PrefetchConfig::merge`] in the builder's current prefetch
    /// configuration; use [`LoaderBuilder::prefetch`].
    #[deprecated(note = "use `.prefetch(PrefetchConfig)` and `PrefetchConfig::merge`; \
                kept for one release, see CHANGELOG.md")]
    pub fn merge(mut self, merge: MergePolicy) -> Self {
        self.config.prefetch = self.config.prefetch.merge(merge);
        self
    }

    /// Deprecated: sets [`PrefetchConfig::retry`] in the builder's current prefetch
    /// configuration; use [`LoaderBuilder::prefetch`].
    #[deprecated(note = "use `.prefetch(PrefetchConfig)` and `PrefetchConfig::retry`; \
                kept for one release, see CHANGELOG.md")]
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.config.prefetch = self.config.prefetch.retry(retry);
        self
    }

    /// Deprecated: sets [`PrefetchConfig::on_error`] in the builder's current prefetch
    /// configuration; use [`LoaderBuilder::prefetch`].
    #[deprecated(
        note = "use `.prefetch(PrefetchConfig)` and `PrefetchConfig::on_error`; \
                kept for one release, see CHANGELOG.md"
    )]
    pub fn on_error(mut self, on_error: OnError) -> Self {
        self.config.prefetch = self.config.prefetch.on_error(on_error);
        self
    }

    /// Applies `transform` to every gathered batch, on the worker thread (decode, collate, …).
    pub fn transform<U: Send + 'static>(
        self,
        transform: impl Fn(S::Batch, &IndexBatch) -> Result<U> + Send + Sync + 'static,
    ) -> LoaderBuilder<S, U> {
        LoaderBuilder {
            source: self.source,
            config: self.config,
            key: self.key,
            mix: self.mix,
            seed: self.seed,
            network: self.network,
            stage: self.stage,
            map: self.map,
            transform: Arc::new(transform),
        }
    }

    /// The current configuration.
    pub fn current_config(&self) -> &LoaderConfig {
        &self.config
    }

    /// The mix configuration, if [`LoaderBuilder::mix`] was called.
    pub fn current_mix(&self) -> Option<&MixConfig> {
        self.mix.as_ref()
    }

    /// The index chain this builder's loader runs (see [`IndexChain`]).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for an invalid stage configuration, or a mix whose weights are
    /// not one per part of the source.
    pub fn index_chain(&self) -> Result<IndexChain> {
        self.chain_over(self.base_root()?, self.config.shard)
    }

    /// The root of every full epoch: the sampler, or the mix over the source's parts.
    fn base_root(&self) -> Result<Root> {
        let Some(mix) = &self.mix else {
            let mut sampler = Sampler::new(self.source.len(), self.config.sampler)?;
            sampler.set_network(self.network);
            return Ok(Root::Sampler(sampler));
        };
        let parts = self.source.part_lens();
        if mix.weights.len() != parts.len() {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "mix: {} weights for a source of {} parts: give one weight per part",
                    mix.weights.len(),
                    parts.len()
                ),
            });
        }
        Ok(Root::Mix(Mix::with_network(
            &parts,
            mix.clone(),
            self.network,
        )?))
    }

    /// Shard, bucket and batch over `root`, for `shard`.
    fn chain_over(&self, root: Root, shard: ShardConfig) -> Result<IndexChain> {
        let c = &self.config;
        let shard = Shard::new(root, shard)?;
        Ok(match c.bucket {
            None => IndexChain::Plain(Batcher::new(shard, c.batch)?),
            Some(b) => {
                let key = self
                    .key
                    .clone()
                    .unwrap_or_else(|| BucketKey::item_len(Arc::clone(&self.source)));
                IndexChain::Bucketed(Batcher::new(Bucket::new(shard, b, key)?, c.batch)?)
            }
        })
    }

    /// Runs `f` with what the elastic merge needs to build this builder's chains.
    fn with_spec<R>(&self, f: impl FnOnce(&ChainSpec<'_>) -> Result<R>) -> Result<R> {
        let build = |root: Root, shard: ShardConfig| self.chain_over(root, shard);
        let spec = ChainSpec {
            base: self.base_root()?,
            build: &build,
            batch_size: self.config.batch.batch_size,
            bucket_buffer: self.config.bucket.map(|b| b.buffer_size),
        };
        f(&spec)
    }

    /// The index chain a loader resumed from `state` runs: [`LoaderBuilder::index_chain`], after
    /// the residual epochs of an elastic resume if `state` holds one. Iterating it (with
    /// [`Stage::cursor`](crate::pipeline::Stage::cursor)) and gathering each batch is the sequential baseline of such a loader.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for an invalid stage configuration; [`Error::ResumeMismatch`]
    /// for a residual that does not fit this configuration, or if this builder has a user stage
    /// ([`LoaderBuilder::stage`]) or `state` was taken with one.
    pub fn elastic_chain(&self, state: &LoaderState) -> Result<ElasticChain> {
        self.same_ranks_only(std::slice::from_ref(state))?;
        if let Some(earlier) = self.for_checkpoint(Some(state)) {
            return earlier.elastic_chain(state);
        }
        self.with_spec(|spec| ElasticChain::new(spec, state.elastic.as_ref(), self.config.shard))
    }

    /// Merges the checkpoints of every rank of an earlier run (any number of ranks, each with
    /// any number of workers, each stopped wherever its consumer stopped) into the checkpoint
    /// this builder's rank resumes from: call it on every new rank with the same `states`, each
    /// rank with its own [`LoaderBuilder::shard`], then [`LoaderBuilder::resume`].
    ///
    /// Every item of an epoch some old rank had not finished that no old rank consumed is
    /// delivered exactly once across the new ranks, first; then every later epoch runs in full,
    /// in the order of a fresh loader with the new shard settings from the same seed. The
    /// new ranks' shard settings (total, index, mode, padding, dropping), worker counts and
    /// merge policy may differ from the old ones; every other setting must be the same. See
    /// the elastic-resume section of the [`crate::pipeline`] documentation and `pipeline/elastic.rs` for what happens to bucket buffers and drop settings.
    ///
    /// # Errors
    /// [`Error::ResumeMismatch`], naming the rank and what differs, if the checkpoints are not
    /// one run's ranks (ranks missing or given twice, each named, or two ranks that resumed
    /// from different merges), or one was taken on another generation or length of the source, or
    /// with a configuration that differs from this builder's in anything but the shard
    /// settings (seed, epochs, bucketing, batch size, …), or is damaged; if this builder has a
    /// user stage ([`LoaderBuilder::stage`]) or a checkpoint was taken with one.
    pub fn merge_checkpoints(&self, states: &[LoaderState]) -> Result<LoaderState> {
        self.same_ranks_only(states)?;
        if let Some(earlier) = self.for_checkpoint(states.first()) {
            return earlier.merge_checkpoints(states);
        }
        let header = Header::new(
            self.source.generation(),
            self.source.len(),
            describe(&self.index_chain()?),
        );
        self.with_spec(|spec| {
            checkpoints::merge(
                spec,
                &header,
                states,
                self.config.shard,
                self.config.prefetch.num_workers.max(1),
            )
        })
    }

    /// [`LoaderBuilder::merge_checkpoints`] then [`LoaderBuilder::resume`].
    ///
    /// # Errors
    /// As [`LoaderBuilder::merge_checkpoints`] and [`LoaderBuilder::resume`].
    pub fn resume_elastic(self, states: &[LoaderState]) -> Result<Loader<S, T>> {
        let merged = self.merge_checkpoints(states)?;
        self.resume(&merged)
    }

    /// Starts the loader at the first batch.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for an invalid configuration; [`Error::Io`] if a worker thread
    /// cannot be spawned.
    pub fn build(self) -> Result<Loader<S, T>> {
        self.start(None)
    }

    /// Starts the loader right after the last batch consumed before `state` was taken.
    ///
    /// Prefetched batches that were not consumed are produced again; under
    /// [`MergePolicy::Strict`] the resumed stream is exactly the uninterrupted stream from the
    /// checkpoint on, even with another number of workers. The merge policy, queue sizes, retry
    /// policy, error handling and the transform may differ from the checkpointed loader's;
    /// nothing else may.
    ///
    /// # Errors
    /// [`Error::ResumeMismatch`] if the source's generation or length, or the configuration of
    /// the index chain (sampler, shard, bucket, batch) differ from the checkpoint's, or if a
    /// best-effort checkpoint is resumed with another worker count. A configuration mismatch
    /// names each differing setting, the checkpoint's value against this loader's (e.g.
    /// `shard.total: checkpoint 2, this loader 3`). Otherwise as
    /// [`LoaderBuilder::build`].
    pub fn resume(self, state: &LoaderState) -> Result<Loader<S, T>> {
        self.start(Some(state))
    }

    /// This builder set to run the shuffled permutation `state` was taken with, if that is an
    /// earlier version's (see [`Network`]); `None` if it is this version's already.
    fn for_checkpoint(&self, state: Option<&LoaderState>) -> Option<Self> {
        let earlier = state.is_some_and(|s| balanced_network_in(&s.config));
        (earlier && self.network != Network::Balanced).then(|| {
            let mut b = self.clone();
            b.network = Network::Balanced;
            b
        })
    }

    /// Refuses an elastic merge for a loader with a user stage, or of checkpoints taken by one.
    fn same_ranks_only(&self, states: &[LoaderState]) -> Result<()> {
        let whose = match &self.stage {
            Some(stage) => format!("this loader has user stage {:?}", stage.name()),
            None => {
                let staged = states.iter().enumerate().find_map(|(i, s)| {
                    user_stage_in(&s.config)
                        .or_else(|| s.stage.as_ref().map(|_| "(unnamed)".to_string()))
                        .map(|name| (i, name))
                });
                match staged {
                    Some((_, name)) if states.len() == 1 => {
                        format!("the checkpoint has user stage {name}")
                    }
                    Some((i, name)) => format!("checkpoint {i} has user stage {name}"),
                    None => return Ok(()),
                }
            }
        };
        Err(Error::ResumeMismatch {
            reason: format!(
                "{whose}: a loader with a user stage resumes on the same ranks only (its \
                 stage's state is one rank's stream, which an elastic merge cannot split or \
                 combine)"
            ),
        })
    }

    /// The configuration description of the loader over `chain`: the chain's, then the user
    /// stage's.
    fn describe(&self, chain: &ElasticChain) -> String {
        let mut description = describe(chain);
        if let Some(stage) = &self.stage {
            stage.describe(&mut description);
        }
        description
    }

    fn start(self, resume: Option<&LoaderState>) -> Result<Loader<S, T>> {
        if let Some(earlier) = self.for_checkpoint(resume) {
            return earlier.start(resume);
        }
        if let (Some(stage), Some(state)) = (&self.stage, resume) {
            if state.elastic.is_some() {
                return Err(Error::ResumeMismatch {
                    reason: format!(
                        "the checkpoint comes from an elastic merge, and this loader has user \
                         stage {:?}: a loader with a user stage resumes on the same ranks only",
                        stage.name()
                    ),
                });
            }
        }
        let transform = self.composed_transform();
        let elastic = resume.and_then(|s| s.elastic.clone());
        let chain =
            self.with_spec(|spec| ElasticChain::new(spec, elastic.as_ref(), self.config.shard))?;
        let header = Header::new(
            self.source.generation(),
            self.source.len(),
            self.describe(&chain),
        );
        if let Some(state) = resume {
            header.check(state)?;
        }
        let prefetch = match (&self.stage, resume) {
            (None, None) => LoaderPrefetch::Seekable(Prefetch::new(
                chain,
                Arc::clone(&self.source),
                transform,
                self.config.prefetch,
            )?),
            (None, Some(state)) => {
                if state.stage.is_some() {
                    return Err(Error::ResumeMismatch {
                        reason: "the checkpoint holds a user stage's state, and this loader has \
                                 no user stage"
                            .into(),
                    });
                }
                LoaderPrefetch::Seekable(Prefetch::resume(
                    chain,
                    Arc::clone(&self.source),
                    transform,
                    self.config.prefetch,
                    &state.prefetch,
                )?)
            }
            (Some(stage), resume) => {
                let staged = stage.build(chain.cursor())?;
                let mut prefetch: StagedPrefetch<T> = staged.prefetch_with(
                    Arc::clone(&self.source),
                    self.config.prefetch,
                    transform,
                )?;
                if let Some(state) = resume {
                    let mismatch = |what: String| Error::ResumeMismatch {
                        reason: format!("user stage {:?}: {what}", stage.name()),
                    };
                    let saved = state
                        .stage
                        .clone()
                        .ok_or_else(|| mismatch("the checkpoint holds no state for it".into()))?;
                    let saved = serde_json::from_value(saved).map_err(|e| {
                        mismatch(format!("the checkpoint's prefetch state is malformed: {e}"))
                    })?;
                    prefetch.restore(saved)?;
                }
                LoaderPrefetch::Staged(prefetch)
            }
        };
        Ok(Loader {
            source: self.source,
            header,
            elastic,
            prefetch,
        })
    }
}

/// The prefetch of a [`Loader`]: the seekable one over the index chain, or the stream one over
/// a user stage.
enum LoaderPrefetch<T> {
    Seekable(Prefetch<T>),
    Staged(StagedPrefetch<T>),
}

impl<T> fmt::Debug for LoaderPrefetch<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Seekable(p) => p.fmt(f),
            Self::Staged(p) => p.fmt(f),
        }
    }
}

/// The data loader: an async stream of gathered batches with a resumable checkpoint.
///
/// `Send` (and `Sync` for a `Sync` batch type); usable from any multi-thread tokio runtime: the
/// gathers run on the loader's own threads, never on a runtime worker.
///
/// ```no_run
/// # async fn train() -> zrecord::Result<()> {
/// use std::sync::Arc;
/// use zrecord::pipeline::{Loader, PrefetchConfig};
///
/// let dataset = Arc::new(zrecord::Dataset::open("train")?);
/// let mut loader = Loader::builder(dataset)
///     .seed(42)
///     .batch_size(64)
///     .prefetch(PrefetchConfig::default().num_workers(4))
///     .build()?;
/// while let Some(batch) = loader.next().await {
///     // A read that failed on every retry surfaces here, in its place; the stream then ends
///     // and `loader.state()` still points at that batch.
///     let batch = batch?;
///     let _records: &zrecord::Batch = &batch.data;
///     let _checkpoint = serde_json::to_string(&loader.state()).ok();
/// }
/// # Ok(()) }
/// ```
#[must_use = "a loader does nothing unless polled"]
pub struct Loader<S: Source, T = <S as Source>::Batch> {
    source: Arc<S>,
    header: Header,
    /// The residual this loader ran first, recorded in its checkpoints.
    elastic: Option<ElasticState>,
    prefetch: LoaderPrefetch<T>,
}

// Nothing in a `Loader` is structurally pinned.
impl<S: Source, T> Unpin for Loader<S, T> {}

impl<S: Source, T> fmt::Debug for Loader<S, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Loader")
            .field("config", &self.header.config)
            .field("generation", &self.header.generation)
            .field("prefetch", &self.prefetch)
            .finish_non_exhaustive()
    }
}

impl<S: Source> Loader<S> {
    /// A builder over `source`; see [`LoaderBuilder`].
    pub fn builder(source: Arc<S>) -> LoaderBuilder<S> {
        LoaderBuilder::new(source)
    }
}

impl<S: Source, T: Send + 'static> Loader<S, T> {
    /// Resumes `builder`'s loader from `state`; the same as [`LoaderBuilder::resume`].
    ///
    /// # Errors
    /// As [`LoaderBuilder::resume`].
    pub fn resume(builder: LoaderBuilder<S, T>, state: &LoaderState) -> Result<Self> {
        builder.resume(state)
    }
}

impl<S: Source, T> Loader<S, T> {
    /// The next batch, `None` after the last one.
    ///
    /// A batch that could not be read (a corrupt record, an I/O error, a failing transform) is
    /// first tried again on the worker's thread as [`PrefetchConfig::retry`] says (3 tries in all
    /// by default; a panic, corruption, an index out of range and a failed object-store request
    /// are not retried). If every try fails, it is `Some(Err(..))` in the
    /// place the batch would have had, and then:
    ///
    /// - under [`OnError::Stop`] (the default) the loader ends: every later call returns
    ///   `None`, and [`Loader::state`] still points at the failed batch, so a loader resumed
    ///   from it tries that batch first (after a repair, the resumed stream is exactly the
    ///   uninterrupted one);
    /// - under [`OnError::Skip`] the loader goes on with the next batch, and the failed batch
    ///   counts as consumed: a resume does not try it again.
    ///
    /// # Cancel safety
    /// Cancel safe: a batch is taken off the loader's queues only by the poll that returns it,
    /// so dropping the future (e.g. in `tokio::select!`) loses no batch, and the checkpoint
    /// ([`Loader::state`]) does not move.
    pub async fn next(&mut self) -> Option<Result<LoaderBatch<T>>> {
        StreamExt::next(self).await
    }

    /// The checkpoint after the last batch returned by [`Loader::next`] (or the stream); a
    /// batch that failed under [`OnError::Stop`] is not counted, so the checkpoint points at it.
    pub fn state(&self) -> LoaderState {
        let (prefetch, stage) = match &self.prefetch {
            LoaderPrefetch::Seekable(p) => (p.state(), None),
            // The stage form keeps its state in `stage`; `prefetch` is an empty state (no
            // seekable workers). A prefetch state of JSON values and integers always converts.
            LoaderPrefetch::Staged(p) => (
                PrefetchState {
                    num_workers: 0,
                    base: 0,
                    next_worker: 0,
                    workers: Vec::new(),
                },
                Some(serde_json::to_value(p.checkpoint()).unwrap_or_default()),
            ),
        };
        LoaderState {
            version: LOADER_STATE_VERSION,
            generation: self.header.generation,
            source_len: self.header.source_len,
            fingerprint: self.header.fingerprint,
            config: self.header.config.clone(),
            prefetch,
            elastic: self.elastic.clone(),
            stage,
        }
    }

    /// The source.
    pub fn source(&self) -> &Arc<S> {
        &self.source
    }

    /// The description of the index chain's configuration, as recorded in checkpoints.
    pub fn config_description(&self) -> &str {
        &self.header.config
    }

    /// Diagnostic: see [`Prefetch::max_observed_lead`].
    pub fn max_observed_lead(&self) -> u64 {
        match &self.prefetch {
            LoaderPrefetch::Seekable(p) => p.max_observed_lead(),
            LoaderPrefetch::Staged(p) => p.max_observed_lead(),
        }
    }

    /// A cheap snapshot of what the loader is doing: queue depths, gathers and records in
    /// flight, the current lead, time per stage, the gather latency histogram, and the time the
    /// consumer waited for batches (the loader is the bottleneck) against the time workers
    /// waited for room (the consumer is). See [`LoaderStats`].
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use zrecord::pipeline::{Loader, MemorySource};
    /// # futures::executor::block_on(async {
    /// let source = Arc::new(MemorySource::new(vec![vec![1u8; 16]; 1000]));
    /// let mut loader = Loader::builder(source).batch_size(100).build()?;
    /// while let Some(batch) = loader.next().await {
    ///     batch?;
    /// }
    /// let stats = loader.stats();
    /// assert_eq!((stats.batches, stats.records), (10, 1000));
    /// println!("waited {:?} for batches; p99 gather below {:?}", stats.consumer_wait, stats.gather_quantile(0.99));
    /// # Ok::<(), zrecord::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn stats(&self) -> LoaderStats {
        match &self.prefetch {
            LoaderPrefetch::Seekable(p) => p.stats(),
            LoaderPrefetch::Staged(p) => p.stats(),
        }
    }

    /// Stops the workers and waits until every worker thread has exited and released the
    /// source. Dropping the loader stops them too, without waiting.
    ///
    /// # Cancel safety
    /// Dropping the future before it completes leaves the workers stopping on their own.
    pub async fn shutdown(self) {
        match self.prefetch {
            LoaderPrefetch::Seekable(p) => p.shutdown().await,
            LoaderPrefetch::Staged(p) => p.shutdown().await,
        }
    }
}

impl<S: Source, T> Stream for Loader<S, T> {
    type Item = Result<LoaderBatch<T>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match &mut self.get_mut().prefetch {
            LoaderPrefetch::Seekable(p) => Pin::new(p).poll_next(cx),
            LoaderPrefetch::Staged(p) => Pin::new(p).poll_next(cx),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.prefetch {
            LoaderPrefetch::Seekable(p) => p.size_hint(),
            LoaderPrefetch::Staged(p) => p.size_hint(),
        }
    }
}

impl<S: Source, T> FusedStream for Loader<S, T> {
    fn is_terminated(&self) -> bool {
        match &self.prefetch {
            LoaderPrefetch::Seekable(p) => p.is_terminated(),
            LoaderPrefetch::Staged(p) => p.is_terminated(),
        }
    }
}
