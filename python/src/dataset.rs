//! `zrecord.Dataset`: a read handle on a dataset directory or an `s3://` URL.

use crate::batch::{record_dict, Columns, PyBatch};
use crate::errors::{config_error, to_py};
use crate::guard::without_gil;
use crate::indices::indices_of;
use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use std::sync::Arc;
use zrecord::remote::{RemoteConfig, StoreOptions};
use zrecord::{Backend, Dataset, ReadConfig};

/// How a dataset was opened: enough to open it again (pickling, a forked worker, a loader's
/// reopen). Everything here is plain data.
#[derive(Clone, Debug, Default)]
pub(crate) struct OpenOptions {
    pub(crate) backend: Option<String>,
    pub(crate) verify: bool,
    pub(crate) direct: bool,
    pub(crate) cache_bytes: Option<u64>,
    pub(crate) cache_dir: Option<String>,
    pub(crate) lookahead_bytes: Option<u64>,
    pub(crate) storage_options: Vec<(String, String)>,
    pub(crate) copy_mapped: bool,
}

impl OpenOptions {
    /// Opens the dataset at `location` (a directory, or an object store's URL) with these
    /// options (`config`: [`OpenOptions::read_config`]).
    pub(crate) fn open(&self, location: &str, config: ReadConfig) -> zrecord::Result<Dataset> {
        match zrecord::remote::is_url(location) {
            true => zrecord::remote::open(location, config, self.remote_config()),
            false => Dataset::open_with(location, config),
        }
    }

    pub(crate) fn read_config(&self) -> PyResult<ReadConfig> {
        // Each field of a batch is laid out end to end in a buffer of its own by the gather (one
        // copy, in the checksum's pass), so NumPy gets it without a second copy.
        let mut c = ReadConfig::default()
            .with_verify_checksums(self.verify)
            .with_direct_io(self.direct)
            .with_columns(self.copy_mapped);
        if let Some(b) = &self.backend {
            let backend: Backend = b.parse().map_err(to_py)?;
            c = c.with_backend(backend);
        }
        Ok(c)
    }

    /// How a dataset on an object store is read: the storage options, the cache, lookahead.
    pub(crate) fn remote_config(&self) -> RemoteConfig {
        let mut remote = RemoteConfig::default();
        let mut store = StoreOptions::default();
        for (k, v) in &self.storage_options {
            store = store.with(k.clone(), v.clone());
        }
        remote = remote.store(store);
        if let Some(b) = self.cache_bytes {
            remote = remote.cache_bytes(b);
        }
        if let Some(d) = &self.cache_dir {
            remote = remote.cache_dir(d.clone());
        }
        if let Some(b) = self.lookahead_bytes {
            remote = remote.lookahead_bytes(b);
        }
        remote
    }

    fn to_kwargs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("backend", self.backend.clone())?;
        d.set_item("verify", self.verify)?;
        d.set_item("direct", self.direct)?;
        d.set_item("cache_bytes", self.cache_bytes)?;
        d.set_item("cache_dir", self.cache_dir.clone())?;
        d.set_item("lookahead_bytes", self.lookahead_bytes)?;
        d.set_item("copy_mapped", self.copy_mapped)?;
        let so = PyDict::new(py);
        for (k, v) in &self.storage_options {
            so.set_item(k, v)?;
        }
        d.set_item("storage_options", so)?;
        Ok(d)
    }
}

/// Field names from `fields=`: one name (a `str`) or a sequence of names; `TypeError` for
/// anything else.
pub(crate) fn field_names_of(obj: Option<Bound<'_, PyAny>>) -> PyResult<Option<Vec<String>>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    if let Ok(name) = obj.extract::<String>() {
        return Ok(Some(vec![name]));
    }
    let bad = || {
        pyo3::exceptions::PyTypeError::new_err(format!(
            "fields must be a field name (str) or a sequence of field names, not {}",
            obj.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_else(|_| "?".into())
        ))
    };
    if obj.is_instance_of::<pyo3::types::PyBytes>() {
        return Err(bad());
    }
    let items = obj.try_iter().map_err(|_| bad())?;
    items
        .map(|item| item.and_then(|i| i.extract::<String>()).map_err(|_| bad()))
        .collect::<PyResult<Vec<String>>>()
        .map(Some)
}

/// A zrecord dataset, opened for reading at its latest commit (see `refresh`).
#[pyclass(frozen, module = "zrecord._zrecord", name = "Dataset")]
pub struct PyDataset {
    pub(crate) inner: Arc<Dataset>,
    pub(crate) location: String,
    pub(crate) options: OpenOptions,
}

impl PyDataset {
    pub(crate) fn open_with(
        py: Python<'_>,
        location: String,
        options: OpenOptions,
    ) -> PyResult<Self> {
        let config = options.read_config()?;
        let ds = without_gil(py, || options.open(&location, config))?;
        Ok(PyDataset {
            inner: Arc::new(ds),
            location,
            options,
        })
    }

    fn take_inner(
        &self,
        py: Python<'_>,
        indices: Vec<u64>,
        fields: Option<Vec<String>>,
    ) -> PyResult<PyBatch> {
        let ds = Arc::clone(&self.inner);
        let batch = without_gil(py, move || {
            let r = match &fields {
                None => ds.gather_blocking(&indices),
                Some(f) => {
                    let names: Vec<&str> = f.iter().map(String::as_str).collect();
                    ds.gather_fields_blocking(&indices, &names)
                }
            };
            r.map(Columns::of)
        })?;
        Ok(PyBatch::new(batch))
    }
}

#[pymethods]
impl PyDataset {
    /// Opens the dataset at `path` (a directory, or an `s3://bucket/prefix` URL).
    ///
    /// `copy_mapped=True` (the default) has the gather lay each field of a batch out end to
    /// end in a buffer of its own, the one copy a NumPy array needs; False leaves records read
    /// through chunk mappings as views of them, copied together by the binding afterwards.
    #[new]
    #[pyo3(signature = (path, *, backend=None, verify=true, direct=false, cache_bytes=None,
                        cache_dir=None, lookahead_bytes=None, storage_options=None, copy_mapped=true))]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        py: Python<'_>,
        path: Bound<'_, PyAny>,
        backend: Option<String>,
        verify: bool,
        direct: bool,
        cache_bytes: Option<u64>,
        cache_dir: Option<Bound<'_, PyAny>>,
        lookahead_bytes: Option<u64>,
        storage_options: Option<Bound<'_, PyDict>>,
        copy_mapped: bool,
    ) -> PyResult<Self> {
        let location = path_str(&path)?;
        let cache_dir = cache_dir.map(|d| path_str(&d)).transpose()?;
        let options = OpenOptions {
            backend,
            verify,
            direct,
            cache_bytes,
            cache_dir,
            lookahead_bytes,
            storage_options: storage_options_of(storage_options)?,
            copy_mapped,
        };
        PyDataset::open_with(py, location, options)
    }

    /// Number of records of the commit this handle shows.
    fn __len__(&self) -> usize {
        self.inner.len() as usize
    }

    /// The path or URL the dataset was opened from.
    #[getter]
    fn path(&self) -> String {
        self.location.clone()
    }

    /// The dataset's user attributes (a new dict of JSON values), e.g. `classes` of a dataset
    /// made by `convert_images`.
    #[getter]
    fn attributes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let text = serde_json::to_string(&self.inner.attributes())
            .map_err(|e| crate::errors::config_error(e.to_string()))?;
        py.import("json")?.call_method1("loads", (text,))
    }

    /// The commit's generation number.
    #[getter]
    fn generation(&self) -> u64 {
        self.inner.generation()
    }

    /// The field names, in schema order.
    #[getter]
    fn fields(&self) -> Vec<String> {
        self.inner
            .schema()
            .fields
            .iter()
            .map(|f| f.name.clone())
            .collect()
    }

    /// The schema: a list of `zrecord.Field`.
    #[getter]
    fn schema(&self) -> Vec<crate::schema::PyField> {
        self.inner
            .schema()
            .fields
            .into_iter()
            .map(crate::schema::PyField::from_field)
            .collect()
    }

    /// The I/O backend in use (`uring`, `mmap`, `psync`, `auto`, or the object store's).
    #[getter]
    fn backend(&self) -> String {
        self.inner.backend_name().to_string()
    }

    /// Moves this handle to the latest commit; True if it changed. Batches already taken keep
    /// their bytes.
    fn refresh(&self, py: Python<'_>) -> PyResult<bool> {
        let ds = Arc::clone(&self.inner);
        without_gil(py, move || ds.refresh())
    }

    /// Gathers the records at `indices` (a sequence of ints, a 1-D integer array, or one int
    /// or NumPy integer), in that order, into one `Batch`: each field one NumPy array.
    /// `fields` (a name or a sequence of names) limits the fields read. Indices are record
    /// numbers: a negative one or one past the end raises `IndexError` (with `index` and
    /// `len`); bools (NumPy's mask), floats, bytes and strings raise `TypeError`, an array that
    /// is not 1-D `ValueError`.
    #[pyo3(signature = (indices, *, fields=None))]
    fn take(
        &self,
        py: Python<'_>,
        indices: Bound<'_, PyAny>,
        fields: Option<Bound<'_, PyAny>>,
    ) -> PyResult<PyBatch> {
        let idx = indices_of(&indices, Some(self.inner.len()))?;
        self.take_inner(py, idx, field_names_of(fields)?)
    }

    /// One record as a dict of arrays: the slow path (one Python object per field per
    /// record); use `take` for batches.
    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        index: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        if index.is_instance_of::<pyo3::types::PyBool>() {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "a dataset index must be an int, not a bool",
            ));
        }
        let n = self.inner.len() as i128;
        let int = index.call_method0("__index__").map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err(
                "a dataset index must be an int or a NumPy integer",
            )
        })?;
        // Python's sequence indexing: a negative index counts from the end.
        let i = int
            .extract::<i128>()
            .ok()
            .map(|i| if i < 0 { i + n } else { i })
            .filter(|i| (0..n).contains(i));
        let Some(i) = i else {
            let e = PyIndexError::new_err(format!(
                "index {} out of range for a dataset of {n} records",
                int.str()?
            ));
            let _ = e.value(py).setattr("index", &int);
            let _ = e.value(py).setattr("len", n);
            return Err(e);
        };
        let b = self.take_inner(py, vec![i as u64], None)?;
        record_dict(py, b, 0)
    }

    /// torch's batched fetch: the records at `indices` as a list of dicts. Slower than `take`
    /// (objects per record); for torch's map-style `DataLoader` with a batch sampler.
    fn __getitems__<'py>(
        &self,
        py: Python<'py>,
        indices: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let idx = indices_of(&indices, Some(self.inner.len()))?;
        let n = idx.len();
        let b = self.take_inner(py, idx, None)?;
        let b = Bound::new(py, b)?;
        let mut out = Vec::with_capacity(n);
        let dict = b.call_method0("to_dict")?;
        let dict = dict.cast::<PyDict>()?;
        for r in 0..n {
            let d = PyDict::new(py);
            for (k, v) in dict.iter() {
                d.set_item(k, v.get_item(r)?)?;
            }
            out.push(d);
        }
        PyList::new(py, out)
    }

    /// Pickles as the path or URL and the options: unpickling opens the dataset again (at its
    /// latest commit).
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let module = py.import("zrecord._zrecord")?;
        let reopen = module.getattr("_reopen")?;
        let args = PyTuple::new(
            py,
            [
                self.location.clone().into_pyobject(py)?.into_any(),
                self.options.to_kwargs(py)?.into_any(),
            ],
        )?;
        PyTuple::new(py, [reopen, args.into_any()])
    }

    fn __repr__(&self) -> String {
        format!(
            "<zrecord.Dataset {:?}: {} records, generation {}, fields {:?}>",
            self.location,
            self.inner.len(),
            self.inner.generation(),
            self.fields()
        )
    }
}

/// `_reopen(path, options)`: the unpickler of `Dataset`.
#[pyfunction]
pub(crate) fn _reopen(
    py: Python<'_>,
    path: String,
    options: Bound<'_, PyDict>,
) -> PyResult<PyDataset> {
    let get = |k: &str| options.get_item(k);
    let opt = OpenOptions {
        backend: get("backend")?.map(|v| v.extract()).transpose()?.flatten(),
        verify: get("verify")?
            .map(|v| v.extract())
            .transpose()?
            .unwrap_or(true),
        direct: get("direct")?
            .map(|v| v.extract())
            .transpose()?
            .unwrap_or(false),
        cache_bytes: get("cache_bytes")?
            .map(|v| v.extract())
            .transpose()?
            .flatten(),
        cache_dir: get("cache_dir")?
            .map(|v| v.extract())
            .transpose()?
            .flatten(),
        copy_mapped: get("copy_mapped")?
            .map(|v| v.extract())
            .transpose()?
            .unwrap_or(true),
        lookahead_bytes: get("lookahead_bytes")?
            .map(|v| v.extract())
            .transpose()?
            .flatten(),
        storage_options: match get("storage_options")? {
            Some(d) => d
                .cast::<PyDict>()?
                .iter()
                .map(|(k, v)| Ok((k.extract()?, v.extract()?)))
                .collect::<PyResult<_>>()?,
            None => Vec::new(),
        },
    };
    PyDataset::open_with(py, path, opt)
}

/// `storage_options` as object_store settings: each key with its value as a string.
pub(crate) fn storage_options_of(d: Option<Bound<'_, PyDict>>) -> PyResult<Vec<(String, String)>> {
    let Some(d) = d else {
        return Ok(Vec::new());
    };
    d.iter()
        .map(|(k, v)| Ok((k.extract::<String>()?, v.str()?.to_string())))
        .collect()
}

/// A path-like (str, `os.PathLike`) as a string.
pub(crate) fn path_str(obj: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = obj.extract::<String>() {
        return Ok(s);
    }
    let os = obj.py().import("os")?;
    os.call_method1("fspath", (obj,))?
        .extract::<String>()
        .map_err(|_| config_error("a path must be a str or os.PathLike of str"))
}

/// A Python value as JSON, through `json.dumps` (a `TypeError` for what it cannot encode).
pub(crate) fn json_of(py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<serde_json::Value> {
    let text: String = py
        .import("json")?
        .call_method1("dumps", (value,))?
        .extract()?;
    serde_json::from_str(&text).map_err(|e| crate::errors::config_error(e.to_string()))
}
