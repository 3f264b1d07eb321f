//! `zrecord.Batch` and `zrecord.Ragged`: a gathered batch as one Python object, each field one
//! NumPy array over the batch's memory.

use crate::errors::{to_py, value_error};
use bytes::{Bytes, BytesMut};
use numpy::ndarray::{ArrayViewD, IxDyn};
use numpy::{PyArray, PyArray1};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::sync::{Mutex, PoisonError};
use zrecord::DType;

/// Memory of a Rust batch that NumPy arrays view: their `base`. It keeps the bytes alive for
/// as long as any array (or view of one) can reach them, whatever becomes of the batch, the
/// loader or the dataset.
#[pyclass(frozen, module = "zrecord._zrecord", name = "Buffer")]
pub struct Buffer {
    bytes: Bytes,
}

#[pymethods]
impl Buffer {
    fn __len__(&self) -> usize {
        self.bytes.len()
    }

    fn __repr__(&self) -> String {
        format!("<zrecord.Buffer of {} bytes>", self.bytes.len())
    }
}

/// A read-only NumPy array of `T` with shape `dims` over `bytes`, whose base is a [`Buffer`]
/// owning them. `None` if `bytes` is not exactly `dims` items of `T` or is misaligned for `T`.
fn typed_array<'py, T: numpy::Element>(
    py: Python<'py>,
    bytes: Bytes,
    dims: &[usize],
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let items: usize = dims.iter().product();
    if items.checked_mul(std::mem::size_of::<T>()) != Some(bytes.len())
        || !(bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>())
    {
        return Ok(None);
    }
    let ptr = bytes.as_ptr().cast::<T>();
    let ptr = if items == 0 {
        std::ptr::NonNull::<T>::dangling().as_ptr().cast_const()
    } else {
        ptr
    };
    let owner = Bound::new(py, Buffer { bytes })?;
    // SAFETY: `ptr` points at `items` initialised, aligned values of `T` (checked above; every
    // bit pattern is a valid `T` for the plain numeric types used here, and `bool` fields are
    // written as 0/1 bytes), owned by the `Bytes` inside `owner`. `owner` is immutable (the
    // class is frozen) and becomes the array's base, so the memory outlives every array that
    // can reach it. An empty view uses a dangling aligned pointer it never reads.
    let view = unsafe { ArrayViewD::<T>::from_shape_ptr(IxDyn(dims), ptr) };
    // SAFETY: as above: `owner` keeps the memory `view` names alive and unchanged.
    let array = unsafe { PyArray::<T, IxDyn>::borrow_from_array(&view, owner.into_any()) };
    // Shared memory (other arrays, the Rust batch) must not change under a reader: read-only.
    array.getattr("flags")?.setattr("writeable", false)?;
    Ok(Some(array.into_any()))
}

/// `bytes` as a read-only NumPy array of `dtype` with shape `dims` (see [`typed_array`]).
pub(crate) fn dtype_array<'py>(
    py: Python<'py>,
    dtype: DType,
    bytes: Bytes,
    dims: &[usize],
) -> PyResult<Option<Bound<'py, PyAny>>> {
    match dtype {
        DType::Bytes | DType::U8 => typed_array::<u8>(py, bytes, dims),
        DType::Bool => typed_array::<bool>(py, bytes, dims),
        DType::I8 => typed_array::<i8>(py, bytes, dims),
        DType::U16 | DType::Bf16 => typed_array::<u16>(py, bytes, dims),
        DType::I16 => typed_array::<i16>(py, bytes, dims),
        DType::U32 => typed_array::<u32>(py, bytes, dims),
        DType::I32 => typed_array::<i32>(py, bytes, dims),
        DType::U64 => typed_array::<u64>(py, bytes, dims),
        DType::I64 => typed_array::<i64>(py, bytes, dims),
        DType::F16 => typed_array::<half::f16>(py, bytes, dims),
        DType::F32 => typed_array::<f32>(py, bytes, dims),
        DType::F64 => typed_array::<f64>(py, bytes, dims),
        _ => typed_array::<u8>(py, bytes, dims),
    }
}

/// The NumPy dtype string of a field's dtype (`bf16` is `uint16` here; the Python layer views
/// it as `ml_dtypes.bfloat16` when that is installed). `bytes` fields are `uint8`.
pub(crate) fn numpy_dtype(d: DType) -> &'static str {
    match d {
        DType::Bytes | DType::U8 => "u1",
        DType::Bool => "?",
        DType::I8 => "i1",
        DType::U16 | DType::Bf16 => "<u2",
        DType::I16 => "<i2",
        DType::U32 => "<u4",
        DType::I32 => "<i4",
        DType::U64 => "<u8",
        DType::I64 => "<i8",
        DType::F16 => "<f2",
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        _ => "u1",
    }
}

/// Variable-length values of one field: `values` end to end and `offsets` (`n + 1` int64,
/// `offsets[0] == 0`): item `j` is `values[offsets[j]:offsets[j + 1]]`.
#[pyclass(frozen, module = "zrecord._zrecord", name = "Ragged")]
pub struct Ragged {
    values: Py<PyAny>,
    offsets: Py<PyAny>,
    len: usize,
}

impl Ragged {
    pub(crate) fn values_ref(&self, py: Python<'_>) -> Py<PyAny> {
        self.values.clone_ref(py)
    }

    pub(crate) fn offsets_ref(&self, py: Python<'_>) -> Py<PyAny> {
        self.offsets.clone_ref(py)
    }

    pub(crate) fn from_parts(values: Py<PyAny>, offsets: Py<PyAny>, len: usize) -> Ragged {
        Ragged {
            values,
            offsets,
            len,
        }
    }
}

#[pymethods]
impl Ragged {
    /// Builds a `Ragged` from `values` (a 1-D array) and `offsets` (`n + 1` int64).
    #[new]
    fn new(py: Python<'_>, values: Bound<'_, PyAny>, offsets: Bound<'_, PyAny>) -> PyResult<Self> {
        let np = py.import("numpy")?;
        let values = np.call_method1("asarray", (values,))?;
        let offsets = np
            .call_method1("asarray", (offsets,))?
            .call_method1("astype", ("int64",))?;
        let ndim: usize = values.getattr("ndim")?.extract()?;
        if ndim != 1 {
            return Err(value_error(format!(
                "Ragged values must be 1-D, not {ndim}-D"
            )));
        }
        let offs: Vec<i64> = offsets.call_method0("tolist")?.extract()?;
        let n_values: usize = values.len()?;
        if offs.first() != Some(&0) {
            return Err(value_error("Ragged offsets must start with 0"));
        }
        if offs.windows(2).any(|w| matches!(w, [a, b] if b < a)) {
            return Err(value_error("Ragged offsets must not decrease"));
        }
        if offs.last().copied() != Some(n_values as i64) {
            return Err(value_error(format!(
                "Ragged offsets end at {:?}, but there are {n_values} values",
                offs.last()
            )));
        }
        Ok(Ragged {
            values: values.unbind(),
            offsets: offsets.unbind(),
            len: offs.len() - 1,
        })
    }

    /// The values of every item, end to end.
    #[getter]
    fn values(&self, py: Python<'_>) -> Py<PyAny> {
        self.values.clone_ref(py)
    }

    /// `len(self) + 1` int64 offsets into `values`.
    #[getter]
    fn offsets(&self, py: Python<'_>) -> Py<PyAny> {
        self.offsets.clone_ref(py)
    }

    fn __len__(&self) -> usize {
        self.len
    }

    /// Item `j`: a view of `values[offsets[j]:offsets[j + 1]]`.
    fn __getitem__<'py>(&self, py: Python<'py>, j: isize) -> PyResult<Bound<'py, PyAny>> {
        let n = self.len as isize;
        let k = if j < 0 { j + n } else { j };
        if !(0..n).contains(&k) {
            return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                "item {j} of a Ragged of {n}"
            )));
        }
        let offsets = self.offsets.bind(py);
        let a = offsets.get_item(k)?;
        let b = offsets.get_item(k + 1)?;
        let slice = pyo3::types::PySlice::new(py, a.extract()?, b.extract()?, 1);
        self.values.bind(py).get_item(slice)
    }

    /// The items as a list of arrays (one Python object per item: a slow path).
    fn to_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let items: PyResult<Vec<Bound<'py, PyAny>>> = (0..self.len as isize)
            .map(|j| self.__getitem__(py, j))
            .collect();
        PyList::new(py, items?)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let dtype = self.values.bind(py).getattr("dtype")?.str()?.to_string();
        Ok(format!("Ragged({} items of {dtype})", self.len))
    }
}

/// A gathered batch with each field's values end to end in one buffer: built without the GIL,
/// on a loader's worker thread or inside `take`'s gather call, so the Python thread only wraps
/// buffers in arrays. The gathered batch itself is dropped once its values are laid out.
pub(crate) struct Columns {
    indices: Vec<u64>,
    fields: Vec<(String, DType)>,
    shapes: Vec<Option<Vec<u64>>>,
    /// Per field: the values and each record's length in bytes.
    cols: Vec<(Bytes, Vec<usize>)>,
}

impl Columns {
    /// Lays out `batch`'s fields as columns: zero-copy where a field's values already lie back
    /// to back (aligned for its dtype), else one copy into a buffer of the field's own.
    pub(crate) fn of(batch: zrecord::Batch) -> Columns {
        let fields: Vec<(String, DType)> =
            batch.fields().map(|(n, d)| (n.to_string(), d)).collect();
        let shapes = (0..fields.len())
            .map(|f| batch.shape(f).map(<[u64]>::to_vec))
            .collect();
        let cols = fields
            .iter()
            .enumerate()
            .map(|(f, (_, d))| column_bytes(&batch, f, d.item_bytes() as usize))
            .collect();
        Columns {
            indices: batch.indices().to_vec(),
            fields,
            shapes,
            cols,
        }
    }

    fn len(&self) -> usize {
        self.indices.len()
    }

    fn position(&self, name: &str) -> zrecord::Result<usize> {
        self.fields
            .iter()
            .position(|(n, _)| n == name)
            .ok_or_else(|| zrecord::Error::UnknownField {
                field: name.to_string(),
            })
    }
}

/// One gathered batch: `len(b)` records, `b[name]` one NumPy array per field (fixed shape:
/// `(n, *shape)`; variable length: a [`Ragged`]), `b.indices`, `b.is_pad`.
#[pyclass(frozen, module = "zrecord._zrecord", name = "Batch", mapping)]
pub struct PyBatch {
    columns: Columns,
    is_pad: Option<Vec<bool>>,
    epoch: Option<u64>,
    position: Option<u64>,
    /// Each field's array, built at first use.
    cache: Mutex<Vec<Option<Py<PyAny>>>>,
}

impl PyBatch {
    pub(crate) fn new(columns: Columns) -> PyBatch {
        let n = columns.fields.len();
        PyBatch {
            columns,
            is_pad: None,
            epoch: None,
            position: None,
            cache: Mutex::new((0..n).map(|_| None).collect()),
        }
    }

    pub(crate) fn with_loader_info(mut self, is_pad: Vec<bool>, epoch: u64, position: u64) -> Self {
        self.is_pad = Some(is_pad);
        self.epoch = Some(epoch);
        self.position = Some(position);
        self
    }

    fn field_names(&self) -> Vec<String> {
        self.columns.fields.iter().map(|(n, _)| n.clone()).collect()
    }

    /// The array (or `Ragged`) of field `f`, built once.
    fn field(&self, py: Python<'_>, f: usize) -> PyResult<Py<PyAny>> {
        if let Some(Some(a)) = self
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(f)
        {
            return Ok(a.clone_ref(py));
        }
        let built = build_field(py, &self.columns, f)?;
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = cache.get_mut(f) {
            *slot = Some(built.clone_ref(py));
        }
        Ok(built)
    }

    fn position_of(&self, key: &Bound<'_, PyAny>) -> PyResult<usize> {
        let name: String = key.extract()?;
        self.columns.position(&name).map_err(to_py)
    }
}

/// Field `f`'s values as one byte buffer, zero-copy when they lie back to back (aligned to
/// `align`), else copied into a buffer of their own; and each record's length.
fn column_bytes(batch: &zrecord::Batch, f: usize, align: usize) -> (Bytes, Vec<usize>) {
    let lens: Vec<usize> = (0..batch.len())
        .map(|r| batch.value_len(r, f).unwrap_or(0))
        .collect();
    if let Some(col) = batch.column(f) {
        if (col.as_ptr() as usize).is_multiple_of(align) {
            return (col, lens);
        }
    }
    let total: usize = lens.iter().sum();
    // No zero-fill: the buffer grows by each value. The allocator's alignment (16 bytes on
    // glibc) suits every dtype; a buffer that is not aligned for `align` is copied once more
    // into 8-byte-aligned words.
    let mut out = BytesMut::with_capacity(total);
    for r in 0..batch.len() {
        if let Some(v) = batch.get(r, f) {
            out.extend_from_slice(v);
        }
    }
    let out = out.freeze();
    if (out.as_ptr() as usize).is_multiple_of(align) {
        return (out, lens);
    }
    let mut words = vec![0u64; total.div_ceil(8)];
    bytemuck_cast(&mut words)
        .get_mut(..total)
        .unwrap_or_default()
        .copy_from_slice(&out);
    (Bytes::from_owner(Words { words, len: total }), lens)
}

/// `u64` storage seen as bytes.
struct Words {
    words: Vec<u64>,
    len: usize,
}

impl AsRef<[u8]> for Words {
    fn as_ref(&self) -> &[u8] {
        let all: &[u8] = bytemuck_cast_ref(&self.words);
        all.get(..self.len).unwrap_or(all)
    }
}

fn bytemuck_cast(words: &mut [u64]) -> &mut [u8] {
    let len = std::mem::size_of_val(words);
    // SAFETY: a `u64` slice is `len` initialised bytes with no padding, and `u8` has alignment
    // 1; the returned slice borrows `words` mutably for its lifetime.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), len) }
}

fn bytemuck_cast_ref(words: &[u64]) -> &[u8] {
    let len = std::mem::size_of_val(words);
    // SAFETY: as in `bytemuck_cast`, shared.
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), len) }
}

/// Builds field `f`'s NumPy array (fixed shape) or `Ragged` (variable length).
fn build_field(py: Python<'_>, c: &Columns, f: usize) -> PyResult<Py<PyAny>> {
    let ((name, dtype), (bytes, lens)) = c
        .fields
        .get(f)
        .zip(c.cols.get(f))
        .ok_or_else(|| value_error(format!("no field #{f}")))?;
    let (name, dtype, bytes) = (name.clone(), *dtype, bytes.clone());
    let item = dtype.item_bytes() as usize;
    let index_of = |r: usize| c.indices.get(r).copied().unwrap_or(r as u64);
    let not_items = |e: String| {
        to_py(zrecord::Error::ShapeMismatch {
            field: name.clone(),
            reason: format!("the batch's bytes are not whole {dtype} items: {e}"),
        })
    };
    let total = bytes.len();
    if let Some(Some(shape)) = c.shapes.get(f) {
        let per: u64 = shape.iter().product::<u64>() * item as u64;
        if let Some((r, &len)) = lens.iter().enumerate().find(|(_, &l)| l as u64 != per) {
            return Err(to_py(zrecord::Error::ShapeMismatch {
                field: name,
                reason: format!(
                    "record {} (position {r} of the batch) has {len} bytes, but shape \
                     {shape:?} of {dtype} needs {per} bytes (an absent value has no fixed shape)",
                    index_of(r)
                ),
            }));
        }
        let mut dims: Vec<usize> = vec![c.len()];
        dims.extend(shape.iter().map(|&d| d as usize));
        let arr = dtype_array(py, dtype, bytes, &dims)?
            .ok_or_else(|| not_items(format!("{total} bytes for shape {dims:?}")))?;
        return Ok(arr.unbind());
    }
    // Variable length: offsets in items.
    let mut offsets: Vec<i64> = Vec::with_capacity(lens.len() + 1);
    let mut at = 0i64;
    offsets.push(0);
    for (r, &len) in lens.iter().enumerate() {
        if len % item != 0 {
            return Err(to_py(zrecord::Error::ShapeMismatch {
                field: name,
                reason: format!(
                    "record {} (position {r} of the batch) has {len} bytes, not a whole \
                     number of {dtype} items",
                    index_of(r)
                ),
            }));
        }
        at += (len / item) as i64;
        offsets.push(at);
    }
    let values = dtype_array(py, dtype, bytes, &[total / item])?
        .ok_or_else(|| not_items(format!("{total} bytes")))?;
    let offsets = PyArray::from_vec(py, offsets);
    let ragged = Ragged::from_parts(values.unbind(), offsets.into_any().unbind(), c.len());
    Ok(Bound::new(py, ragged)?.into_any().unbind())
}

#[pymethods]
impl PyBatch {
    /// Number of records.
    fn __len__(&self) -> usize {
        self.columns.len()
    }

    /// The field's array: `(n, *shape)` for a fixed-shape field, a `Ragged` otherwise.
    fn __getitem__(&self, py: Python<'_>, key: Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let f = self.position_of(&key)?;
        self.field(py, f)
    }

    fn __contains__(&self, key: Bound<'_, PyAny>) -> bool {
        key.extract::<String>()
            .is_ok_and(|k| self.columns.position(&k).is_ok())
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        PyList::new(py, self.field_names())?.call_method0("__iter__")
    }

    /// The field names, in schema order.
    fn keys(&self) -> Vec<String> {
        self.field_names()
    }

    /// `(name, array)` pairs.
    fn items<'py>(&self, py: Python<'py>) -> PyResult<Vec<(String, Py<PyAny>)>> {
        self.field_names()
            .into_iter()
            .enumerate()
            .map(|(f, n)| Ok((n, self.field(py, f)?)))
            .collect()
    }

    /// A dict of every field's array.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (f, n) in self.field_names().into_iter().enumerate() {
            d.set_item(n, self.field(py, f)?)?;
        }
        Ok(d)
    }

    /// The field names.
    #[getter]
    fn fields(&self) -> Vec<String> {
        self.field_names()
    }

    /// The dataset index of each record (`int64`).
    #[getter]
    fn indices<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i64>> {
        let v: Vec<i64> = self.columns.indices.iter().map(|&i| i as i64).collect();
        PyArray::from_vec(py, v)
    }

    /// Per record, True if it is shard padding (a loader's `pad_to_equal`); all False for `take`.
    #[getter]
    fn is_pad<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<bool>> {
        let v = self
            .is_pad
            .clone()
            .unwrap_or_else(|| vec![false; self.columns.len()]);
        PyArray::from_vec(py, v)
    }

    /// The epoch of a loader's batch (None for `take`).
    #[getter]
    fn epoch(&self) -> Option<u64> {
        self.epoch
    }

    /// The position of a loader's batch in its epoch (None for `take`).
    #[getter]
    fn position(&self) -> Option<u64> {
        self.position
    }

    /// Total bytes of the batch's values.
    #[getter]
    fn nbytes(&self) -> usize {
        self.columns.cols.iter().map(|(b, _)| b.len()).sum()
    }

    fn __repr__(&self) -> String {
        let fields: Vec<String> = self
            .columns
            .fields
            .iter()
            .map(|(n, d)| format!("{n}: {d}"))
            .collect();
        format!(
            "<zrecord.Batch of {} records {{{}}}>",
            self.columns.len(),
            fields.join(", ")
        )
    }
}

/// A batch's one record as a dict of arrays (a slow path: one object per field).
pub(crate) fn record_dict<'py>(
    py: Python<'py>,
    batch: PyBatch,
    r: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (f, n) in batch.field_names().into_iter().enumerate() {
        let a = batch.field(py, f)?;
        d.set_item(n, a.bind(py).get_item(r)?)?;
    }
    Ok(d)
}
