//! The stream prefetch's unit tests.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use futures::executor::block_on;
use futures::StreamExt;

use super::super::{LoaderBatch, MergePolicy, OnError, Prefetch};
use super::*;
use crate::pipeline::checkpoint::testing::{all, every_split, sampler};
use crate::pipeline::checkpoint_ext::CheckpointExt;
use crate::pipeline::RetryPolicy;
use crate::pipeline::{BatchConfig, MemorySource, Stage, StageExt};

fn source(n: u64) -> Arc<MemorySource> {
    Arc::new(MemorySource::new(
        (0..n).map(|i| vec![i as u8; 2]).collect(),
    ))
}

type Item = (u64, u64, Vec<u64>, Vec<Vec<u8>>);

fn item(b: LoaderBatch<Vec<Vec<u8>>>) -> Item {
    (b.epoch(), b.position(), b.indices(), b.data)
}

#[test]
fn equals_the_seekable_prefetch_and_resumes_everywhere() {
    let src = source(17);
    for workers in [1, 2, 3] {
        let config = PrefetchConfig::default()
            .num_workers(workers)
            .worker_queue_size(1);
        let batches = BatchConfig::new(4);
        let got = every_split(
            || {
                sampler(17, 2)
                    .cursor()
                    .batch(batches)
                    .unwrap()
                    .prefetch(Arc::clone(&src), config)
                    .unwrap()
            },
            item,
        );
        let seekable = sampler(17, 2)
            .batch(batches)
            .unwrap()
            .prefetch(Arc::clone(&src), config)
            .unwrap();
        let expected: Vec<Item> = block_on(seekable.map(|b| item(b.unwrap())).collect());
        assert_eq!(got, expected, "{workers} workers");
    }
}

/// Fails every gather that includes record 5.
struct Failing(MemorySource);

impl Source for Failing {
    type Batch = Vec<Vec<u8>>;

    fn len(&self) -> u64 {
        self.0.len()
    }

    fn item_len(&self, index: u64) -> Result<u64> {
        self.0.item_len(index)
    }

    fn gather(&self, indices: &[u64]) -> Result<Self::Batch> {
        if indices.contains(&5) {
            return Err(Error::IndexOutOfRange { index: 5, len: 0 });
        }
        self.0.gather(indices)
    }
}

#[test]
fn a_failed_batch_stops_the_stream_and_is_not_consumed() {
    let src = Arc::new(Failing(MemorySource::new(vec![vec![1]; 12])));
    let config = PrefetchConfig::default()
        .num_workers(2)
        .retry(RetryPolicy::none());
    let make = || {
        sampler(12, 1)
            .cursor()
            .batch(BatchConfig::new(2))
            .unwrap()
            .prefetch(Arc::clone(&src), config)
            .unwrap()
    };
    let mut s = make();
    let mut ok = 0;
    let failed = loop {
        match block_on(s.next()).unwrap() {
            Ok(_) => ok += 1,
            Err(e) => break e,
        }
    };
    assert!(matches!(failed, Error::IndexOutOfRange { index: 5, .. }));
    assert!(block_on(s.next()).is_none());
    let state = s.checkpoint();
    let mut again = make();
    again.restore(state.clone()).unwrap();
    // The failed batch comes first again, in a fresh stream and in the stopped one.
    assert!(block_on(again.next()).unwrap().is_err());
    s.restore(state).unwrap();
    assert!(block_on(s.next()).unwrap().is_err());
    let skipping = sampler(12, 1)
        .cursor()
        .batch(BatchConfig::new(2))
        .unwrap()
        .prefetch(Arc::clone(&src), config.on_error(OnError::Skip))
        .unwrap();
    let results: Vec<bool> = block_on(skipping.map(|r| r.is_ok()).collect());
    assert_eq!(results.len(), 6);
    assert_eq!(results.iter().filter(|ok| !**ok).count(), 1);
    assert_eq!(results.iter().take_while(|ok| **ok).count(), ok);
}

/// Where a held gather waits, apart from the source (so that releasing it holds no
/// reference to the source).
#[derive(Default)]
struct Gate {
    /// (held, a gather is waiting)
    state: std::sync::Mutex<(bool, bool)>,
    cv: std::sync::Condvar,
}

/// Fails a gather of record 5 (once a gather of record 6 is held); holds a gather of record 6
/// at its gate until released; records the lookahead sessions ended.
#[derive(Default)]
struct FailingAndHolding {
    inner: MemorySource,
    gate: Arc<Gate>,
    ended: std::sync::Mutex<Vec<u64>>,
}

impl Source for FailingAndHolding {
    type Batch = Vec<Vec<u8>>;

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn item_len(&self, index: u64) -> Result<u64> {
        self.inner.item_len(index)
    }

    fn gather(&self, indices: &[u64]) -> Result<Self::Batch> {
        if indices.contains(&5) {
            // Fails only once the other worker is held in its gather of record 6: else, on a
            // loaded machine, the stop could close that worker's queue before it starts it.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            let mut st = self.gate.state.lock().unwrap();
            while !st.1 && std::time::Instant::now() < deadline {
                st = self
                    .gate
                    .cv
                    .wait_timeout(st, std::time::Duration::from_millis(50))
                    .unwrap()
                    .0;
            }
            return Err(Error::IndexOutOfRange { index: 5, len: 0 });
        }
        if indices.contains(&6) {
            let mut st = self.gate.state.lock().unwrap();
            st.1 = true;
            self.gate.cv.notify_all();
            while st.0 {
                st = self.gate.cv.wait(st).unwrap();
            }
        }
        self.inner.gather(indices)
    }

    fn end_lookahead(&self, session: u64) {
        self.ended.lock().unwrap().push(session);
    }
}

#[test]
fn after_a_stop_shutdown_waits_for_every_worker_and_the_session_ends_once() {
    let gate = Arc::new(Gate::default());
    gate.state.lock().unwrap().0 = true;
    let src = Arc::new(FailingAndHolding {
        inner: MemorySource::new(vec![vec![1]; 12]),
        gate: Arc::clone(&gate),
        ended: std::sync::Mutex::default(),
    });
    let config = PrefetchConfig::default()
        .num_workers(2)
        .lookahead(4)
        .retry(RetryPolicy::none());
    let sequential = crate::pipeline::SamplerConfig::default()
        .mode(crate::pipeline::SamplerMode::Sequential)
        .epochs(Some(1));
    let mut s = crate::pipeline::Sampler::new(12, sequential)
        .unwrap()
        .cursor()
        .batch(BatchConfig::new(2))
        .unwrap()
        .prefetch(Arc::clone(&src), config)
        .unwrap();
    // In order: batches 0 and 1, then batch 2 (records 4, 5) fails and stops the stream,
    // while the other worker is held in its gather of batch 3 (records 6, 7).
    let failed = loop {
        match block_on(s.next()).unwrap() {
            Ok(_) => {}
            Err(e) => break e,
        }
    };
    assert!(matches!(failed, Error::IndexOutOfRange { index: 5, .. }));
    {
        let mut st = gate.state.lock().unwrap();
        while !st.1 {
            st = gate.cv.wait(st).unwrap();
        }
    }
    assert_eq!(
        src.ended.lock().unwrap().len(),
        1,
        "a stop ends the session"
    );
    let release = {
        let gate = Arc::clone(&gate);
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            gate.state.lock().unwrap().0 = false;
            gate.cv.notify_all();
        })
    };
    block_on(s.shutdown());
    // Every worker has let go of the source: only this test holds it.
    assert_eq!(
        Arc::strong_count(&src),
        1,
        "shutdown returned before a stopped worker exited"
    );
    release.join().unwrap();
    assert_eq!(src.ended.lock().unwrap().len(), 1, "the session ends once");
}

/// Records the announcements and the sessions ended.
#[derive(Default)]
struct Announcing {
    inner: MemorySource,
    announced: std::sync::Mutex<Vec<(u64, Vec<u64>)>>,
    ended: std::sync::Mutex<Vec<u64>>,
}

impl Source for Announcing {
    type Batch = Vec<Vec<u8>>;

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn item_len(&self, index: u64) -> Result<u64> {
        self.inner.item_len(index)
    }

    fn gather(&self, indices: &[u64]) -> Result<Self::Batch> {
        self.inner.gather(indices)
    }

    fn lookahead(&self, session: u64, indices: &[u64]) {
        self.announced
            .lock()
            .unwrap()
            .push((session, indices.to_vec()));
    }

    fn end_lookahead(&self, session: u64) {
        self.ended.lock().unwrap().push(session);
    }
}

#[test]
fn with_lookahead_every_batch_is_announced_once_and_the_session_ends_on_drop() {
    let src = Arc::new(Announcing {
        inner: MemorySource::new(vec![vec![0]; 10]),
        ..Announcing::default()
    });
    let s = sampler(10, 1)
        .cursor()
        .batch(BatchConfig::new(3))
        .unwrap()
        .prefetch(Arc::clone(&src), PrefetchConfig::default().lookahead(2))
        .unwrap();
    let batches = all(s, |b| b.indices());
    let announced = src.announced.lock().unwrap().clone();
    let sessions: Vec<u64> = announced.iter().map(|(s, _)| *s).collect();
    let indices: Vec<Vec<u64>> = announced.into_iter().map(|(_, i)| i).collect();
    assert_eq!(indices, batches);
    assert!(sessions.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(*src.ended.lock().unwrap(), sessions[..1]);
}

#[test]
fn best_effort_and_async_gathers_yield_every_batch_once_and_resume_everywhere() {
    let src = source(13);
    let batches = || sampler(13, 2).cursor().batch(BatchConfig::new(2)).unwrap();
    let expected = all(
        batches()
            .prefetch(Arc::clone(&src), PrefetchConfig::default())
            .unwrap(),
        item,
    );
    let window = PrefetchConfig::default()
        .num_workers(2)
        .worker_queue_size(1)
        .gathers_in_flight(3);
    let got = every_split(
        || batches().prefetch(Arc::clone(&src), window).unwrap(),
        item,
    );
    assert_eq!(got, expected);
    let best_effort = PrefetchConfig::default()
        .num_workers(3)
        .merge(MergePolicy::BestEffort {
            max_lead: 2,
            max_skips_per_round: 1,
        });
    let mut got = all(batches().prefetch(src, best_effort).unwrap(), item);
    got.sort();
    let mut sorted = expected;
    sorted.sort();
    assert_eq!(got, sorted);
}

#[test]
fn a_malformed_consumed_ahead_is_refused() {
    let src = source(4);
    let mut s = sampler(4, 1)
        .cursor()
        .batch(BatchConfig::new(2))
        .unwrap()
        .prefetch(src, PrefetchConfig::default())
        .unwrap();
    let good = s.checkpoint();
    for ahead in [vec![0, 0], vec![2, 2], vec![3, 1]] {
        let state = PrefetchStreamState {
            consumed_ahead: ahead.clone(),
            ..good.clone()
        };
        assert!(
            matches!(s.restore(state), Err(Error::ResumeMismatch { .. })),
            "{ahead:?}"
        );
    }
    s.restore(PrefetchStreamState {
        consumed_ahead: vec![1],
        ..good
    })
    .unwrap();
    assert_eq!(all(s, |b: LoaderBatch<Vec<Vec<u8>>>| b.position()), vec![0]);
}

/// `f` on a thread of its own; panics if it does not end within 20 s (a hung stream).
fn within<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(20))
        .expect("the stream hung")
}

fn stream_over(
    src: &Arc<MemorySource>,
    config: PrefetchConfig,
) -> Prefetch<
    Vec<Vec<u8>>,
    impl Checkpoint<
            Item = Result<IndexBatch>,
            State = impl Clone + serde::Serialize + serde::de::DeserializeOwned,
        > + Unpin,
> {
    sampler(16, 1)
        .cursor()
        .batch(BatchConfig::new(2))
        .unwrap()
        .prefetch(Arc::clone(src), config)
        .unwrap()
}

/// A checkpoint listing batches consumed ahead, resumed with less room than the run that
/// wrote it (fewer workers, shorter queues): the batches skipped never fill the room, and
/// the resumed stream yields every other batch, once, without hanging.
#[test]
fn a_resume_with_less_room_than_its_run_yields_the_rest_and_ends() {
    let src = source(16);
    for (workers, ahead) in [(1, vec![1]), (2, vec![1, 2, 3]), (1, vec![1, 2, 5, 6, 7])] {
        let config = PrefetchConfig::default()
            .num_workers(workers)
            .worker_queue_size(1)
            .merge(MergePolicy::BestEffort {
                max_lead: 4,
                max_skips_per_round: 4,
            });
        let src2 = Arc::clone(&src);
        let ahead2 = ahead.clone();
        let got = within(move || {
            let mut s = stream_over(&src2, config);
            let fresh = s.checkpoint();
            s.restore(PrefetchStreamState {
                consumed_ahead: ahead2,
                ..fresh
            })
            .unwrap();
            let mut got = all(s, |b: LoaderBatch<Vec<Vec<u8>>>| b.position());
            got.sort_unstable();
            got
        });
        let want: Vec<u64> = (0..8).filter(|p| !ahead.contains(p)).collect();
        assert_eq!(got, want, "{workers} workers, {ahead:?} consumed ahead");
    }
}

/// A checkpoint a resumed stream writes before it has pulled the batches it skips (the
/// first one not consumed may be one of them) loads again, and resumes exactly.
#[test]
fn a_checkpoint_written_after_a_resume_loads_again() {
    let src = source(16);
    let config = PrefetchConfig::default()
        .num_workers(2)
        .worker_queue_size(1)
        .merge(MergePolicy::BestEffort {
            max_lead: 4,
            max_skips_per_round: 4,
        });
    let mut s = stream_over(&src, config);
    let fresh = s.checkpoint();
    s.restore(PrefetchStreamState {
        consumed_ahead: vec![1, 2],
        ..fresh
    })
    .unwrap();
    // Best effort: whichever worker is ready first (batch 0 or batch 3, on a loaded host).
    let first = block_on(s.next()).unwrap().unwrap().position();
    assert!([0, 3].contains(&first), "{first}");
    let json = serde_json::to_string(&s.checkpoint()).unwrap();
    let mut again = stream_over(&src, config);
    again.restore(serde_json::from_str(&json).unwrap()).unwrap();
    let mut rest = all(again, |b: LoaderBatch<Vec<Vec<u8>>>| b.position());
    rest.push(first);
    rest.sort_unstable();
    assert_eq!(rest, vec![0, 3, 4, 5, 6, 7], "{json}");
}

/// A restore the input refuses leaves the stream as it was: the batches not yet consumed
/// still come, each once, and nothing of the refused state is applied.
#[test]
fn a_refused_restore_leaves_the_stream_as_it_was() {
    let src = source(16);
    let config = PrefetchConfig::default().num_workers(2);
    let mut s = stream_over(&src, config);
    assert_eq!(block_on(s.next()).unwrap().unwrap().position(), 0);
    let mut other = sampler(10, 1)
        .cursor()
        .batch(BatchConfig::new(2))
        .unwrap()
        .prefetch(Arc::clone(&src), config)
        .unwrap();
    let foreign = other.checkpoint();
    drop(other.next());
    let state = PrefetchStreamState {
        input: foreign.input,
        consumed_ahead: vec![1],
    };
    let json = serde_json::to_string(&state).unwrap();
    assert!(s.restore(serde_json::from_str(&json).unwrap()).is_err());
    let rest = all(s, |b: LoaderBatch<Vec<Vec<u8>>>| b.position());
    assert_eq!(rest, vec![1, 2, 3, 4, 5, 6, 7]);
}
