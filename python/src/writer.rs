//! `zrecord.Writer`: creates or opens a dataset and appends, modifies, deletes and commits.

use crate::batch::Ragged;
use crate::dataset::path_str;
use crate::errors::{config_error, to_py, value_error, value_schema_error};
use crate::guard::{guarded, without_gil};
use crate::indices::index_of;
use crate::schema::{dtype_of, schema_from};
use numpy::{PyArray1, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::{Arc, Mutex, PoisonError};
use zrecord::{DType, Field, Writer, WriterConfig};

/// The contiguous bytes of `v` as field `f`'s dtype, checked (`zrecord/_convert.py`): a value
/// that does not keep its value in the dtype (an integer out of range, a fraction into an
/// integer field, a 2 into a bool field, a float that overflows), or that has another shape than
/// a fixed-shape field's, raises `SchemaError` naming the field, the record (`index`) and the
/// value. With `rows`, `v` is a batch column: its first axis runs over records `index, index +
/// 1, ...`. `bytes` objects are the value's raw bytes (only their length is checked).
fn value_bytes(
    py: Python<'_>,
    f: &Field,
    v: &Bound<'_, PyAny>,
    index: u64,
    rows: bool,
) -> PyResult<Vec<u8>> {
    let arr = py.import("zrecord._convert")?.call_method1(
        "to_bytes",
        (
            v,
            f.dtype.name(),
            f.name.as_str(),
            f.shape.clone(),
            index,
            rows,
        ),
    )?;
    let flat = arr.cast_into::<PyArray1<u8>>()?;
    let ro = flat.readonly();
    Ok(ro.as_slice()?.to_vec())
}

/// Whether `f` must have a value in every record: a fixed shape with at least one item (the
/// schema has no notion of an optional fixed-shape field, and a batch's `(n, *shape)` array has
/// no slot for an absent value).
fn required(f: &Field) -> bool {
    f.shape
        .as_ref()
        .is_some_and(|s| s.iter().product::<u64>() > 0)
}

/// The error for a fixed-shape field given no value for record `index`.
fn missing(f: &Field, index: u64, given: &str) -> PyErr {
    value_schema_error(
        &f.name,
        index,
        &format!(
            "{given}, but the field has fixed shape {:?} and needs a value in every record \
             (only a variable-length field may be absent)",
            f.shape.clone().unwrap_or_default()
        ),
    )
}

/// A writer on one dataset: `append`, `append_batch`, `modify`, `delete`, `commit`. Use it as
/// a context manager: leaving the block commits (or, on an exception, drops what was not
/// committed).
#[pyclass(frozen, module = "zrecord._zrecord", name = "Writer")]
pub struct PyWriter {
    inner: Arc<Mutex<Option<Writer>>>,
    fields: Vec<Field>,
    path: String,
    /// The process that opened the writer: its append tasks and its lock live only there.
    pid: u32,
}

impl Drop for PyWriter {
    fn drop(&mut self) {
        // In a child of fork() the parent's writer is leaked, not dropped: dropping it would
        // wait on append tasks that did not cross the fork (and release the parent's lock).
        if std::process::id() != self.pid {
            std::mem::forget(std::mem::replace(
                &mut self.inner,
                Arc::new(Mutex::new(None)),
            ));
        }
    }
}

/// The error for a writer used in a child of `fork()`: `ConfigError`, as for a `Loader`.
fn forked() -> PyErr {
    config_error(
        "this Writer was opened in another process (before a fork): its append tasks and its \
         lock live there; open a Writer in this process",
    )
}

impl PyWriter {
    fn run<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Writer) -> zrecord::Result<T> + Send,
    ) -> PyResult<T> {
        if std::process::id() != self.pid {
            return Err(forked());
        }
        let inner = Arc::clone(&self.inner);
        // The lock is taken and released without the GIL, and the error is turned into a
        // Python exception only after both: never the GIL while holding the lock.
        let r = py.detach(move || {
            guarded(|| {
                let mut g = inner.lock().unwrap_or_else(PoisonError::into_inner);
                Ok(g.as_mut().map(f))
            })
        })?;
        match r {
            None => Err(config_error("the writer is closed")),
            Some(r) => r.map_err(to_py),
        }
    }

    fn from_writer(w: Writer, path: String) -> PyResult<Self> {
        let ds = zrecord::Dataset::open(w.path()).map_err(to_py)?;
        let fields = ds.schema().fields;
        Ok(PyWriter {
            inner: Arc::new(Mutex::new(Some(w))),
            fields,
            path,
            pid: std::process::id(),
        })
    }

    /// The number of records, committed or not (the index the next append gets).
    fn len(&self, py: Python<'_>) -> PyResult<u64> {
        if std::process::id() != self.pid {
            return Err(forked());
        }
        let inner = Arc::clone(&self.inner);
        Ok(py.detach(move || {
            inner
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
                .map_or(0, |w| w.len())
        }))
    }

    /// Refuses a key of `d` that names no field.
    fn known_keys(&self, d: &Bound<'_, PyDict>) -> PyResult<()> {
        for k in d.keys() {
            let k: String = k.extract()?;
            if !self.fields.iter().any(|f| f.name == k) {
                return Err(to_py(zrecord::Error::UnknownField { field: k }));
            }
        }
        Ok(())
    }

    /// One record's field values, in schema order, from a dict; `index` is the record it
    /// becomes. A missing or `None` value is an absent one, refused for a fixed-shape field.
    fn record(
        &self,
        py: Python<'_>,
        record: &Bound<'_, PyDict>,
        index: u64,
    ) -> PyResult<Vec<Vec<u8>>> {
        self.known_keys(record)?;
        self.fields
            .iter()
            .map(|f| match record.get_item(&f.name)? {
                Some(v) if !v.is_none() => value_bytes(py, f, &v, index, false),
                Some(_) if required(f) => Err(missing(f, index, "the value is None")),
                None if required(f) => Err(missing(f, index, "the record has no value")),
                _ => Ok(Vec::new()),
            })
            .collect()
    }
}

#[pymethods]
impl PyWriter {
    /// Creates a new dataset at `path` with `schema` (a dict `{name: dtype}` /
    /// `{name: (dtype, shape)}` or a list of `zrecord.Field`).
    #[staticmethod]
    #[pyo3(signature = (path, schema, *, chunk_size_bytes=None, num_writers=None))]
    fn create(
        py: Python<'_>,
        path: Bound<'_, PyAny>,
        schema: Bound<'_, PyAny>,
        chunk_size_bytes: Option<u64>,
        num_writers: Option<usize>,
    ) -> PyResult<Self> {
        let path = path_str(&path)?;
        let schema = schema_from(&schema, chunk_size_bytes)?;
        let mut config = WriterConfig::default();
        if let Some(n) = num_writers {
            config = config.num_writers(n);
        }
        let p = path.clone();
        let w = without_gil(py, move || Writer::create(&p, &schema, config))?;
        PyWriter::from_writer(w, path)
    }

    /// Opens the dataset at `path` for writing (one writer at a time: `WriterBusyError`).
    #[staticmethod]
    #[pyo3(signature = (path, *, num_writers=None))]
    fn open(py: Python<'_>, path: Bound<'_, PyAny>, num_writers: Option<usize>) -> PyResult<Self> {
        let path = path_str(&path)?;
        let mut config = WriterConfig::default();
        if let Some(n) = num_writers {
            config = config.num_writers(n);
        }
        let p = path.clone();
        let w = without_gil(py, move || Writer::open(&p, config))?;
        PyWriter::from_writer(w, path)
    }

    /// Appends one record (a dict of field values: arrays, scalars, `bytes`); returns its
    /// index. Visible to readers after `commit`. A missing or `None` value is an absent one,
    /// allowed for a variable-length field only: a fixed-shape field needs a value of exactly
    /// its shape. A value that does not fit its field raises `SchemaError` (see
    /// `zrecord/_convert.py`).
    fn append(&self, py: Python<'_>, record: Bound<'_, PyDict>) -> PyResult<u64> {
        let index = self.len(py)?;
        let values = self.record(py, &record, index)?;
        self.run(py, move |w| w.append(&values))
    }

    /// Appends a batch given as a dict of columns: a fixed-shape field as an array of shape
    /// `(n, *shape)` (or a list of values of its shape), a variable-length one as a `Ragged`
    /// or a list of arrays/bytes (`None` for an absent value). Returns the range of new
    /// indices as `(start, stop)`. Every value is checked as `append` checks it, and a
    /// fixed-shape field needs its column; a refusal raises `SchemaError` naming the field and
    /// the record before any row is appended.
    fn append_batch(&self, py: Python<'_>, batch: Bound<'_, PyDict>) -> PyResult<(u64, u64)> {
        self.known_keys(&batch)?;
        let start = self.len(py)?;
        let mut n: Option<usize> = None;
        // A fixed-shape field without a column: refused once the batch is known to have rows.
        let mut without: Option<&Field> = None;
        // Per field: the bytes of every record, end to end, and each record's end.
        let mut columns: Vec<(Vec<u8>, Vec<usize>)> = Vec::with_capacity(self.fields.len());
        for f in &self.fields {
            let v = match batch.get_item(&f.name)? {
                Some(v) if !v.is_none() => v,
                _ => {
                    if required(f) && without.is_none() {
                        without = Some(f);
                    }
                    columns.push((Vec::new(), Vec::new()));
                    continue;
                }
            };
            let item = f.dtype.item_bytes() as usize;
            let (bytes, ends) = if let Ok(r) = v.cast::<Ragged>() {
                let r = r.get();
                let offsets = r.offsets_ref(py);
                let values = py
                    .import("zrecord._convert")?
                    .call_method1(
                        "ragged_to_bytes",
                        (
                            r.values_ref(py),
                            offsets.bind(py),
                            f.dtype.name(),
                            f.name.as_str(),
                            f.shape.clone(),
                            start,
                        ),
                    )?
                    .cast_into::<PyArray1<u8>>()?;
                let values = values.readonly().as_slice()?.to_vec();
                let offs: Vec<i64> = offsets.bind(py).call_method0("tolist")?.extract()?;
                let ends = offs
                    .iter()
                    .skip(1)
                    .map(|&o| usize::try_from(o).unwrap_or(0) * item)
                    .collect();
                (values, ends)
            } else if v.cast::<numpy::PyUntypedArray>().is_ok() {
                let arr = v.cast::<numpy::PyUntypedArray>()?;
                let rows = arr.shape().first().copied().unwrap_or(0);
                let bytes = value_bytes(py, f, &v, start, true)?;
                let per = bytes.len().checked_div(rows).unwrap_or(0);
                (bytes, (1..=rows).map(|r| r * per).collect())
            } else {
                let mut all = Vec::new();
                let mut ends = Vec::new();
                for (r, x) in v.try_iter()?.enumerate() {
                    let x = x?;
                    let index = start + r as u64;
                    if x.is_none() {
                        if required(f) {
                            return Err(missing(f, index, "the value is None"));
                        }
                    } else {
                        all.extend(value_bytes(py, f, &x, index, false)?);
                    }
                    ends.push(all.len());
                }
                (all, ends)
            };
            match n {
                None => n = Some(ends.len()),
                Some(m) if m != ends.len() => {
                    return Err(value_error(format!(
                        "field {:?} has {} records, another field {m}",
                        f.name,
                        ends.len()
                    )))
                }
                _ => {}
            }
            columns.push((bytes, ends));
        }
        if let Some(f) = without.filter(|_| n.unwrap_or(0) > 0) {
            return Err(missing(f, start, "the batch has no column for it"));
        }
        let n = n.unwrap_or(0);
        self.run(py, move |w| {
            let mut records: Vec<Vec<&[u8]>> = Vec::with_capacity(n);
            for r in 0..n {
                let rec = columns
                    .iter()
                    .map(|(bytes, ends)| {
                        if ends.is_empty() {
                            return &[][..];
                        }
                        let start = if r == 0 {
                            0
                        } else {
                            ends.get(r - 1).copied().unwrap_or(0)
                        };
                        let end = ends.get(r).copied().unwrap_or(start);
                        bytes.get(start..end).unwrap_or(&[])
                    })
                    .collect();
                records.push(rec);
            }
            let range = w.append_many(&records)?;
            Ok((range.start, range.end))
        })
    }

    /// Appends Arrow data, one record per row, and returns the range of new indices as
    /// `(start, stop)`. `data` is anything with the Arrow PyCapsule interface: a pyarrow
    /// `Table`, `RecordBatch` or `RecordBatchReader`, a polars `DataFrame`, a struct array, …
    /// (zrecord does not import pyarrow). Columns are matched to fields by name; every field
    /// needs a column and every column a field. Fitting types: integers, floats and bools →
    /// the same dtype; fixed-size lists (nested too) → that dtype and shape; binary and string
    /// columns → `bytes`/`u8` fields of variable length; lists of a primitive → variable-length
    /// values of its dtype. A null is stored as an absent value. Anything else raises
    /// `SchemaError` naming the column (attributes `column`, `arrow_type`, `dtype`, `reason`,
    /// or `missing`/`extra`/`duplicated` for names, or `row` for a null item inside a list).
    /// Each record batch is checked whole before any of its rows is appended; the rows of
    /// earlier batches of a stream stay appended. The GIL is released while appending; the
    /// values are copied straight from the Arrow buffers.
    fn append_arrow(&self, py: Python<'_>, data: Bound<'_, PyAny>) -> PyResult<(u64, u64)> {
        let input = crate::arrow::import(&data)?;
        let r = self.run(py, move |w| {
            let start = w.len();
            match input {
                crate::arrow::ArrowInput::Batch(batch) => {
                    w.append_record_batch(&batch)?;
                }
                crate::arrow::ArrowInput::Stream(reader) => {
                    for batch in reader {
                        match batch {
                            Ok(batch) => {
                                w.append_record_batch(&batch)?;
                            }
                            Err(e) => return Ok(Err(e.to_string())),
                        }
                    }
                }
            }
            Ok(Ok((start, w.len())))
        })?;
        r.map_err(|e| value_error(format!("reading the Arrow stream failed: {e}")))
    }

    /// Replaces field `field` of record `index` (a record number: negative indices are refused,
    /// as by `Dataset.take`). The value is checked as `append` checks it; `None` makes a
    /// variable-length field's value absent.
    fn modify(
        &self,
        py: Python<'_>,
        index: Bound<'_, PyAny>,
        field: String,
        value: Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let len = self.len(py)?;
        let index = index_of(&index, Some(len))?;
        let f = self
            .fields
            .iter()
            .find(|f| f.name == field)
            .ok_or_else(|| {
                to_py(zrecord::Error::UnknownField {
                    field: field.clone(),
                })
            })?;
        let bytes = if value.is_none() {
            if required(f) {
                return Err(missing(f, index, "the value is None"));
            }
            Vec::new()
        } else {
            value_bytes(py, f, &value, index, false)?
        };
        self.run(py, move |w| w.modify(index, &field, &bytes))
    }

    /// Deletes record `index` (the last record moves into its place). Negative indices are
    /// refused, as by `modify`.
    fn delete(&self, py: Python<'_>, index: Bound<'_, PyAny>) -> PyResult<()> {
        let len = self.len(py)?;
        let index = index_of(&index, Some(len))?;
        self.run(py, move |w| w.delete(index))
    }

    /// Trains a zstd dictionary for `field` (a `zstd_dict` field) on `samples` (a sequence of
    /// bytes-like records) and compresses the field's next records with it; returns its
    /// number. Without a call, the writer trains one on the field's first records itself.
    fn train_dictionary(
        &self,
        py: Python<'_>,
        field: String,
        samples: Vec<Vec<u8>>,
    ) -> PyResult<u8> {
        self.run(py, move |w| w.train_dictionary(&field, &samples))
    }

    /// Rewrites every live record, in index order, into fresh chunks and commits that at once
    /// (pending changes are committed first): the space modified and deleted records held is
    /// reclaimed. With `retrain_dictionaries`, every `zstd_dict` field is compressed again
    /// with a dictionary trained on records sampled across the whole dataset. Returns a dict:
    /// generation, records, live_bytes (after), live_bytes_before, rewritten (False when every
    /// stored byte was live and nothing was retrained: nothing is committed then),
    /// chunk_bytes_before/after, chunks_before/after.
    #[pyo3(signature = (*, retrain_dictionaries = false))]
    fn rebalance<'py>(
        &self,
        py: Python<'py>,
        retrain_dictionaries: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let options =
            zrecord::RebalanceOptions::default().retrain_dictionaries(retrain_dictionaries);
        let r = self.run(py, move |w| w.rebalance_with(options))?;
        let d = PyDict::new(py);
        d.set_item("generation", r.generation)?;
        d.set_item("records", r.records)?;
        d.set_item("live_bytes", r.live_bytes)?;
        d.set_item("live_bytes_before", r.live_bytes_before)?;
        d.set_item("rewritten", r.rewritten)?;
        d.set_item("chunk_bytes_before", r.chunk_bytes_before)?;
        d.set_item("chunk_bytes_after", r.chunk_bytes_after)?;
        d.set_item("chunks_before", r.chunks_before)?;
        d.set_item("chunks_after", r.chunks_after)?;
        Ok(d)
    }

    /// Commits: everything appended, modified and deleted becomes visible at once, crash-safe.
    /// Returns the new generation.
    fn commit(&self, py: Python<'_>) -> PyResult<u64> {
        self.run(py, |w| w.commit())
    }

    /// Sets dataset attribute `key` to `value` (anything `json.dumps` takes), written by the
    /// next commit. Keys are 1-256 bytes; all attributes together at most 1 MiB of JSON.
    fn set_attribute(&self, py: Python<'_>, key: String, value: Bound<'_, PyAny>) -> PyResult<()> {
        let value = crate::dataset::json_of(py, &value)?;
        self.run(py, move |w| w.set_attribute(key, value))
    }

    /// Removes dataset attribute `key` at the next commit (nothing if it has none).
    fn remove_attribute(&self, py: Python<'_>, key: String) -> PyResult<()> {
        self.run(py, move |w| w.remove_attribute(&key).map(|_| ()))
    }

    /// Number of records, committed or not.
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.len(py).map(|n| n as usize)
    }

    #[getter]
    fn path(&self) -> String {
        self.path.clone()
    }

    /// Drops the writer (what was not committed is not kept) and releases its lock. In a child
    /// of `fork()` it raises `ConfigError`, as every other method does there: the writer, its
    /// lock and its tasks belong to the parent, which still has them.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if std::process::id() != self.pid {
            return Err(forked());
        }
        let inner = Arc::clone(&self.inner);
        py.detach(move || {
            let w = inner.lock().unwrap_or_else(PoisonError::into_inner).take();
            drop(w);
        });
        Ok(())
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// Commits unless the block raised, then closes.
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<Bound<'_, PyAny>>,
        _exc: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let r = if exc_type.is_none() {
            self.commit(py).map(|_| ())
        } else {
            Ok(())
        };
        let closed = self.close(py);
        r.and(closed).map(|_| false)
    }
}

/// Unused: keeps `dtype_of` reachable from this module's docs.
#[allow(dead_code)]
fn _dtype(s: &str) -> PyResult<DType> {
    dtype_of(s)
}
