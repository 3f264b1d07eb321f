//! `zrecord.Loader` and `zrecord.mix`: the whole pipeline (sampler or weighted mix → shard →
//! bucket → batch → prefetch workers), with exact and elastic resume through `state_dict`.

use crate::batch::{Columns, PyBatch};
use crate::dataset::{field_names_of, PyDataset};
use crate::errors::{config_error, to_py, value_error};
use crate::guard::{guarded, without_gil};
use crate::indices::option_in_range;
use futures::task::ArcWake;
use futures::{Stream, StreamExt};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyType};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use zrecord::pipeline::{
    BucketConfig, Concat, DatasetSource, Exhausted, IndexBatch, Loader, LoaderBatch, LoaderBuilder,
    LoaderState, MergePolicy, MixConfig, OnError, PrefetchConfig, RetryPolicy, SamplerConfig,
    SamplerMode, ShardConfig, ShardMode, Source,
};

/// How often a blocked `next()` looks for a pending signal (Ctrl-C).
const SIGNAL_CHECK: Duration = Duration::from_millis(20);

/// Wakes a thread blocked in [`poll_for`].
struct Parker {
    woken: Mutex<bool>,
    cv: Condvar,
}

impl ArcWake for Parker {
    fn wake_by_ref(arc_self: &Arc<Self>) {
        *arc_self
            .woken
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = true;
        arc_self.cv.notify_one();
    }
}

/// Polls `s` until it yields or `wait` has passed (then `Pending`; the stream is cancel safe,
/// so polling it again later loses nothing).
fn poll_for<S: Stream + Unpin>(
    s: &mut S,
    parker: &Arc<Parker>,
    wait: Duration,
) -> Poll<Option<S::Item>> {
    let waker = futures::task::waker(Arc::clone(parker));
    let mut cx = Context::from_waker(&waker);
    let deadline = Instant::now() + wait;
    loop {
        *parker.woken.lock().unwrap_or_else(PoisonError::into_inner) = false;
        if let Poll::Ready(x) = s.poll_next_unpin(&mut cx) {
            return Poll::Ready(x);
        }
        let mut woken = parker.woken.lock().unwrap_or_else(PoisonError::into_inner);
        while !*woken {
            let now = Instant::now();
            if now >= deadline {
                return Poll::Pending;
            }
            woken = parker
                .cv
                .wait_timeout(woken, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// A weighted mixture of datasets, for `Loader`: built by `zrecord.mix`.
#[pyclass(frozen, module = "zrecord._zrecord", name = "Mix")]
pub struct PyMix {
    datasets: Vec<Py<PyDataset>>,
    config: MixConfig,
}

/// `mix(datasets, weights, *, exhausted="restart", mode="shuffled", epochs=None, ...)`
#[pyfunction]
#[pyo3(signature = (datasets, weights, *, exhausted="restart", mode="shuffled", epochs=None,
                    epoch_len=None, part_epochs=None))]
pub(crate) fn mix(
    datasets: Vec<Py<PyDataset>>,
    weights: Vec<f64>,
    exhausted: &str,
    mode: &str,
    epochs: Option<u64>,
    epoch_len: Option<u64>,
    part_epochs: Option<u64>,
) -> PyResult<PyMix> {
    if datasets.len() != weights.len() {
        return Err(value_error(format!(
            "{} datasets but {} weights",
            datasets.len(),
            weights.len()
        )));
    }
    let exhausted = match exhausted {
        "restart" => Exhausted::Restart,
        "stop" => Exhausted::Stop,
        "drop" => Exhausted::Drop,
        other => {
            return Err(value_error(format!(
                "exhausted must be restart, stop or drop, not {other:?}"
            )))
        }
    };
    let mut config = MixConfig::new(weights)
        .exhausted(exhausted)
        .mode(sampler_mode(mode)?)
        .epochs(epochs)
        .epoch_len(epoch_len);
    if let Some(p) = part_epochs {
        config = config.part_epochs(p);
    }
    Ok(PyMix { datasets, config })
}

fn sampler_mode(s: &str) -> PyResult<SamplerMode> {
    match s {
        "sequential" => Ok(SamplerMode::Sequential),
        "shuffled" | "shuffle" => Ok(SamplerMode::Shuffled),
        "random" => Ok(SamplerMode::Random),
        other => Err(value_error(format!(
            "sampler must be sequential, shuffled or random, not {other:?}"
        ))),
    }
}

type OneLoader = Loader<DatasetSource, Delivered>;
type MixLoader = Loader<Concat<DatasetSource>, Delivered>;

/// What a worker hands the consumer: the batch's columns, or, with `collate_in_workers`, what
/// `collate` made of the batch on the worker.
enum Delivered {
    Columns(Columns),
    Collated(Py<PyAny>),
}

/// `collate` run on the worker threads (`collate_in_workers=True`): each call holds the GIL
/// while it runs, the gathers, checks and transforms of the other workers go on without it.
struct WorkerCollate {
    f: Py<PyAny>,
    name: String,
}

impl WorkerCollate {
    fn call(&self, columns: Columns, ib: &IndexBatch) -> zrecord::Result<Py<PyAny>> {
        let fail = |reason: String| zrecord::Error::Transform {
            field: "(the batch)".into(),
            index: ib.samples.first().map_or(0, |s| s.index),
            op: format!("collate {}", self.name),
            reason,
        };
        let Some(_in) = crate::transform::InPython::enter() else {
            return Err(fail("the Python interpreter is exiting".into()));
        };
        Python::attach(|py| -> Result<Py<PyAny>, String> {
            let batch = PyBatch::new(columns).with_loader_info(ib.padded(), ib.epoch, ib.position);
            let batch = Py::new(py, batch).map_err(|e| e.to_string())?;
            self.f.call1(py, (batch,)).map_err(|e| {
                let kind = e
                    .get_type(py)
                    .qualname()
                    .map_or_else(|_| "Exception".to_string(), |q| q.to_string());
                format!("{kind}: {}", e.value(py))
            })
        })
        .map_err(fail)
    }
}

enum AnyLoader {
    One(OneLoader),
    Mix(MixLoader),
}

type Item = zrecord::Result<LoaderBatch<Delivered>>;

impl AnyLoader {
    fn poll_for(&mut self, parker: &Arc<Parker>, wait: Duration) -> Poll<Option<Item>> {
        match self {
            AnyLoader::One(l) => poll_for(l, parker, wait),
            AnyLoader::Mix(l) => poll_for(l, parker, wait),
        }
    }

    fn state(&self) -> LoaderState {
        match self {
            AnyLoader::One(l) => l.state(),
            AnyLoader::Mix(l) => l.state(),
        }
    }

    fn stats(&self) -> zrecord::pipeline::LoaderStats {
        match self {
            AnyLoader::One(l) => l.stats(),
            AnyLoader::Mix(l) => l.stats(),
        }
    }
}

/// Every option of the Rust builder a Python `Loader` takes.
struct Options {
    batch_size: u64,
    shuffle: bool,
    sampler: Option<String>,
    seed: u64,
    epochs: Option<u64>,
    shard: Option<(u64, u64)>,
    shard_mode: String,
    pad_to_equal: bool,
    drop_remainder: bool,
    workers: usize,
    merge: String,
    max_lead: Option<u64>,
    max_skips_per_round: Option<u64>,
    bucket: Option<(u64, u64)>,
    drop_last: bool,
    lookahead: Option<usize>,
    gathers_in_flight: Option<usize>,
    worker_queue_size: Option<usize>,
    consumer_queue_size: Option<usize>,
    retries: Option<u32>,
    retry_backoff: Option<f64>,
    on_error: String,
    fields: Option<Vec<String>>,
    key_field: Option<String>,
    /// The transform stage (`transform=`).
    map: Option<zrecord::transform::Map>,
}

impl Options {
    fn apply<S: Source<Batch = zrecord::Batch>>(
        &self,
        mut b: LoaderBuilder<S>,
    ) -> PyResult<LoaderBuilder<S>> {
        let mode = match &self.sampler {
            Some(s) => sampler_mode(s)?,
            None if self.shuffle => SamplerMode::Shuffled,
            None => SamplerMode::Sequential,
        };
        b = b
            .sampler(SamplerConfig::default().mode(mode))
            .seed(self.seed)
            .epochs(self.epochs);
        if let Some((rank, world)) = self.shard {
            let mode = match self.shard_mode.as_str() {
                "interleaved" => ShardMode::Interleaved,
                "contiguous" => ShardMode::Contiguous,
                other => {
                    return Err(value_error(format!(
                        "shard_mode must be interleaved or contiguous, not {other:?}"
                    )))
                }
            };
            b = b.shard(
                ShardConfig::new(world, rank)
                    .mode(mode)
                    .pad_to_equal(self.pad_to_equal)
                    .drop_remainder(self.drop_remainder),
            );
        }
        if let Some((buffer, pack)) = self.bucket {
            b = b.bucket(BucketConfig::default().buffer_size(buffer).pack_size(pack));
        }
        b = b.batch_size(self.batch_size).drop_last(self.drop_last);
        let mut p = PrefetchConfig::default().num_workers(self.workers);
        let merge = match self.merge.as_str() {
            "strict" => MergePolicy::Strict,
            "best_effort" => MergePolicy::BestEffort {
                max_lead: self.max_lead.unwrap_or(4),
                max_skips_per_round: self.max_skips_per_round.unwrap_or(1),
            },
            other => {
                return Err(value_error(format!(
                    "merge must be strict or best_effort, not {other:?}"
                )))
            }
        };
        p = p.merge(merge);
        if let Some(n) = self.lookahead {
            p = p.lookahead(n);
        }
        if let Some(n) = self.gathers_in_flight {
            p = p.gathers_in_flight(n);
        }
        if let Some(n) = self.worker_queue_size {
            p = p.worker_queue_size(n);
        }
        if let Some(n) = self.consumer_queue_size {
            p = p.consumer_queue_size(n);
        }
        if self.retries.is_some() || self.retry_backoff.is_some() {
            let mut r = RetryPolicy::default();
            if let Some(a) = self.retries {
                r = r.attempts(a.saturating_add(1));
            }
            if let Some(s) = self.retry_backoff {
                let backoff = Duration::try_from_secs_f64(s.max(0.0))
                    .map_err(|e| value_error(format!("retry_backoff {s}: {e}")))?;
                // The waits double from `retry_backoff`, up to 30 times it (at least the
                // default's 1 s).
                r = r
                    .backoff(backoff)
                    .max_backoff(backoff.saturating_mul(30).max(r.max_backoff));
            }
            p = p.retry(r);
        }
        p = p.on_error(match self.on_error.as_str() {
            "stop" | "raise" => OnError::Stop,
            "skip" => OnError::Skip,
            other => {
                return Err(value_error(format!(
                    "on_error must be raise or skip, not {other:?}"
                )))
            }
        });
        b = b.prefetch(p);
        if let Some(map) = &self.map {
            b = b.map(map.clone());
        }
        Ok(b)
    }

    fn source(&self, ds: &PyDataset) -> PyResult<DatasetSource> {
        let mut s = DatasetSource::new(&ds.inner);
        if let Some(f) = &self.fields {
            let names: Vec<&str> = f.iter().map(String::as_str).collect();
            s = s.fields(&names).map_err(to_py)?;
        }
        if let Some(k) = &self.key_field {
            s = s.key_field(k).map_err(to_py)?;
        }
        Ok(s)
    }
}

fn parse_state(py: Python<'_>, state: &Bound<'_, PyAny>) -> PyResult<LoaderState> {
    let text: String = if let Ok(s) = state.extract::<String>() {
        s
    } else {
        py.import("json")?
            .call_method1("dumps", (state,))?
            .extract()?
    };
    serde_json::from_str(&text).map_err(|e| {
        to_py(zrecord::Error::ResumeMismatch {
            reason: format!("not a zrecord loader state: {e}"),
        })
    })
}

fn build<S: Source<Batch = zrecord::Batch>>(
    b: LoaderBuilder<S>,
    state: Option<LoaderState>,
    resume_from: Option<Vec<LoaderState>>,
    collate: Option<Arc<WorkerCollate>>,
) -> zrecord::Result<Loader<S, Delivered>> {
    // The columns are laid out on the worker threads, in parallel and without the GIL (and
    // collated there, with it, when asked).
    let b = b.transform(move |batch, ib| {
        let columns = Columns::of(batch);
        match &collate {
            None => Ok(Delivered::Columns(columns)),
            Some(c) => c.call(columns, ib).map(Delivered::Collated),
        }
    });
    match (state, resume_from) {
        (Some(s), None) => b.resume(&s),
        (None, Some(all)) => b.resume_elastic(&all),
        (None, None) => b.build(),
        (Some(_), Some(_)) => Err(zrecord::Error::InvalidConfig {
            reason:
                "give state= (this rank's checkpoint) or resume_from= (every old rank's), not both"
                    .into(),
        }),
    }
}

/// A batch `next()` got but did not hand out (an interrupt came with it, or an adapter gave it
/// back), and the checkpoint from before it.
struct Kept {
    batch: Py<PyAny>,
    before: LoaderState,
    /// Given back by `_unget`: what `next()` returned, collated already (never collated
    /// twice).
    returned: bool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Iterates batches of a dataset or a mix: `for batch in Loader(ds, batch_size=256, ...)`.
#[pyclass(frozen, module = "zrecord._zrecord", name = "Loader")]
pub struct PyLoader {
    /// `None` only while being dropped in another process (see `Drop`).
    inner: Option<Arc<Mutex<AnyLoader>>>,
    parker: Arc<Parker>,
    batch_size: u64,
    /// The process that built the loader: its worker threads live only there.
    pid: u32,
    /// A batch to hand out before any other (see [`Kept`]).
    stash: Mutex<Option<Kept>>,
    /// The checkpoint from before the batch `next()` last returned.
    last_before: Mutex<Option<LoaderState>>,
    /// Applied to each batch on the thread that calls `next()`, which returns its result.
    collate: Option<Py<PyAny>>,
    /// `on_error="skip"`: a batch that failed for good is skipped with a `RuntimeWarning`
    /// instead of raised.
    skip_errors: bool,
}

impl PyLoader {
    /// The loader, or an error in a child of `fork()`: the worker threads did not cross the
    /// fork, and a lock one of them held could never be released there.
    fn loader(&self) -> PyResult<&Arc<Mutex<AnyLoader>>> {
        if std::process::id() != self.pid {
            return Err(config_error(
                "this Loader was built in another process (before a fork): its worker threads \
                 live there; build a new Loader in this process",
            ));
        }
        self.inner
            .as_ref()
            .ok_or_else(|| config_error("the loader is gone"))
    }
}

impl Drop for PyLoader {
    fn drop(&mut self) {
        // In a child of fork() the parent's loader is leaked, not dropped: dropping it would
        // take queue locks a parent thread may have held at the fork.
        if std::process::id() != self.pid {
            std::mem::forget(self.inner.take());
        }
    }
}

impl PyLoader {
    /// The next batch and the checkpoint from before it: a kept one first, else the Rust
    /// loader's next, waiting without the GIL and looking for signals every 20 ms. A batch that
    /// arrives with an interrupt is kept for the next call.
    /// The flag is true for a batch given back by `_unget`: `next()` returns it as it is.
    fn next_batch(&self, py: Python<'_>) -> PyResult<Option<(Py<PyAny>, LoaderState, bool)>> {
        self.loader()?;
        if let Some(kept) = lock(&self.stash).take() {
            return Ok(Some((kept.batch, kept.before, kept.returned)));
        }
        let mut before: Option<LoaderState> = None;
        loop {
            let inner = Arc::clone(self.loader()?);
            let parker = Arc::clone(&self.parker);
            let first = before.is_none();
            let (state, polled) = py.detach(move || {
                guarded(|| {
                    let mut l = lock(&inner);
                    let state = first.then(|| l.state());
                    Ok((state, l.poll_for(&parker, SIGNAL_CHECK)))
                })
            })?;
            if state.is_some() {
                before = state;
            }
            match polled {
                Poll::Ready(None) => return Ok(None),
                Poll::Ready(Some(Err(e))) if self.skip_errors => {
                    // on_error="skip": the batch is consumed; say so, and go on.
                    let message = format!("zrecord.Loader skipped a batch: {e}");
                    let warning = py.get_type::<pyo3::exceptions::PyRuntimeWarning>();
                    pyo3::PyErr::warn(
                        py,
                        &warning,
                        &std::ffi::CString::new(message).unwrap_or_default(),
                        1,
                    )?;
                }
                Poll::Ready(Some(Err(e))) => return Err(to_py(e)),
                Poll::Ready(Some(Ok(b))) => {
                    let is_pad = b.padded();
                    let (epoch, position) = (b.epoch(), b.position());
                    let batch = match b.data {
                        Delivered::Columns(c) => Py::new(
                            py,
                            PyBatch::new(c).with_loader_info(is_pad, epoch, position),
                        )?
                        .into_any(),
                        Delivered::Collated(made) => made,
                    };
                    let Some(before) = before else {
                        return Err(crate::errors::InternalError::new_err(
                            "a loader batch without the state before it",
                        ));
                    };
                    if let Err(interrupt) = py.check_signals() {
                        // Keep it: the checkpoint must not move past a batch nobody got.
                        *lock(&self.stash) = Some(Kept {
                            batch,
                            before,
                            returned: false,
                        });
                        return Err(interrupt);
                    }
                    return Ok(Some((batch, before, false)));
                }
                Poll::Pending => py.check_signals()?,
            }
        }
    }
}

#[pymethods]
impl PyLoader {
    #[new]
    #[pyo3(signature = (source, *, batch_size=256, shuffle=true, sampler=None, seed=0, epochs=Some(1),
                        shard=None, shard_mode="interleaved", pad_to_equal=false, drop_remainder=false,
                        workers=2, merge="strict", max_lead=None, max_skips_per_round=None,
                        bucket=None, drop_last=false, lookahead=None, gathers_in_flight=None,
                        worker_queue_size=None, consumer_queue_size=None, retries=None,
                        retry_backoff=None, on_error="raise", fields=None, key_field=None,
                        state=None, resume_from=None, collate=None, transform=None,
                        collate_in_workers=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        source: Bound<'_, PyAny>,
        batch_size: i128,
        shuffle: bool,
        sampler: Option<String>,
        seed: i128,
        epochs: Option<i128>,
        shard: Option<(i128, i128)>,
        shard_mode: &str,
        pad_to_equal: bool,
        drop_remainder: bool,
        workers: i128,
        merge: &str,
        max_lead: Option<i128>,
        max_skips_per_round: Option<i128>,
        bucket: Option<Bound<'_, PyAny>>,
        drop_last: bool,
        lookahead: Option<i128>,
        gathers_in_flight: Option<i128>,
        worker_queue_size: Option<i128>,
        consumer_queue_size: Option<i128>,
        retries: Option<i128>,
        retry_backoff: Option<f64>,
        on_error: &str,
        fields: Option<Bound<'_, PyAny>>,
        key_field: Option<String>,
        state: Option<Bound<'_, PyAny>>,
        resume_from: Option<Vec<Bound<'_, PyAny>>>,
        collate: Option<Py<PyAny>>,
        transform: Option<Bound<'_, PyAny>>,
        collate_in_workers: bool,
    ) -> PyResult<Self> {
        // Integer options: a ValueError naming the option and its range, never an
        // OverflowError from the conversion.
        let batch_size: u64 = option_in_range("batch_size", batch_size)?;
        let seed: u64 = option_in_range("seed", seed)?;
        let epochs: Option<u64> = epochs.map(|e| option_in_range("epochs", e)).transpose()?;
        let shard: Option<(u64, u64)> = shard
            .map(|(rank, world)| -> PyResult<(u64, u64)> {
                Ok((
                    option_in_range("shard's rank", rank)?,
                    option_in_range("shard's world size", world)?,
                ))
            })
            .transpose()?;
        let workers: usize = option_in_range("workers", workers)?;
        let max_lead: Option<u64> = max_lead
            .map(|v| option_in_range("max_lead", v))
            .transpose()?;
        let max_skips_per_round: Option<u64> = max_skips_per_round
            .map(|v| option_in_range("max_skips_per_round", v))
            .transpose()?;
        let lookahead: Option<usize> = lookahead
            .map(|v| option_in_range("lookahead", v))
            .transpose()?;
        let gathers_in_flight: Option<usize> = gathers_in_flight
            .map(|v| option_in_range("gathers_in_flight", v))
            .transpose()?;
        let worker_queue_size: Option<usize> = worker_queue_size
            .map(|v| option_in_range("worker_queue_size", v))
            .transpose()?;
        let consumer_queue_size: Option<usize> = consumer_queue_size
            .map(|v| option_in_range("consumer_queue_size", v))
            .transpose()?;
        let retries: Option<u32> = retries.map(|v| option_in_range("retries", v)).transpose()?;
        let fields = field_names_of(fields)?;
        let map = match transform {
            Some(t) if !t.is_none() => Some(crate::transform::map_of(py, &t)?),
            _ => None,
        };
        let collate = collate.filter(|c| !c.is_none(py));
        if let Some(c) = &collate {
            if !c.bind(py).is_callable() {
                return Err(config_error(
                    "collate must be a callable taking a zrecord.Batch",
                ));
            }
        }
        if collate_in_workers && collate.is_none() {
            return Err(config_error(
                "collate_in_workers=True needs a collate callable",
            ));
        }
        let (collate, worker_collate) = match collate {
            Some(f) if collate_in_workers => {
                let b = f.bind(py);
                let name = b
                    .getattr("__qualname__")
                    .and_then(|n| n.extract::<String>())
                    .or_else(|_| b.repr().map(|r| r.to_string()))
                    .unwrap_or_else(|_| "(a callable)".into());
                (None, Some(Arc::new(WorkerCollate { f, name })))
            }
            other => (other, None),
        };
        let bucket = match bucket {
            None => None,
            Some(b) if b.is_none() => None,
            Some(b) => {
                if let Ok(buffer) = b.extract::<u64>() {
                    Some((buffer, batch_size))
                } else if let Ok(d) = b.cast::<PyDict>() {
                    let buffer = d
                        .get_item("buffer_size")?
                        .map(|v| v.extract())
                        .transpose()?
                        .unwrap_or(1024);
                    let pack = d
                        .get_item("pack_size")?
                        .map(|v| v.extract())
                        .transpose()?
                        .unwrap_or(batch_size);
                    Some((buffer, pack))
                } else {
                    return Err(config_error("bucket must be None, a buffer size, or a dict with buffer_size and pack_size"));
                }
            }
        };
        let opts = Options {
            batch_size,
            shuffle,
            sampler,
            seed,
            epochs,
            shard,
            shard_mode: shard_mode.to_string(),
            pad_to_equal,
            drop_remainder,
            workers,
            merge: merge.to_string(),
            max_lead,
            max_skips_per_round,
            bucket,
            drop_last,
            lookahead,
            gathers_in_flight,
            worker_queue_size,
            consumer_queue_size,
            retries,
            retry_backoff,
            on_error: on_error.to_string(),
            fields,
            key_field,
            map,
        };
        let skip_errors = opts.on_error == "skip";
        let state = state.map(|s| parse_state(py, &s)).transpose()?;
        let resume_from = resume_from
            .map(|v| {
                v.iter()
                    .map(|s| parse_state(py, s))
                    .collect::<PyResult<Vec<_>>>()
            })
            .transpose()?;
        let loader = if let Ok(ds) = source.cast::<PyDataset>() {
            let src = Arc::new(opts.source(ds.get())?);
            let b = opts.apply(LoaderBuilder::new(src))?;
            let wc = worker_collate.clone();
            AnyLoader::One(without_gil(py, move || build(b, state, resume_from, wc))?)
        } else if let Ok(m) = source.cast::<PyMix>() {
            let m = m.get();
            let parts = m
                .datasets
                .iter()
                .map(|d| opts.source(d.get()).map(Arc::new))
                .collect::<PyResult<Vec<_>>>()?;
            let src = Arc::new(Concat::new(parts).map_err(to_py)?);
            let b = opts.apply(LoaderBuilder::new(src))?.mix(m.config.clone());
            let wc = worker_collate.clone();
            AnyLoader::Mix(without_gil(py, move || build(b, state, resume_from, wc))?)
        } else {
            return Err(config_error(
                "a Loader's source is a zrecord.Dataset or a zrecord.mix(...)",
            ));
        };
        Ok(PyLoader {
            inner: Some(Arc::new(Mutex::new(loader))),
            pid: std::process::id(),
            stash: Mutex::new(None),
            last_before: Mutex::new(None),
            collate,
            skip_errors,
            parker: Arc::new(Parker {
                woken: Mutex::new(false),
                cv: Condvar::new(),
            }),
            batch_size,
        })
    }

    /// `Loader[T]` (a `types.GenericAlias`), for annotations evaluated at run time: the stubs
    /// make `Loader` generic in what `next()` returns (`Batch`, or what `collate` returns).
    #[classmethod]
    #[pyo3(signature = (item, /))]
    fn __class_getitem__<'py>(
        cls: &Bound<'py, PyType>,
        item: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = cls.py();
        py.import("types")?
            .getattr("GenericAlias")?
            .call1((cls, item))
    }

    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// The next batch; `StopIteration` after the last. Waits with the GIL released, and
    /// answers Ctrl-C within tens of milliseconds without losing a batch: a batch that
    /// arrives together with the interrupt is kept, `state_dict()` still points at it, and the
    /// next call returns it.
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let Some((batch, before, returned)) = self.next_batch(py)? else {
            return Ok(None);
        };
        let collate = match &self.collate {
            Some(c) if !returned => c,
            _ => {
                *lock(&self.last_before) = Some(before);
                return Ok(Some(batch.into_any()));
            }
        };
        match collate.call1(py, (batch.clone_ref(py),)) {
            Ok(out) => {
                *lock(&self.last_before) = Some(before);
                Ok(Some(out))
            }
            Err(e) => {
                // The batch stays the next one: the checkpoint does not move past it.
                *lock(&self.stash) = Some(Kept {
                    batch,
                    before,
                    returned: false,
                });
                if e.is_instance_of::<pyo3::exceptions::PyStopIteration>(py) {
                    // Leaving `__next__` with StopIteration would end the epoch silently (as a
                    // generator turns a StopIteration inside it into RuntimeError, PEP 479).
                    let wrapped = pyo3::exceptions::PyRuntimeError::new_err(
                        "collate raised StopIteration: the batch is kept, and the loader is not \
                         at its end",
                    );
                    wrapped.set_cause(py, Some(e));
                    return Err(wrapped);
                }
                Err(e)
            }
        }
    }

    /// Gives back the batch the last `next()` returned (unused): the next `next()` returns it
    /// again and `state_dict()` points at it. For adapters that stop at an epoch boundary
    /// (`zrecord.torch`).
    fn _unget(&self, batch: Py<PyAny>) -> PyResult<()> {
        self.loader()?;
        let mut stash = lock(&self.stash);
        if stash.is_some() {
            return Err(config_error("a batch is already given back"));
        }
        let before = lock(&self.last_before)
            .take()
            .ok_or_else(|| config_error("no batch to give back"))?;
        *stash = Some(Kept {
            batch,
            before,
            returned: true,
        });
        Ok(())
    }

    /// The checkpoint after the last batch returned: a JSON-serialisable dict. A loader built
    /// with `state=` this dict continues with exactly the next batch.
    fn state_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.loader()?;
        let kept = lock(&self.stash).as_ref().map(|k| k.before.clone());
        let state = match kept {
            Some(s) => s,
            None => {
                let inner = Arc::clone(self.loader()?);
                py.detach(move || lock(&inner).state())
            }
        };
        let text = serde_json::to_string(&state).map_err(|e| {
            to_py(zrecord::Error::Internal {
                reason: format!("serialising a loader state: {e}"),
            })
        })?;
        py.import("json")?.call_method1("loads", (text,))
    }

    /// A snapshot of what the loader is doing: counts, queue depths, time per stage (seconds).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let inner = Arc::clone(self.loader()?);
        let s = py.detach(move || lock(&inner).stats());
        let d = PyDict::new(py);
        d.set_item("batches", s.batches)?;
        d.set_item("records", s.records)?;
        d.set_item("batches_produced", s.batches_produced)?;
        d.set_item("failed_attempts", s.failed_attempts)?;
        d.set_item(
            "worker_queue_depths",
            PyList::new(py, s.worker_queue_depths)?,
        )?;
        d.set_item("consumer_queue_depth", s.consumer_queue_depth)?;
        d.set_item("gathers_in_flight", s.gathers_in_flight)?;
        d.set_item("records_in_flight", s.records_in_flight)?;
        d.set_item("lead", s.lead)?;
        d.set_item("max_lead", s.max_lead)?;
        d.set_item("index_time", s.index_time.as_secs_f64())?;
        d.set_item("gather_time", s.gather_time.as_secs_f64())?;
        d.set_item("transform_time", s.transform_time.as_secs_f64())?;
        d.set_item("worker_blocked", s.worker_blocked.as_secs_f64())?;
        d.set_item("retry_wait", s.retry_wait.as_secs_f64())?;
        d.set_item("consumer_wait", s.consumer_wait.as_secs_f64())?;
        Ok(d)
    }

    #[getter]
    fn batch_size(&self) -> u64 {
        self.batch_size
    }
}
