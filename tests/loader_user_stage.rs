//! A loader with a user stage (`LoaderBuilder::stage`) is its plain model: the index chain's
//! batches through the same function, each gathered; a checkpoint after any batch resumes with
//! exactly the rest (strict merge, any worker count) or with the rest as a set (best effort),
//! plain, bucketed or mixed; a resume that changes, adds or drops the stage, an elastic merge,
//! and a damaged stage state are `ResumeMismatch`, never a panic.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::cell::Cell;
use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll};

use futures::executor::block_on;
use futures::stream::Stream;
use zrecord::pipeline::{
    BucketConfig, Checkpoint, CheckpointExt, Concat, Cursor, ElasticChain, IndexBatch, Loader,
    LoaderBuilder, LoaderState, MemorySource, MergePolicy, MixConfig, PrefetchConfig,
    SamplerConfig, SamplerMode, ShardConfig, Source, Stage,
};
use zrecord::Error;

type Src = Concat<MemorySource>;

/// (epoch, position, indices, records)
type Item = (u64, u64, Vec<u64>, Vec<Vec<u8>>);

/// Two parts (so a mix has something to mix), records of varying length (so a bucket sorts).
fn source() -> Arc<Src> {
    let part = |p: u8, n: u8| {
        Arc::new(MemorySource::new(
            (0..n)
                .map(|i| vec![p.wrapping_mul(64).wrapping_add(i); usize::from(i % 5)])
                .collect(),
        ))
    };
    Arc::new(Concat::new(vec![part(0, 29), part(1, 12)]).unwrap())
}

/// The filter of the stage: drops about a third of the batches.
fn keep(b: &IndexBatch) -> bool {
    (b.epoch * 7 + b.position) % 3 != 1
}

/// The map of the stage: reverses every batch, and drops the last sample of those at an odd
/// position (when that leaves one).
fn change(mut b: IndexBatch) -> zrecord::Result<IndexBatch> {
    b.samples.reverse();
    if b.position % 2 == 1 && b.samples.len() > 1 {
        b.samples.pop();
    }
    Ok(b)
}

fn stage(chain: Cursor<ElasticChain>) -> impl Checkpoint<Item = zrecord::Result<IndexBatch>> {
    chain.filter_items(keep).map_items(change)
}

/// The loaders under test, without their stage: plain, sharded and bucketed, mixed.
fn cases(src: &Arc<Src>) -> Vec<(&'static str, LoaderBuilder<Src>)> {
    let base = || {
        Loader::builder(Arc::clone(src)).sampler(
            SamplerConfig::default()
                .mode(SamplerMode::Shuffled)
                .seed(5)
                .epochs(Some(2)),
        )
    };
    vec![
        ("plain", base().batch_size(4)),
        (
            "sharded and bucketed",
            base()
                .shard(ShardConfig::new(2, 1))
                .bucket(BucketConfig::default().buffer_size(7).pack_size(3))
                .batch_size(3),
        ),
        (
            "mixed",
            base()
                .mix(
                    MixConfig::new(vec![1.0, 2.0])
                        .epochs(Some(2))
                        .epoch_len(Some(30)),
                )
                .batch_size(4),
        ),
    ]
}

fn workers(b: LoaderBuilder<Src>, n: usize, merge: MergePolicy) -> LoaderBuilder<Src> {
    b.prefetch(
        PrefetchConfig::default()
            .num_workers(n)
            .worker_queue_size(2)
            .merge(merge),
    )
}

fn best_effort() -> MergePolicy {
    MergePolicy::BestEffort {
        max_lead: 2,
        max_skips_per_round: 1,
    }
}

/// The plain model: the index chain's batches, filtered and changed, each gathered.
fn model(b: &LoaderBuilder<Src>, src: &Src) -> Vec<Item> {
    b.index_chain()
        .unwrap()
        .cursor()
        .into_iter()
        .map(Result::unwrap)
        .filter(keep)
        .map(|b| change(b).unwrap())
        .map(|b| {
            let data = src.gather(&b.indices()).unwrap();
            (b.epoch, b.position, b.indices(), data)
        })
        .collect()
}

fn take(loader: &mut Loader<Src>, k: usize) -> Vec<Item> {
    (0..k)
        .map_while(|_| block_on(loader.next()))
        .map(|b| {
            let b = b.unwrap();
            (b.epoch(), b.position(), b.indices(), b.data)
        })
        .collect()
}

fn rest(loader: &mut Loader<Src>) -> Vec<Item> {
    take(loader, usize::MAX)
}

/// `state` through JSON, as a checkpoint file holds it.
fn through_json(state: &LoaderState) -> LoaderState {
    serde_json::from_str(&serde_json::to_string(state).unwrap()).unwrap()
}

fn mismatch(r: zrecord::Result<impl std::fmt::Debug>) -> String {
    match r {
        Err(Error::ResumeMismatch { reason }) => reason,
        other => panic!("expected ResumeMismatch, got {other:?}"),
    }
}

#[test]
fn yields_the_plain_model_with_any_worker_count() {
    let src = source();
    for (case, b) in cases(&src) {
        let expected = model(&b, &src);
        assert!(expected.len() >= 8, "{case}: {} batches", expected.len());
        for n in 1..=3 {
            let mut loader = workers(b.clone(), n, MergePolicy::Strict)
                .stage("filter-map", stage)
                .build()
                .unwrap();
            assert_eq!(rest(&mut loader), expected, "{case}, {n} workers");
        }
    }
}

#[test]
fn strict_checkpoints_resume_with_exactly_the_rest() {
    let src = source();
    for (case, b) in cases(&src) {
        let expected = model(&b, &src);
        for n in 1..=3 {
            let m = n % 3 + 1;
            let staged = |w| workers(b.clone(), w, MergePolicy::Strict).stage("filter-map", stage);
            for k in 0..=expected.len() {
                let mut loader = staged(n).build().unwrap();
                assert_eq!(take(&mut loader, k), expected[..k], "{case}, {n} workers");
                let state = through_json(&loader.state());
                drop(loader);
                let mut resumed = staged(m).resume(&state).unwrap();
                assert_eq!(
                    rest(&mut resumed),
                    expected[k..],
                    "{case}: {n} workers, resumed with {m} after batch {k}"
                );
            }
        }
    }
}

fn counts(items: impl IntoIterator<Item = Item>) -> BTreeMap<Item, usize> {
    let mut c = BTreeMap::new();
    for i in items {
        *c.entry(i).or_default() += 1;
    }
    c
}

#[test]
fn best_effort_checkpoints_lose_and_repeat_nothing() {
    let src = source();
    for (case, b) in cases(&src) {
        let expected = counts(model(&b, &src));
        let len: usize = expected.values().sum();
        // The gathers of some batches take longer, so the merge takes batches out of order.
        let slow = |b: LoaderBuilder<Src>| {
            b.transform(|data: Vec<Vec<u8>>, ib: &IndexBatch| {
                let spin = ib.indices().iter().sum::<u64>() % 7 * 200_000;
                let mut x = spin;
                for _ in 0..spin {
                    x = std::hint::black_box(x.rotate_left(3) ^ 0x5bd1);
                }
                Ok(data)
            })
        };
        for n in 1..=3 {
            for (k, resume_merge) in [
                (0, best_effort()),
                (1, MergePolicy::Strict),
                (len / 3, best_effort()),
                (len / 2, MergePolicy::Strict),
                (len - 1, best_effort()),
                (len, best_effort()),
            ] {
                let m = 4 - n;
                let mut loader = slow(workers(b.clone(), n, best_effort()))
                    .stage("filter-map", stage)
                    .build()
                    .unwrap();
                let mut got: Vec<Item> = (0..k)
                    .map(|_| {
                        let b = block_on(loader.next()).unwrap().unwrap();
                        (b.epoch(), b.position(), b.indices(), b.data)
                    })
                    .collect();
                let state = through_json(&loader.state());
                drop(loader);
                let mut resumed = slow(workers(b.clone(), m, resume_merge))
                    .stage("filter-map", stage)
                    .resume(&state)
                    .unwrap();
                while let Some(b) = block_on(resumed.next()) {
                    let b = b.unwrap();
                    got.push((b.epoch(), b.position(), b.indices(), b.data));
                }
                assert_eq!(
                    counts(got),
                    expected,
                    "{case}: {n} workers, best effort, resumed after {k} batches with {m} \
                     workers, {resume_merge:?}"
                );
            }
        }
    }
}

/// Holds back the gathers that wait on it until it opens.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
}

impl Gate {
    fn wait(&self) {
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.cv.wait(open).unwrap();
        }
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }
}

#[test]
fn a_checkpoint_after_out_of_order_batches_resumes_with_the_rest_once() {
    let src = source();
    for (case, b) in cases(&src) {
        let expected = model(&b, &src);
        let first = (expected[0].0, expected[0].1);
        // The stage's first batch (worker 0's) cannot finish before the test has consumed two
        // batches: the only ones ready meanwhile are worker 1's.
        let gate = Arc::new(Gate::default());
        let held = Arc::clone(&gate);
        let merge = MergePolicy::BestEffort {
            max_lead: 3,
            max_skips_per_round: 3,
        };
        let mut loader = workers(b.clone(), 2, merge)
            .transform(move |data: Vec<Vec<u8>>, ib: &IndexBatch| {
                if (ib.epoch, ib.position) == first {
                    held.wait();
                }
                Ok(data)
            })
            .stage("filter-map", stage)
            .build()
            .unwrap();
        let got = take(&mut loader, 2);
        assert_eq!(
            got[..],
            [expected[1].clone(), expected[3].clone()],
            "{case}"
        );
        let state = through_json(&loader.state());
        assert_eq!(
            state.stage.as_ref().unwrap()["consumed_ahead"],
            serde_json::json!([1, 3]),
            "{case}"
        );
        gate.open();
        drop(loader);
        for (n, merge) in [
            (1, MergePolicy::Strict),
            (3, MergePolicy::Strict),
            (2, merge),
        ] {
            let mut resumed = workers(b.clone(), n, merge)
                .stage("filter-map", stage)
                .resume(&state)
                .unwrap();
            let rest = rest(&mut resumed);
            if merge == MergePolicy::Strict {
                let mut left = expected.clone();
                left.remove(3);
                left.remove(1);
                assert_eq!(rest, left, "{case}: {n} workers, strict");
            }
            let mut all = got.clone();
            all.extend(rest);
            assert_eq!(
                counts(all),
                counts(expected.clone()),
                "{case}: {n} workers, {merge:?}: every batch exactly once"
            );
        }
    }
}

#[test]
fn stats_count_batches_and_records() {
    let src = source();
    for (case, b) in cases(&src) {
        let expected = model(&b, &src);
        let records: usize = expected.iter().map(|(_, _, i, _)| i.len()).sum();
        let mut loader = workers(b, 2, MergePolicy::Strict)
            .stage("filter-map", stage)
            .build()
            .unwrap();
        let half = take(&mut loader, expected.len() / 2);
        let s = loader.stats();
        assert_eq!(s.batches, half.len() as u64, "{case}");
        assert_eq!(
            s.records,
            half.iter().map(|(_, _, i, _)| i.len() as u64).sum::<u64>(),
            "{case}"
        );
        rest(&mut loader);
        let s = loader.stats();
        assert_eq!(
            (s.batches, s.records),
            (expected.len() as u64, records as u64),
            "{case}"
        );
        assert!(s.batches_produced >= s.batches, "{case}");
        block_on(loader.shutdown());
    }
}

#[test]
fn another_stage_or_none_is_a_resume_mismatch() {
    let src = source();
    let (_, b) = cases(&src).swap_remove(0);
    let b = workers(b, 2, MergePolicy::Strict);
    let staged = b.clone().stage("filter-map", stage);
    let mut loader = staged.clone().build().unwrap();
    take(&mut loader, 3);
    let state = through_json(&loader.state());
    assert!(state.config.ends_with(" | stage(name=\"filter-map\")"));
    assert!(state.stage.is_some());

    let other = mismatch(b.clone().stage("filter-only", stage).resume(&state));
    assert!(
        other.contains("stage.name: checkpoint \"filter-map\", this loader \"filter-only\""),
        "{other}"
    );
    let none = mismatch(b.clone().resume(&state));
    assert!(
        none.contains("stage: checkpoint on (name=\"filter-map\"), this loader off"),
        "{none}"
    );

    let mut plain = b.clone().build().unwrap();
    take(&mut plain, 3);
    let plain_state = through_json(&plain.state());
    assert!(plain_state.stage.is_none());
    assert!(!serde_json::to_string(&plain_state)
        .unwrap()
        .contains("stage"));
    let added = mismatch(staged.clone().resume(&plain_state));
    assert!(
        added.contains("stage: checkpoint off, this loader on (name=\"filter-map\")"),
        "{added}"
    );

    // A stage-less loader refuses a checkpoint that holds a stage's state, whatever its
    // description says.
    let mut smuggled = plain_state.clone();
    smuggled.stage = state.stage.clone();
    let smuggled = mismatch(b.clone().resume(&smuggled));
    assert!(smuggled.contains("user stage"), "{smuggled}");

    // A name that needs escaping round-trips through the description.
    let odd = "a \"quoted\", | piped (name)";
    let odd_builder = b.clone().stage(odd, stage);
    let mut loader = odd_builder.clone().build().unwrap();
    take(&mut loader, 2);
    let odd_state = through_json(&loader.state());
    let mut resumed = odd_builder.resume(&odd_state).unwrap();
    assert_eq!(rest(&mut resumed), model(&b, &src)[2..]);
}

#[test]
fn elastic_merges_are_refused() {
    let src = source();
    let (_, b) = cases(&src).swap_remove(1);
    let staged = b.clone().stage("filter-map", stage);
    let mut loader = staged.clone().build().unwrap();
    take(&mut loader, 2);
    let state = through_json(&loader.state());
    // The other rank's checkpoint, stage-less, so only the stage is wrong.
    let rank0 = b
        .clone()
        .shard(ShardConfig::new(2, 0))
        .build()
        .unwrap()
        .state();
    let states = [rank0.clone(), state.clone()];
    for reason in [
        mismatch(staged.merge_checkpoints(&states)),
        mismatch(staged.clone().resume_elastic(&states)),
        mismatch(staged.elastic_chain(&state)),
        mismatch(staged.merge_checkpoints(&[rank0.clone(), rank0.clone()])),
    ] {
        assert!(
            reason.contains("this loader has user stage \"filter-map\""),
            "{reason}"
        );
        assert!(reason.contains("same ranks only"), "{reason}");
    }
    for reason in [
        mismatch(b.merge_checkpoints(&states)),
        mismatch(b.clone().resume_elastic(&states)),
    ] {
        assert!(
            reason.contains("checkpoint 1 has user stage \"filter-map\""),
            "{reason}"
        );
        assert!(reason.contains("same ranks only"), "{reason}");
    }
    let reason = mismatch(b.elastic_chain(&state));
    assert!(
        reason.contains(
            "the checkpoint has user stage \"filter-map\": a loader with a user \
                         stage resumes on the same ranks only"
        ),
        "{reason}"
    );
    // A merged (stage-less) checkpoint is refused by a loader with a stage.
    let plain_states = [rank0, b.clone().build().unwrap().state()];
    let merged = b.merge_checkpoints(&plain_states).unwrap();
    let reason = mismatch(staged.resume(&merged));
    assert!(reason.contains("same ranks only"), "{reason}");
}

#[test]
fn a_damaged_stage_state_is_a_resume_mismatch() {
    let src = source();
    let (_, b) = cases(&src).swap_remove(0);
    let staged = workers(b, 2, MergePolicy::Strict).stage("filter-map", stage);
    let mut loader = staged.clone().build().unwrap();
    take(&mut loader, 3);
    let state = through_json(&loader.state());
    let with = |stage: Option<serde_json::Value>| {
        let mut s = state.clone();
        s.stage = stage;
        s
    };
    let input = |input: serde_json::Value| {
        let mut v = state.stage.clone().unwrap();
        v["input"] = input;
        with(Some(v))
    };
    let mut cursor_past_the_end = state.stage.clone().unwrap();
    cursor_past_the_end["input"]["position"] = serde_json::json!(1u64 << 40);
    for (what, damaged) in [
        ("no stage state", with(None)),
        ("a string", with(Some(serde_json::json!("garbage")))),
        ("an array", with(Some(serde_json::json!([1, 2, 3])))),
        (
            "a number for the stage's state",
            input(serde_json::json!(42)),
        ),
        (
            "an object of other fields",
            input(serde_json::json!({"bogus": true})),
        ),
        ("a cursor past the end", with(Some(cursor_past_the_end))),
    ] {
        let reason = mismatch(staged.clone().resume(&damaged));
        assert!(
            reason.contains("user stage \"filter-map\""),
            "{what}: {reason}"
        );
    }
    // The undamaged state still resumes.
    assert!(staged.resume(&state).is_ok());
}

/// A stage that is `Send` but not `Sync` (it holds a `Cell`): the loader over it is still
/// `Send + Sync`.
struct NotSync<I> {
    input: I,
    pulled: Cell<u64>,
}

impl<I: Stream + Unpin> Stream for NotSync<I> {
    type Item = I::Item;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<I::Item>> {
        let this = self.get_mut();
        this.pulled.set(this.pulled.get() + 1);
        Pin::new(&mut this.input).poll_next(cx)
    }
}

impl<I: Checkpoint + Unpin> Checkpoint for NotSync<I> {
    type State = I::State;

    fn checkpoint(&self) -> I::State {
        self.input.checkpoint()
    }

    fn restore(&mut self, state: I::State) -> zrecord::Result<()> {
        self.input.restore(state)
    }
}

#[test]
fn a_loader_over_a_stage_that_is_not_sync_is_send_and_sync() {
    fn send_sync<T: Send + Sync>(_: &T) {}
    let src = source();
    let (_, b) = cases(&src).swap_remove(0);
    let expected: Vec<Item> = b
        .index_chain()
        .unwrap()
        .cursor()
        .into_iter()
        .map(|b| {
            let b = b.unwrap();
            let data = src.gather(&b.indices()).unwrap();
            (b.epoch, b.position, b.indices(), data)
        })
        .collect();
    let mut loader = b
        .stage("not-sync", |chain| NotSync {
            input: chain,
            pulled: Cell::new(0),
        })
        .build()
        .unwrap();
    send_sync(&loader);
    assert_eq!(rest(&mut loader), expected);
}
