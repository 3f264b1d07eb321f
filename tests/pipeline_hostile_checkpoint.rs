//! A checkpoint is untrusted input: resuming from one with huge, zero or inconsistent numbers (positions, counts, `num_workers`, `base`, worker lists) is a typed `ResumeMismatch` or `InvalidConfig` error, never a panic (overflow checks are on in debug builds), a hang, or a stream that silently ends or fails later.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use futures::executor::block_on;
use zrecord::pipeline::{
    LoaderBuilder, LoaderState, MemorySource, Position, PrefetchConfig, SamplerConfig, SamplerMode,
    WorkerState,
};
use zrecord::Error;

/// Batches per epoch: 50 records in batches of 4.
const EPOCH_LEN: u64 = 13;

fn builder(epochs: Option<u64>, workers: usize) -> LoaderBuilder<MemorySource> {
    let src = Arc::new(MemorySource::new(
        (0..50u8).map(|i| vec![i; usize::from(i % 4)]).collect(),
    ));
    LoaderBuilder::new(src)
        .sampler(
            SamplerConfig::default()
                .mode(SamplerMode::Shuffled)
                .seed(4)
                .epochs(epochs),
        )
        .batch_size(4)
        .prefetch(PrefetchConfig::default().num_workers(workers))
}

fn checkpoint(b: LoaderBuilder<MemorySource>) -> LoaderState {
    let mut loader = b.build().unwrap();
    for _ in 0..5 {
        block_on(loader.next()).unwrap().unwrap();
    }
    loader.state()
}

fn at(g: u64) -> Option<Position> {
    Some(Position {
        epoch: g / EPOCH_LEN,
        position: g % EPOCH_LEN,
    })
}

/// A damage to a checkpoint, and what the refusal must mention.
type Edit = (&'static str, fn(&mut LoaderState));

#[track_caller]
fn refused(b: LoaderBuilder<MemorySource>, state: &LoaderState, needle: &str) {
    match b.resume(state) {
        Err(e @ (Error::ResumeMismatch { .. } | Error::InvalidConfig { .. })) => {
            let msg = e.to_string();
            assert!(msg.contains(needle), "{msg:?} should mention {needle:?}");
        }
        Err(other) => panic!("expected ResumeMismatch or InvalidConfig, got {other:?}"),
        Ok(_) => panic!("a hostile checkpoint was accepted: {state:?}"),
    }
}

#[test]
fn malformed_worker_lists_are_refused() {
    let good = checkpoint(builder(Some(2), 3));
    assert!(builder(Some(2), 3).resume(&good).is_ok());
    let edits: Vec<Edit> = vec![
        ("0 workers", |s| s.prefetch.num_workers = 0),
        ("0 workers", |s| {
            s.prefetch.num_workers = 0;
            s.prefetch.workers.clear();
        }),
        ("for 18446744073709551615 workers", |s| {
            s.prefetch.num_workers = u64::MAX
        }),
        // An empty list for u64::MAX workers used to pass as a prefix and resume at `base`.
        ("0 workers listed", |s| {
            s.prefetch.num_workers = u64::MAX;
            s.prefetch.workers.clear();
        }),
        ("2 workers listed", |s| s.prefetch.workers.truncate(2)),
        ("4 workers listed", |s| {
            let w = s.prefetch.workers[0].clone();
            s.prefetch.workers.push(w);
        }),
        ("next worker 3", |s| s.prefetch.next_worker = 3),
        ("next worker 18446744073709551615", |s| {
            s.prefetch.next_worker = u64::MAX
        }),
    ];
    for (needle, edit) in edits {
        let mut s = good.clone();
        edit(&mut s);
        refused(builder(Some(2), 3), &s, needle);
        // With another worker count too (the rebasing path).
        refused(builder(Some(2), 2), &s, needle);
    }
}

#[test]
fn huge_positions_and_counts_are_refused() {
    let good = checkpoint(builder(Some(2), 3));
    let edits: Vec<Edit> = vec![
        ("past the stage", |s| s.prefetch.base = u64::MAX),
        ("worker 0 consumed 18446744073709551615", |s| {
            s.prefetch.workers[0].consumed = u64::MAX
        }),
        ("worker 1", |s| s.prefetch.workers[1].next = at(u64::MAX)),
        ("worker 2", |s| {
            s.prefetch.workers[2].next = Some(Position {
                epoch: u64::MAX,
                position: u64::MAX,
            })
        }),
    ];
    for (needle, edit) in edits {
        let mut s = good.clone();
        edit(&mut s);
        refused(builder(Some(2), 3), &s, needle);
    }
    // Every count huge, resumed with another worker count: the sum of the counts saturates and
    // base + consumed overflows, which is no prefix.
    let mut s = good.clone();
    for w in &mut s.prefetch.workers {
        w.consumed = u64::MAX;
    }
    refused(builder(Some(2), 2), &s, "not a prefix");
    // A consistent prefix past the end of the stage.
    let mut s = good.clone();
    s.prefetch.base = 2 * EPOCH_LEN - 1;
    refused(builder(Some(2), 2), &s, "past the stage's 26 items");
    // A checkpoint of another format version, generation or length, all u64::MAX.
    let mut s = good.clone();
    s.version = u32::MAX;
    refused(builder(Some(2), 3), &s, "version 4294967295");
    let mut s = good.clone();
    s.generation = u64::MAX;
    refused(builder(Some(2), 3), &s, "generation 18446744073709551615");
    let mut s = good;
    s.source_len = u64::MAX;
    refused(builder(Some(2), 3), &s, "18446744073709551615 records");
}

#[test]
fn positions_past_u64_in_an_endless_stage_are_refused() {
    let good = checkpoint(builder(None, 3));
    assert!(builder(None, 3).resume(&good).is_ok());
    // base u64::MAX, each worker's next item exactly what this configuration computes: worker
    // 0's is the last global position, workers 1 and 2 have none. This used to resume, and the
    // stream then failed with "worker gone" after one batch.
    let mut s = good.clone();
    s.prefetch.base = u64::MAX;
    s.prefetch.next_worker = 0;
    s.prefetch.workers = vec![
        WorkerState {
            consumed: 0,
            next: at(u64::MAX),
        },
        WorkerState {
            consumed: 0,
            next: None,
        },
        WorkerState {
            consumed: 0,
            next: None,
        },
    ];
    refused(builder(None, 3), &s, "worker 1's next item");
    // Rebased on another worker count at u64::MAX: worker 1 of 2 starts past u64.
    let mut s = good.clone();
    s.prefetch.base = u64::MAX - 5;
    for w in &mut s.prefetch.workers {
        w.consumed = 0;
    }
    // Five items of the round robin from base: the prefix ends at u64::MAX.
    s.prefetch.workers[0].consumed = 2;
    s.prefetch.workers[1].consumed = 2;
    s.prefetch.workers[2].consumed = 1;
    refused(builder(None, 2), &s, "past the last global position");

    // One worker that consumed u64::MAX items: its next item is global position u64::MAX, and
    // merging it counted past u64::MAX (an overflow panic in debug builds).
    let one = checkpoint(builder(None, 1));
    let mut s = one.clone();
    s.prefetch.workers[0] = WorkerState {
        consumed: u64::MAX,
        next: at(u64::MAX),
    };
    refused(builder(None, 1), &s, "past the last global position");
    // One fewer is a valid (if unreachable) checkpoint: the last two global positions, then
    // the worker ends and the stream reports it, then ends; no panic, no repeated batch.
    s.prefetch.workers[0] = WorkerState {
        consumed: u64::MAX - 1,
        next: at(u64::MAX - 1),
    };
    let mut loader = builder(None, 1).resume(&s).unwrap();
    let mut got = Vec::new();
    for _ in 0..4 {
        match block_on(loader.next()) {
            Some(Ok(b)) => got.push((b.epoch(), b.position())),
            Some(Err(e)) => {
                assert!(matches!(e, Error::WorkerGone { .. }), "{e:?}");
                break;
            }
            None => break,
        }
    }
    let want: Vec<_> = [u64::MAX - 1, u64::MAX]
        .iter()
        .map(|&g| (g / EPOCH_LEN, g % EPOCH_LEN))
        .collect();
    assert_eq!(got, want);
    assert!(block_on(loader.next()).is_none());
}

#[test]
fn huge_worker_counts_and_queues_in_the_config_are_invalid() {
    for b in [
        builder(Some(2), usize::MAX),
        builder(Some(2), 1 << 20),
        builder(Some(2), 0),
        builder(Some(2), 2).prefetch(
            PrefetchConfig::default()
                .num_workers(2)
                .worker_queue_size(usize::MAX),
        ),
        builder(Some(2), 2).prefetch(
            PrefetchConfig::default()
                .num_workers(2)
                .consumer_queue_size(usize::MAX),
        ),
    ] {
        match b.build() {
            Err(Error::InvalidConfig { .. }) => {}
            other => panic!("expected InvalidConfig, got {:?}", other.err()),
        }
    }
    // And when resuming: the config is checked before the checkpoint.
    let good = checkpoint(builder(Some(2), 3));
    refused(builder(Some(2), usize::MAX), &good, "num_workers");
}

#[test]
fn a_checkpoint_from_json_with_u64_max_everywhere_is_refused() {
    let good = checkpoint(builder(Some(2), 3));
    let mut json: serde_json::Value = serde_json::to_value(&good).unwrap();
    let max = serde_json::json!(u64::MAX);
    json["prefetch"]["base"] = max.clone();
    json["prefetch"]["num_workers"] = max.clone();
    json["prefetch"]["next_worker"] = max.clone();
    for w in json["prefetch"]["workers"].as_array_mut().unwrap() {
        w["consumed"] = max.clone();
        w["next"] = serde_json::json!({"epoch": u64::MAX, "position": u64::MAX});
    }
    let s: LoaderState = serde_json::from_value(json).unwrap();
    refused(builder(Some(2), 3), &s, "malformed prefetch state");
    refused(builder(Some(2), 5), &s, "malformed prefetch state");
}

/// An elastic checkpoint: a bucketed 2-rank run merged for rank 1 of 3, with a bitmap in its
/// residual (the bucket buffer in progress).
fn elastic_checkpoint() -> (LoaderBuilder<MemorySource>, LoaderState) {
    let src = Arc::new(MemorySource::new(
        (0..50u8).map(|i| vec![i; usize::from(i % 4)]).collect(),
    ));
    let b = |total, rank| {
        LoaderBuilder::new(Arc::clone(&src))
            .sampler(SamplerConfig::default().seed(4).epochs(Some(2)))
            .shard(zrecord::pipeline::ShardConfig::new(total, rank))
            .bucket(
                zrecord::pipeline::BucketConfig::default()
                    .buffer_size(12)
                    .pack_size(3),
            )
            .batch_size(3)
    };
    let states: Vec<LoaderState> = (0..2)
        .map(|rank| {
            let mut loader = b(2, rank).build().unwrap();
            for _ in 0..=rank {
                block_on(loader.next()).unwrap().unwrap();
            }
            loader.state()
        })
        .collect();
    let merged = b(3, 1).merge_checkpoints(&states).unwrap();
    let elastic = merged.elastic.as_ref().unwrap();
    assert!(elastic.residual[0].levels[0]
        .iter()
        .any(|r| r.mask.is_some()));
    (b(3, 1), merged)
}

#[test]
fn damaged_elastic_residuals_are_refused() {
    let (builder, good) = elastic_checkpoint();
    assert!(builder.clone().resume(&good).is_ok());
    type ElasticEdit = (&'static str, fn(&mut zrecord::pipeline::ElasticState));
    let edits: Vec<ElasticEdit> = vec![
        ("leave the parent's 50 positions", |e| {
            e.residual[0].levels[0][0].count = 1 << 40
        }),
        ("leave the parent's", |e| {
            e.residual[0].levels[0][0].first = u64::MAX
        }),
        ("leave the parent's", |e| {
            e.residual[0].levels[0][0].step = u64::MAX
        }),
        ("a step of 0 repeats a position", |e| {
            let run = &mut e.residual[0].levels[0][0];
            run.step = 0;
            run.count = 2;
            run.mask = None;
        }),
        ("mask of", |e| {
            for run in &mut e.residual[0].levels[0] {
                if let Some(m) = &mut run.mask {
                    m.push(1);
                }
            }
        }),
        ("mask bits set past the run's count", |e| {
            for run in &mut e.residual[0].levels[0] {
                if let Some(m) = &mut run.mask {
                    *m.last_mut().unwrap() |= 1 << 63;
                }
            }
        }),
        ("no level", |e| e.residual[0].levels.clear()),
        ("selects 100 positions of a sequence of", |e| {
            let one = zrecord::pipeline::Run {
                first: 0,
                step: 1,
                count: 1,
                mask: None,
            };
            e.residual[0].levels.push(vec![one; 100]);
        }),
        ("out of order", |e| {
            let first = e.residual[0].clone();
            e.residual.push(first);
        }),
        ("out of order", |e| e.residual[0].epoch = e.resume_epoch),
        ("past the loader's 2 epochs", |e| e.resume_epoch = 3),
    ];
    for (needle, edit) in edits {
        let mut state = good.clone();
        edit(state.elastic.as_mut().unwrap());
        refused(builder.clone(), &state, needle);
    }
}
