//! `push`, `pull`, `convert_npy`, `convert_images` and `convert_webdataset`: whole-dataset
//! operations, with the GIL released.

use crate::dataset::path_str;
use crate::guard::without_gil;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use zrecord::remote::{StoreOptions, TransferOptions, TransferReport};

pub(crate) fn options(
    storage_options: Option<Bound<'_, PyDict>>,
    concurrency: Option<usize>,
    single_writer: bool,
) -> PyResult<TransferOptions> {
    let mut store = StoreOptions::default();
    for (k, v) in crate::dataset::storage_options_of(storage_options)? {
        store = store.with(k, v);
    }
    let mut o = TransferOptions::default()
        .store(store)
        .single_writer(single_writer);
    if let Some(c) = concurrency {
        o = o.concurrency(c);
    }
    Ok(o)
}

fn report<'py>(py: Python<'py>, r: &TransferReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("url", r.url.as_str())?;
    d.set_item("generation", r.generation)?;
    d.set_item("files_transferred", r.transferred.0)?;
    d.set_item("bytes_transferred", r.transferred.1)?;
    d.set_item("files_skipped", r.skipped.0)?;
    d.set_item("bytes_skipped", r.skipped.1)?;
    d.set_item("already_done", r.already_done)?;
    // A collection's number of parts; None for a dataset.
    d.set_item("parts", r.parts)?;
    Ok(d)
}

/// Uploads the dataset at `path` to `url` (`s3://bucket/prefix`); the commit goes last, so
/// readers never see a partial push. A collection's root is pushed whole (its parts, then a
/// manifest listing them). Returns a report dict (`parts`: a collection's number of parts).
#[pyfunction]
#[pyo3(signature = (path, url, *, storage_options=None, concurrency=None, single_writer=false))]
pub(crate) fn push<'py>(
    py: Python<'py>,
    path: Bound<'py, PyAny>,
    url: String,
    storage_options: Option<Bound<'py, PyDict>>,
    concurrency: Option<usize>,
    single_writer: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let path = path_str(&path)?;
    let o = options(storage_options, concurrency, single_writer)?;
    let r = without_gil(py, move || zrecord::remote::push(&path, &url, &o))?;
    report(py, &r)
}

/// Downloads the dataset at `url` into the directory `path`, every file checked; safe to run
/// from several processes at once. A collection is pulled whole, as a local collection.
/// Returns a report dict (`parts`: a collection's number of parts).
#[pyfunction]
#[pyo3(signature = (url, path, *, storage_options=None, concurrency=None))]
pub(crate) fn pull<'py>(
    py: Python<'py>,
    url: String,
    path: Bound<'py, PyAny>,
    storage_options: Option<Bound<'py, PyDict>>,
    concurrency: Option<usize>,
) -> PyResult<Bound<'py, PyDict>> {
    let path = path_str(&path)?;
    let o = options(storage_options, concurrency, false)?;
    let r = without_gil(py, move || zrecord::remote::pull(&url, &path, &o))?;
    report(py, &r)
}

/// Converts `.npy` files (one per field, the same number of rows) into a new dataset at `out`.
/// Returns `(rows, bytes)`.
#[pyfunction]
#[pyo3(signature = (inputs, out, *, field_names=None, codec="raw", chunk_size_bytes=None))]
pub(crate) fn convert_npy(
    py: Python<'_>,
    inputs: Vec<Bound<'_, PyAny>>,
    out: Bound<'_, PyAny>,
    field_names: Option<Vec<String>>,
    codec: &str,
    chunk_size_bytes: Option<u64>,
) -> PyResult<(u64, u64)> {
    let inputs = inputs.iter().map(path_str).collect::<PyResult<Vec<_>>>()?;
    let out = path_str(&out)?;
    let codec = crate::schema::codec_of(codec)?;
    without_gil(py, move || {
        let mut c = zrecord::convert::NpyConvert::new(inputs.iter(), &out).codec(codec);
        if let Some(n) = field_names {
            c = c.field_names(n);
        }
        if let Some(b) = chunk_size_bytes {
            c = c.chunk_size_bytes(b);
        }
        let r = c.run()?;
        Ok((r.rows, r.bytes))
    })
}

/// A conversion's report as a dict.
fn convert_report<'py>(
    py: Python<'py>,
    r: &zrecord::convert::ConvertReport,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("records", r.rows)?;
    d.set_item("fields", r.fields)?;
    d.set_item("bytes", r.bytes)?;
    d.set_item("skipped", r.skipped)?;
    d.set_item("resumed", r.resumed)?;
    d.set_item("seconds", r.elapsed.as_secs_f64())?;
    Ok(d)
}

/// Converts a folder of class folders of JPEG/PNG/WebP images (`dir/<class>/**/*.{jpg,jpeg,png,webp}`)
/// into a new dataset at `out`: `image` bytes and `label` (the class's index), the class names
/// stored as the attribute `classes`. Resumable: an interrupted run continues when called again
/// with the same arguments. Returns a report dict.
#[pyfunction]
#[pyo3(signature = (dir, out, *, max_side=None, quality=90, skip_bad=false, shuffle_seed=None, codec="raw", chunk_size_bytes=None, num_threads=2, commit_every=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn convert_images<'py>(
    py: Python<'py>,
    dir: Bound<'py, PyAny>,
    out: Bound<'py, PyAny>,
    max_side: Option<u32>,
    quality: u8,
    skip_bad: bool,
    shuffle_seed: Option<u64>,
    codec: &str,
    chunk_size_bytes: Option<u64>,
    num_threads: usize,
    commit_every: Option<u64>,
) -> PyResult<Bound<'py, PyDict>> {
    let dir = path_str(&dir)?;
    let out = path_str(&out)?;
    let codec = crate::schema::codec_of(codec)?;
    let r = without_gil(py, move || {
        let mut c = zrecord::convert::ImagesConvert::new(&dir, &out)
            .codec(codec)
            .quality(quality)
            .skip_bad(skip_bad)
            .num_threads(num_threads);
        if let Some(s) = max_side {
            c = c.max_side(s);
        }
        if let Some(s) = shuffle_seed {
            c = c.shuffle(s);
        }
        if let Some(b) = chunk_size_bytes {
            c = c.chunk_size_bytes(b);
        }
        if let Some(n) = commit_every {
            c = c.commit_every(n);
        }
        c.run()
    })?;
    convert_report(py, &r)
}

/// Converts WebDataset tar shards (paths, in order: expand globs first) into a new dataset at
/// `out`: one record per sample, one field per extension (`cls` as int64 when every one is an
/// integer). Resumable like `convert_images`. Returns a report dict.
#[pyfunction]
#[pyo3(signature = (shards, out, *, max_side=None, quality=90, skip_bad=false, codec="raw", chunk_size_bytes=None, num_threads=2, commit_every=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn convert_webdataset<'py>(
    py: Python<'py>,
    shards: Vec<Bound<'py, PyAny>>,
    out: Bound<'py, PyAny>,
    max_side: Option<u32>,
    quality: u8,
    skip_bad: bool,
    codec: &str,
    chunk_size_bytes: Option<u64>,
    num_threads: usize,
    commit_every: Option<u64>,
) -> PyResult<Bound<'py, PyDict>> {
    let shards = shards.iter().map(path_str).collect::<PyResult<Vec<_>>>()?;
    let out = path_str(&out)?;
    let codec = crate::schema::codec_of(codec)?;
    let r = without_gil(py, move || {
        let mut c = zrecord::convert::WebDatasetConvert::new(shards.iter(), &out)
            .codec(codec)
            .quality(quality)
            .skip_bad(skip_bad)
            .num_threads(num_threads);
        if let Some(s) = max_side {
            c = c.max_side(s);
        }
        if let Some(b) = chunk_size_bytes {
            c = c.chunk_size_bytes(b);
        }
        if let Some(n) = commit_every {
            c = c.commit_every(n);
        }
        c.run()
    })?;
    convert_report(py, &r)
}
