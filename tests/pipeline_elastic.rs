//! Elastic resume delivers every item exactly once: N ranks (each with its own worker count and
//! merge policy, each stopped at its own place) resumed by M ranks, and those resumed again by K
//! ranks, deliver every root position of every epoch exactly once in all, for any world sizes
//! 1–8, workers 1–4, with and without bucketing, padding or contiguous shards, over the sampler
//! or a mix of 1–4 parts with random weights (every exhaustion policy). From the merge's
//! resume epoch on, every new rank's batches are exactly a fresh M-rank loader's. A new rank's
//! own checkpoint resumes exactly (strict merge) at any split point.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::executor::block_on;
use futures::{Stream, StreamExt};

#[path = "support/mod.rs"]
mod support;

use support::{count, Rng};
use zrecord::pipeline::{
    BucketConfig, Exhausted, IndexBatch, Loader, LoaderBuilder, LoaderState, MemorySource,
    MergePolicy, Mix, MixConfig, PrefetchConfig, SamplerConfig, SamplerMode, ShardConfig,
    ShardMode, Source, Stage,
};

/// Records in memory, seen as consecutive parts (what a mix weights).
struct Parts {
    records: MemorySource,
    parts: Vec<u64>,
}

impl Source for Parts {
    type Batch = Vec<Vec<u8>>;

    fn len(&self) -> u64 {
        self.records.len()
    }

    fn item_len(&self, index: u64) -> zrecord::Result<u64> {
        self.records.item_len(index)
    }

    fn gather(&self, indices: &[u64]) -> zrecord::Result<Self::Batch> {
        self.records.gather(indices)
    }

    fn part_lens(&self) -> Vec<u64> {
        self.parts.clone()
    }
}

/// One random configuration.
#[derive(Debug, Clone)]
struct Case {
    n: u64,
    epochs: u64,
    seed: u64,
    batch: u64,
    bucket: Option<(u64, u64)>,
    mode: ShardMode,
    pad: bool,
    sampler: SamplerMode,
    /// The first run's shards drop their remainder (its rank 0 then stops before its first
    /// batch, so no epoch is closed and the dropped items are in the residual).
    first_drops: bool,
    /// A mix of 1–4 parts with random weights, instead of the sampler.
    mix: Option<(Vec<u64>, MixConfig)>,
}

impl Case {
    fn random(rng: &mut Rng) -> Self {
        let batch = 1 + rng.below(5);
        Self {
            n: rng.below(90),
            epochs: 1 + rng.below(3),
            seed: rng.next(),
            batch,
            bucket: (rng.below(2) == 0).then(|| (1 + rng.below(12), 1 + rng.below(4))),
            mode: if rng.below(3) == 0 {
                ShardMode::Contiguous
            } else {
                ShardMode::Interleaved
            },
            pad: rng.below(3) == 0,
            sampler: if rng.below(4) == 0 {
                SamplerMode::Random
            } else {
                SamplerMode::Shuffled
            },
            first_drops: rng.below(4) == 0,
            mix: None,
        }
        .with_mix(rng)
    }

    fn with_mix(mut self, rng: &mut Rng) -> Self {
        if rng.below(2) == 0 {
            return self;
        }
        let k = 1 + rng.below(4) as usize;
        let mut cuts: Vec<u64> = (0..k - 1).map(|_| rng.below(self.n + 1)).collect();
        cuts.sort_unstable();
        let mut parts = Vec::new();
        let mut at = 0;
        for c in cuts.into_iter().chain([self.n]) {
            parts.push(c - at);
            at = c;
        }
        let weights = (0..k)
            .map(|_| 0.05 + rng.below(100) as f64 / 10.0)
            .collect();
        let exhausted =
            [Exhausted::Restart, Exhausted::Stop, Exhausted::Drop][rng.below(3) as usize];
        let config = MixConfig::new(weights)
            .exhausted(exhausted)
            .seed(self.seed)
            .epochs(Some(self.epochs))
            .part_epochs(1 + rng.below(2));
        self.mix = Some((parts, config));
        self
    }

    /// Every root position: `(epoch, position)` for each epoch of the sampler or the mix.
    fn positions(&self) -> Vec<(u64, u64)> {
        let (epochs, len) = match &self.mix {
            None => (self.epochs, self.n),
            Some((parts, config)) => {
                let mix = Mix::new(parts, config.clone()).unwrap();
                (mix.epochs().unwrap(), mix.epoch_len())
            }
        };
        (0..epochs)
            .flat_map(|e| (0..len).map(move |p| (e, p)))
            .collect()
    }

    fn source(&self) -> Arc<Parts> {
        Arc::new(Parts {
            records: MemorySource::new(
                (0..self.n)
                    .map(|i| vec![i as u8; 1 + ((i * 7) % 5) as usize])
                    .collect(),
            ),
            parts: match &self.mix {
                Some((parts, _)) => parts.clone(),
                None => vec![self.n],
            },
        })
    }

    fn builder(
        &self,
        src: &Arc<Parts>,
        total: u64,
        rank: u64,
        workers: usize,
        merge: MergePolicy,
    ) -> LoaderBuilder<Parts> {
        self.builder_with(src, ShardConfig::new(total, rank), workers, merge)
    }

    fn builder_with(
        &self,
        src: &Arc<Parts>,
        shard: ShardConfig,
        workers: usize,
        merge: MergePolicy,
    ) -> LoaderBuilder<Parts> {
        let mut b = LoaderBuilder::new(Arc::clone(src))
            .sampler(
                SamplerConfig::default()
                    .mode(self.sampler)
                    .seed(self.seed)
                    .epochs(Some(self.epochs)),
            )
            .shard(shard.mode(self.mode).pad_to_equal(self.pad))
            .batch_size(self.batch)
            .prefetch(
                PrefetchConfig::default()
                    .num_workers(workers)
                    .worker_queue_size(2)
                    .merge(merge),
            );
        if let Some((_, config)) = &self.mix {
            b = b.mix(config.clone());
        }
        if let Some((buffer, pack)) = self.bucket {
            b = b.bucket(
                BucketConfig::default()
                    .buffer_size(buffer)
                    .pack_size(pack)
                    .seed(self.seed),
            );
        }
        b
    }
}

fn policy(rng: &mut Rng) -> MergePolicy {
    if rng.below(3) == 0 {
        MergePolicy::BestEffort {
            max_lead: 1 + rng.below(3),
            max_skips_per_round: rng.below(3),
        }
    } else {
        MergePolicy::Strict
    }
}

/// Takes up to `k` batches, then the checkpoint (through JSON).
fn take(mut loader: Loader<Parts>, k: u64) -> (Vec<IndexBatch>, LoaderState) {
    let mut got = Vec::new();
    for _ in 0..k {
        match block_on(loader.next()) {
            Some(b) => got.push(b.unwrap().batch),
            None => break,
        }
    }
    let json = serde_json::to_string(&loader.state()).unwrap();
    (got, serde_json::from_str(&json).unwrap())
}

fn drain(loader: Loader<Parts>) -> Vec<IndexBatch> {
    block_on(loader.map(|b| b.unwrap().batch).collect())
}

/// Every root position of every epoch, delivered exactly once (padding aside), and every
/// record's bytes are the source's.
fn check_exactly_once(case: &Case, delivered: &[IndexBatch], what: &str) {
    let mut seen: BTreeMap<(u64, u64), u32> = BTreeMap::new();
    for b in delivered {
        for s in b.samples.iter().filter(|s| !s.padded) {
            *seen.entry((s.epoch, s.position)).or_default() += 1;
        }
    }
    for (e, p) in case.positions() {
        assert_eq!(
            seen.remove(&(e, p)).unwrap_or(0),
            1,
            "{what}: epoch {e} position {p} delivered a wrong number of times; {case:?}"
        );
    }
    assert!(
        seen.is_empty(),
        "{what}: unexpected items {seen:?}; {case:?}"
    );
}

/// Stops every rank of `states`'s run at a random place; returns what they delivered and their
/// checkpoints.
fn stop_ranks(
    rng: &mut Rng,
    case: &Case,
    src: &Arc<Parts>,
    total: u64,
    from: Option<&[LoaderState]>,
) -> (Vec<IndexBatch>, Vec<LoaderState>) {
    let mut delivered = Vec::new();
    let mut states = Vec::new();
    for rank in 0..total {
        let drops = from.is_none() && case.first_drops;
        let shard = ShardConfig::new(total, rank).drop_remainder(drops);
        let workers = 1 + rng.below(4) as usize;
        let builder = case.builder_with(src, shard, workers, policy(rng));
        let builder = if drops {
            builder.shard(shard.mode(case.mode))
        } else {
            builder
        };
        let loader = match from {
            None => builder.build().unwrap(),
            Some(old) => builder.resume_elastic(old).unwrap(),
        };
        let len = loader.size_hint().0 as u64;
        let k = if drops && rank == 0 {
            0
        } else {
            rng.below(len + 2)
        };
        let (got, state) = take(loader, k);
        delivered.extend(got);
        states.push(state);
    }
    // Ranks hand in their checkpoints in any order.
    for i in (1..states.len()).rev() {
        states.swap(i, rng.below(i as u64 + 1) as usize);
    }
    (delivered, states)
}

#[test]
fn every_item_exactly_once_through_world_size_changes() {
    let cases = count("ZRECORD_ELASTIC_CASES", 60, 400);
    for c in 0..cases {
        let mut rng = Rng(0xe1a5_71c0 ^ c);
        let case = Case::random(&mut rng);
        let src = case.source();
        let what = format!("case {c}");
        let n = 1 + rng.below(8);
        let (mut delivered, states) = stop_ranks(&mut rng, &case, &src, n, None);
        // A second change of world size, before the first residual is done.
        let (m, states) = if rng.below(3) == 0 {
            let m = 1 + rng.below(8);
            let (got, states) = stop_ranks(&mut rng, &case, &src, m, Some(&states));
            delivered.extend(got);
            (m, states)
        } else {
            (n, states)
        };
        let k = 1 + rng.below(8);
        for rank in 0..k {
            let builder = case.builder(&src, k, rank, 1 + rng.below(4) as usize, policy(&mut rng));
            delivered.extend(drain(builder.resume_elastic(&states).unwrap()));
        }
        check_exactly_once(
            &case,
            &delivered,
            &format!("{what} ({n} → {m} → {k} ranks)"),
        );
    }
}

#[test]
fn later_epochs_are_a_fresh_runs_and_new_checkpoints_resume_exactly() {
    let cases = count("ZRECORD_ELASTIC_CASES", 60, 400);
    let (mut with_residual, mut with_mask) = (0u64, 0u64);
    for c in 0..cases {
        let mut rng = Rng(0x0fe5_4e00 ^ c);
        let case = Case::random(&mut rng);
        let src = case.source();
        let n = 1 + rng.below(8);
        let (_, states) = stop_ranks(&mut rng, &case, &src, n, None);
        let m = 1 + rng.below(8);
        for rank in 0..m {
            let builder = case.builder(
                &src,
                m,
                rank,
                1 + rng.below(4) as usize,
                MergePolicy::Strict,
            );
            let merged = builder.merge_checkpoints(&states).unwrap();
            let elastic = merged.elastic.as_ref().unwrap();
            let resume_epoch = elastic.resume_epoch;
            with_residual += u64::from(!elastic.residual.is_empty());
            with_mask += u64::from(
                elastic
                    .residual
                    .iter()
                    .flat_map(|r| r.levels.iter().flatten())
                    .any(|run| run.mask.is_some()),
            );
            let whole = drain(builder.resume(&merged).unwrap());
            // From the resume epoch on: a fresh M-rank loader's batches.
            let fresh: Vec<IndexBatch> = drain(
                case.builder(&src, m, rank, 1, MergePolicy::Strict)
                    .build()
                    .unwrap(),
            )
            .into_iter()
            .filter(|b| b.epoch >= resume_epoch)
            .collect();
            let later: Vec<IndexBatch> = whole
                .iter()
                .skip_while(|b| b.epoch < resume_epoch)
                .cloned()
                .collect();
            assert_eq!(
                later, fresh,
                "case {c}: rank {rank} of {m} after epoch {resume_epoch}"
            );
            // The sequential baseline is the same stream.
            let chain = case
                .builder(&src, m, rank, 1, MergePolicy::Strict)
                .elastic_chain(&merged)
                .unwrap();
            let sequential: Vec<IndexBatch> = zrecord::pipeline::Stage::cursor(chain)
                .into_iter()
                .map(|b| b.unwrap())
                .collect();
            assert_eq!(whole, sequential, "case {c}: rank {rank} of {m}");
            // Split anywhere (everywhere in short streams), resumed with another worker
            // count: the same stream.
            let n = whole.len() as u64;
            let points: Vec<u64> = if n <= 24 {
                (0..=n).collect()
            } else {
                (0..6).map(|_| rng.below(n + 1)).collect()
            };
            for at in points {
                let (mut first, state) = take(
                    case.builder(
                        &src,
                        m,
                        rank,
                        1 + rng.below(4) as usize,
                        MergePolicy::Strict,
                    )
                    .resume(&merged)
                    .unwrap(),
                    at,
                );
                first.extend(drain(
                    case.builder(
                        &src,
                        m,
                        rank,
                        1 + rng.below(4) as usize,
                        MergePolicy::Strict,
                    )
                    .resume(&state)
                    .unwrap(),
                ));
                assert_eq!(first, whole, "case {c}: rank {rank} of {m} split at {at}");
            }
        }
    }
    // The cases exercise what they claim to: residuals, and scattered consumption in them.
    assert!(
        with_residual > cases,
        "only {with_residual} merges left a residual"
    );
    assert!(with_mask > 0, "no merge left a scattered window");
}

/// The worked example of docs/ARCHITECTURE.md ("Elastic resume"): 20 records in order, 4 ranks
/// stopped after 2, 1, 1 and 0 batches of 2, resumed as 3 ranks.
#[test]
fn worked_example_of_the_architecture_doc() {
    let src = Arc::new(Parts {
        records: MemorySource::new((0..20u8).map(|i| vec![i]).collect()),
        parts: vec![20],
    });
    let b = |total, rank| {
        LoaderBuilder::new(Arc::clone(&src))
            .sampler(
                SamplerConfig::default()
                    .mode(SamplerMode::Sequential)
                    .epochs(Some(2)),
            )
            .shard(ShardConfig::new(total, rank))
            .batch_size(2)
    };
    let indices = |batches: &[IndexBatch]| -> Vec<Vec<u64>> {
        batches.iter().map(IndexBatch::indices).collect()
    };
    let mut states = Vec::new();
    let mut old = Vec::new();
    for (rank, k) in [(0, 2), (1, 1), (2, 1), (3, 0)] {
        let (got, state) = take(b(4, rank).build().unwrap(), k);
        old.push(indices(&got));
        states.push(state);
    }
    assert_eq!(
        old,
        vec![
            vec![vec![0, 4], vec![8, 12]],
            vec![vec![1, 5]],
            vec![vec![2, 6]],
            vec![]
        ]
    );
    let merged = b(3, 0).merge_checkpoints(&states).unwrap();
    let elastic = merged.elastic.as_ref().unwrap();
    assert_eq!(elastic.resume_epoch, 1);
    assert_eq!(
        serde_json::to_string(&elastic.residual).unwrap(),
        r#"[{"epoch":0,"levels":[[{"first":16,"step":4,"count":1},{"first":9,"step":4,"count":3},{"first":10,"step":4,"count":3},{"first":3,"step":4,"count":5}]]}]"#
    );
    let new: Vec<Vec<Vec<u64>>> = (0..3)
        .map(|rank| indices(&drain(b(3, rank).resume_elastic(&states).unwrap())))
        .collect();
    assert_eq!(
        new,
        vec![
            vec![
                vec![16, 17],
                vec![18, 11],
                vec![0, 3],
                vec![6, 9],
                vec![12, 15],
                vec![18]
            ],
            vec![
                vec![9, 10],
                vec![3, 15],
                vec![1, 4],
                vec![7, 10],
                vec![13, 16],
                vec![19]
            ],
            vec![
                vec![13, 14],
                vec![7, 19],
                vec![2, 5],
                vec![8, 11],
                vec![14, 17]
            ],
        ]
    );
}
