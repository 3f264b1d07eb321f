//! `zrecord.Batch` and `zrecord.Ragged`: a gathered batch as one Python object, each field one
//! NumPy array over the batch's memory.

use crate::errors::{field_kind_error, to_py, value_error};
use bytes::{Bytes, BytesMut};
use numpy::ndarray::{ArrayViewMutD, IxDyn};
use numpy::{PyArray, PyArray1};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use std::sync::Condvar;
use std::sync::{Mutex, PoisonError};
use std::thread::ThreadId;
use zrecord::DType;

/// The memory of one field of a batch: shared with others (a chunk mapping, a slab other
/// fields also live in), so arrays over it are read-only; or owned by this field alone (its own
/// copy, or a slab nothing else holds), so arrays over it are writable.
pub(crate) enum Memory {
    Shared(Bytes),
    Owned(BytesMut),
}

impl Memory {
    /// `bytes`, owned if nothing else holds the buffer it lies in.
    fn of(bytes: Bytes) -> Memory {
        match bytes.try_into_mut() {
            Ok(owned) => Memory::Owned(owned),
            Err(shared) => Memory::Shared(shared),
        }
    }

    fn len(&self) -> usize {
        match self {
            Memory::Shared(b) => b.len(),
            Memory::Owned(b) => b.len(),
        }
    }
}

/// Memory of a Rust batch that NumPy arrays view: their `base`. It keeps the bytes alive for
/// as long as any array (or view of one) can reach them, whatever becomes of the batch, the
/// loader or the dataset.
#[pyclass(frozen, module = "zrecord._zrecord", name = "Buffer")]
pub struct Buffer {
    memory: Memory,
    zero_copy: bool,
}

#[pymethods]
impl Buffer {
    fn __len__(&self) -> usize {
        self.memory.len()
    }

    /// True if the memory is the gather's own (a slab or a chunk mapping), False if the binding
    /// copied the field's values together.
    #[getter]
    fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// True if arrays over this memory may be written (nothing else holds it).
    #[getter]
    fn writable(&self) -> bool {
        matches!(self.memory, Memory::Owned(_))
    }

    fn __repr__(&self) -> String {
        format!("<zrecord.Buffer of {} bytes>", self.memory.len())
    }
}

/// A NumPy array of `T` with shape `dims` over `memory`, whose base is a [`Buffer`] owning it:
/// writable over owned memory, read-only over shared memory. `None` if the memory is not
/// exactly `dims` items of `T` or is misaligned for `T`.
fn typed_array<'py, T: numpy::Element>(
    py: Python<'py>,
    mut memory: Memory,
    zero_copy: bool,
    dims: &[usize],
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let items: usize = dims.iter().product();
    let (ptr, writable) = match &mut memory {
        Memory::Shared(b) => (b.as_ptr().cast_mut(), false),
        Memory::Owned(b) => (b.as_mut_ptr(), true),
    };
    if items.checked_mul(std::mem::size_of::<T>()) != Some(memory.len())
        || !(ptr as usize).is_multiple_of(std::mem::align_of::<T>())
    {
        return Ok(None);
    }
    let ptr = if items == 0 {
        std::ptr::NonNull::<T>::dangling().as_ptr()
    } else {
        ptr.cast::<T>()
    };
    // The heap block `ptr` names does not move when `memory` moves into the owner.
    let owner = Bound::new(py, Buffer { memory, zero_copy })?;
    // SAFETY: `ptr` points at `items` initialised, aligned values of `T` (checked above; every
    // bit pattern is a valid `T` for the numeric types this is called with: integers, f16,
    // f32, f64, never `bool`), in the memory inside `owner`. `owner` never reads or changes
    // that memory after this (the class is frozen and its only accessors read lengths) and
    // becomes the array's base, so the memory outlives every array that can reach it. The
    // pointer of owned memory came from `BytesMut::as_mut_ptr`, and nothing else holds that
    // buffer, so the array may write through it; shared memory is made read-only below. An
    // empty view uses a dangling aligned pointer it never reads.
    let view = unsafe { ArrayViewMutD::<T>::from_shape_ptr(IxDyn(dims), ptr) };
    // SAFETY: as above: `owner` keeps the memory `view` names alive, and nothing but the
    // array reaches it.
    let array = unsafe { PyArray::<T, IxDyn>::borrow_from_array(&view, owner.into_any()) };
    if !writable {
        // Shared with a mapping or with other fields: never written through the array.
        array.getattr("flags")?.setattr("writeable", false)?;
    }
    Ok(Some(array.into_any()))
}

/// `memory` as a NumPy array of `dtype` with shape `dims` (see [`typed_array`]).
pub(crate) fn dtype_array<'py>(
    py: Python<'py>,
    dtype: DType,
    memory: Memory,
    zero_copy: bool,
    dims: &[usize],
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let m = memory;
    let z = zero_copy;
    match dtype {
        DType::Bytes | DType::U8 => typed_array::<u8>(py, m, z, dims),
        // Bytes on disk may hold any value, and a Rust `bool` may only be 0 or 1: the array is
        // made over `u8` and NumPy views it as bool (which reads any nonzero byte as True).
        DType::Bool => typed_array::<u8>(py, m, z, dims)?
            .map(|a| a.call_method1("view", ("?",)))
            .transpose(),
        DType::I8 => typed_array::<i8>(py, m, z, dims),
        DType::U16 | DType::Bf16 => typed_array::<u16>(py, m, z, dims),
        DType::I16 => typed_array::<i16>(py, m, z, dims),
        DType::U32 => typed_array::<u32>(py, m, z, dims),
        DType::I32 => typed_array::<i32>(py, m, z, dims),
        DType::U64 => typed_array::<u64>(py, m, z, dims),
        DType::I64 => typed_array::<i64>(py, m, z, dims),
        DType::F16 => typed_array::<half::f16>(py, m, z, dims),
        DType::F32 => typed_array::<f32>(py, m, z, dims),
        DType::F64 => typed_array::<f64>(py, m, z, dims),
        _ => typed_array::<u8>(py, m, z, dims),
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
    /// Builds a `Ragged` from `values` (a 1-D array) and `offsets` (`n + 1` integers, stored
    /// as int64): `ValueError` for offsets that are not integers, not 1-D, do not start at 0,
    /// decrease, or do not end at the number of values.
    #[new]
    fn new(py: Python<'_>, values: Bound<'_, PyAny>, offsets: Bound<'_, PyAny>) -> PyResult<Self> {
        let np = py.import("numpy")?;
        let values = np.call_method1("asarray", (values,))?;
        let offsets = np.call_method1("asarray", (offsets,))?;
        let ndim: usize = values.getattr("ndim")?.extract()?;
        if ndim != 1 {
            return Err(value_error(format!(
                "Ragged values must be 1-D, not {ndim}-D"
            )));
        }
        let kind: String = offsets.getattr("dtype")?.getattr("kind")?.extract()?;
        let n_offsets: usize = offsets.getattr("size")?.extract()?;
        // An empty list comes as float64: no value to bend.
        if !(kind == "i" || kind == "u" || n_offsets == 0) {
            return Err(value_error(format!(
                "Ragged offsets must be integers, not {}",
                offsets.getattr("dtype")?.str()?
            )));
        }
        let offsets_ndim: usize = offsets.getattr("ndim")?.extract()?;
        if offsets_ndim != 1 {
            return Err(value_error(format!(
                "Ragged offsets must be 1-D, not {offsets_ndim}-D"
            )));
        }
        let offs: Vec<i128> = offsets.call_method0("tolist")?.extract()?;
        let offsets = offsets.call_method1("astype", ("int64",))?;
        let n_values: usize = values.len()?;
        if offs.first() != Some(&0) {
            return Err(value_error("Ragged offsets must start with 0"));
        }
        if offs.windows(2).any(|w| matches!(w, [a, b] if b < a)) {
            return Err(value_error("Ragged offsets must not decrease"));
        }
        if let Some(&last) = offs.last().filter(|&&l| l != n_values as i128) {
            return Err(value_error(format!(
                "Ragged offsets end at {last}, but there are {n_values} values"
            )));
        }
        Ok(Ragged {
            values: values.unbind(),
            offsets: offsets.unbind(),
            len: offs.len() - 1,
        })
    }

    /// Pickles as its values and offsets (copies of the arrays).
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let r = slf.get();
        let args = PyTuple::new(py, [r.values.clone_ref(py), r.offsets.clone_ref(py)])?;
        PyTuple::new(py, [slf.get_type().into_any(), args.into_any()])
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
    /// Per field: its values until its array is built (which takes them).
    cols: Mutex<Vec<Slot>>,
    /// Signalled when a field's build ends (see [`Slot::Building`]).
    built: Condvar,
    nbytes: usize,
}

/// Where a field's values are.
enum Slot {
    /// Not built yet.
    Ready(Col),
    /// Taken by this thread to build the field's array. Building calls into Python (it makes
    /// objects, and a garbage collection with finalizers may run then and let another thread
    /// take the GIL); a second reader of the field waits, without the GIL, for the array.
    Building(ThreadId),
    /// Built: the array is in the batch's cache.
    Done,
}

/// One field's values end to end, and each record's length in bytes.
struct Col {
    memory: Memory,
    lens: Vec<usize>,
    zero_copy: bool,
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
        let cols: Vec<(Bytes, Vec<usize>, bool)> = fields
            .iter()
            .enumerate()
            .map(|(f, (_, d))| column_bytes(&batch, f, d.item_bytes() as usize))
            .collect();
        let indices = batch.indices().to_vec();
        // The batch lets go of its slab and mappings here, so a column that is the only holder
        // of its buffer becomes owned (writable) memory.
        drop(batch);
        let nbytes = cols.iter().map(|(b, _, _)| b.len()).sum();
        let cols = cols
            .into_iter()
            .map(|(bytes, lens, zero_copy)| {
                Slot::Ready(Col {
                    memory: Memory::of(bytes),
                    lens,
                    zero_copy,
                })
            })
            .collect();
        Columns {
            indices,
            fields,
            shapes,
            cols: Mutex::new(cols),
            built: Condvar::new(),
            nbytes,
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
/// `(n, *shape)`; variable length: a [`Ragged`]; `b.array(name)` and `b.ragged(name)` return
/// one kind each, for type checkers), `b.indices`, `b.is_pad`.
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

    /// The array (or `Ragged`) of field `f`, built once. A thread that finds another one
    /// building it waits for that array (with the GIL released); the same thread reading the
    /// field again from inside its own build (a finalizer) gets an error, never a deadlock.
    fn field(&self, py: Python<'_>, f: usize) -> PyResult<Py<PyAny>> {
        loop {
            if let Some(Some(a)) = self
                .cache
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(f)
            {
                return Ok(a.clone_ref(py));
            }
            let Some(built) = build_field(py, &self.columns, f)? else {
                // Another thread is building it: wait until it is done, then read the cache.
                let c = &self.columns;
                let me = std::thread::current().id();
                py.detach(|| {
                    let mut cols = c.cols.lock().unwrap_or_else(PoisonError::into_inner);
                    while matches!(cols.get(f), Some(Slot::Building(t)) if *t != me) {
                        cols = c.built.wait(cols).unwrap_or_else(PoisonError::into_inner);
                    }
                });
                continue;
            };
            if let Some(slot) = self
                .cache
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_mut(f)
            {
                *slot = Some(built.clone_ref(py));
            }
            // In the cache first, then done: a waiter that wakes finds the array.
            finish(&self.columns, f, Slot::Done);
            return Ok(built);
        }
    }

    fn position_of(&self, key: &Bound<'_, PyAny>) -> PyResult<usize> {
        let name: String = key.extract()?;
        self.columns.position(&name).map_err(to_py)
    }
}

/// Field `f`'s values as one byte buffer, zero-copy when they lie back to back (aligned to
/// `align`), else copied into a buffer of their own; and each record's length.
fn column_bytes(batch: &zrecord::Batch, f: usize, align: usize) -> (Bytes, Vec<usize>, bool) {
    let lens: Vec<usize> = (0..batch.len())
        .map(|r| batch.value_len(r, f).unwrap_or(0))
        .collect();
    if let Some(col) = batch.column(f) {
        if (col.as_ptr() as usize).is_multiple_of(align) {
            return (col, lens, true);
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
        return (out, lens, false);
    }
    let mut words = vec![0u64; total.div_ceil(8)];
    bytemuck_cast(&mut words)
        .get_mut(..total)
        .unwrap_or_default()
        .copy_from_slice(&out);
    (Bytes::from_owner(Words { words, len: total }), lens, false)
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

/// Ends a build of field `f`: its slot becomes `slot`, and waiting readers wake.
fn finish(c: &Columns, f: usize, slot: Slot) {
    let mut cols = c.cols.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(s) = cols.get_mut(f) {
        *s = slot;
    }
    drop(cols);
    c.built.notify_all();
}

/// Builds field `f`'s NumPy array (fixed shape) or `Ragged` (variable length), taking its
/// values (they are put back if it fails). `None` if another thread is building it.
fn build_field(py: Python<'_>, c: &Columns, f: usize) -> PyResult<Option<Py<PyAny>>> {
    let (name, dtype) = c
        .fields
        .get(f)
        .cloned()
        .ok_or_else(|| value_error(format!("no field #{f}")))?;
    let me = std::thread::current().id();
    let col = {
        let mut cols = c.cols.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(slot) = cols.get_mut(f) else {
            return Err(value_error(format!("no field #{f}")));
        };
        match std::mem::replace(slot, Slot::Building(me)) {
            Slot::Ready(col) => col,
            Slot::Building(t) if t != me => {
                *slot = Slot::Building(t);
                return Ok(None);
            }
            other => {
                let reentered = matches!(other, Slot::Building(_));
                *slot = other;
                return Err(if reentered {
                    // Waiting for itself would never end.
                    pyo3::exceptions::PyRuntimeError::new_err(format!(
                        "field {name:?} was read again while this thread builds its array (from \
                         a finalizer?)"
                    ))
                } else {
                    crate::errors::InternalError::new_err(format!(
                        "field {name:?} is built but not in the batch's cache"
                    ))
                });
            }
        }
    };
    let shape = c.shapes.get(f).cloned().flatten();
    match array_of(py, c, &name, dtype, shape.as_deref(), col) {
        Ok(a) => Ok(Some(a)),
        Err(failed) => {
            let (e, col) = *failed;
            finish(c, f, Slot::Ready(col));
            Err(e)
        }
    }
}

/// The array or `Ragged` of one field's values; on failure the error and the values back.
fn array_of(
    py: Python<'_>,
    c: &Columns,
    name: &str,
    dtype: DType,
    shape: Option<&[u64]>,
    col: Col,
) -> Result<Py<PyAny>, Box<(PyErr, Col)>> {
    let item = dtype.item_bytes() as usize;
    let index_of = |r: usize| c.indices.get(r).copied().unwrap_or(r as u64);
    let mismatch = |reason: String| {
        to_py(zrecord::Error::ShapeMismatch {
            field: name.to_string(),
            reason,
        })
    };
    let total = col.memory.len();
    let dims: Vec<usize> = match shape {
        Some(shape) => {
            let per: u64 = shape.iter().product::<u64>() * item as u64;
            if let Some((r, &len)) = col.lens.iter().enumerate().find(|(_, &l)| l as u64 != per) {
                let e = mismatch(format!(
                    "record {} (position {r} of the batch) has {len} bytes, but shape \
                     {shape:?} of {dtype} needs {per} bytes (an absent value has no fixed shape)",
                    index_of(r)
                ));
                return Err(Box::new((e, col)));
            }
            std::iter::once(c.len())
                .chain(shape.iter().map(|&d| d as usize))
                .collect()
        }
        None => {
            if let Some((r, &len)) = col.lens.iter().enumerate().find(|(_, &l)| l % item != 0) {
                let e = mismatch(format!(
                    "record {} (position {r} of the batch) has {len} bytes, not a whole \
                     number of {dtype} items",
                    index_of(r)
                ));
                return Err(Box::new((e, col)));
            }
            vec![total / item]
        }
    };
    // Offsets in items, for a variable-length field.
    let offsets: Option<Vec<i64>> = shape.is_none().then(|| {
        std::iter::once(0)
            .chain(col.lens.iter().scan(0i64, |at, &len| {
                *at += (len / item) as i64;
                Some(*at)
            }))
            .collect()
    });
    let Col {
        memory, zero_copy, ..
    } = col;
    let built = dtype_array(py, dtype, memory, zero_copy, &dims).and_then(|a| {
        a.ok_or_else(|| {
            mismatch(format!(
                "{total} bytes are not whole {dtype} items of shape {dims:?}"
            ))
        })
    });
    // The values moved into the array; a failure here loses them, and the field's array
    // cannot be built again (`mismatch` names why).
    let values = built.map_err(|e| {
        Box::new((
            e,
            Col {
                memory: Memory::Shared(Bytes::new()),
                lens: Vec::new(),
                zero_copy: false,
            },
        ))
    })?;
    match offsets {
        None => Ok(values.unbind()),
        Some(offsets) => {
            let offsets = PyArray::from_vec(py, offsets);
            let ragged = Ragged::from_parts(values.unbind(), offsets.into_any().unbind(), c.len());
            Bound::new(py, ragged)
                .map(|r| r.into_any().unbind())
                .map_err(|e| {
                    Box::new((
                        e,
                        Col {
                            memory: Memory::Shared(Bytes::new()),
                            lens: Vec::new(),
                            zero_copy: false,
                        },
                    ))
                })
        }
    }
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

    /// A fixed-shape field's array, `(n, *shape)` of the field's dtype (the object `b[name]`
    /// returns, with a type a checker knows). `KeyError` for an unknown field;
    /// `FieldKindError` (also a `TypeError`) for a variable-length field, which
    /// [`ragged`](Self::ragged) reads.
    fn array(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyAny>> {
        let f = self.columns.position(name).map_err(to_py)?;
        let built = self.field(py, f)?;
        if built.bind(py).is_instance_of::<Ragged>() {
            return Err(field_kind_error(py, name, "array", "ragged"));
        }
        Ok(built)
    }

    /// A variable-length field's values, a `Ragged` (the object `b[name]` returns).
    /// `KeyError` for an unknown field; `FieldKindError` (also a `TypeError`) for a
    /// fixed-shape field, which [`array`](Self::array) reads.
    fn ragged(&self, py: Python<'_>, name: &str) -> PyResult<Py<Ragged>> {
        let f = self.columns.position(name).map_err(to_py)?;
        let built = self.field(py, f)?;
        match built.bind(py).cast::<Ragged>() {
            Ok(r) => Ok(r.clone().unbind()),
            Err(_) => Err(field_kind_error(py, name, "ragged", "array")),
        }
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
        self.columns.nbytes
    }

    /// Pickles as every field's array (built now; pickle copies them), the indices and the
    /// loader's attributes: `pickle.loads` gives a batch with the same fields and values, whose
    /// arrays are the unpickled copies.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let names = self.field_names();
        let dtypes: Vec<String> = self
            .columns
            .fields
            .iter()
            .map(|(_, d)| d.name().to_string())
            .collect();
        let arrays = (0..names.len())
            .map(|f| self.field(py, f))
            .collect::<PyResult<Vec<_>>>()?;
        let args = (
            names,
            dtypes,
            self.columns.shapes.clone(),
            arrays,
            self.columns.indices.clone(),
            self.is_pad.clone(),
            self.epoch,
            self.position,
        )
            .into_pyobject(py)?;
        let rebuild = py.import("zrecord._zrecord")?.getattr("_batch")?;
        PyTuple::new(py, [rebuild, args.into_any()])
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

/// `_batch(names, dtypes, shapes, arrays, indices, is_pad, epoch, position)`: the unpickler of
/// `Batch` (see `Batch.__reduce__`): a batch whose fields are the given arrays (or `Ragged`s),
/// each with one row per index.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub(crate) fn _batch(
    py: Python<'_>,
    names: Vec<String>,
    dtypes: Vec<String>,
    shapes: Vec<Option<Vec<u64>>>,
    arrays: Vec<Py<PyAny>>,
    indices: Vec<u64>,
    is_pad: Option<Vec<bool>>,
    epoch: Option<u64>,
    position: Option<u64>,
) -> PyResult<PyBatch> {
    let n = indices.len();
    if dtypes.len() != names.len() || shapes.len() != names.len() || arrays.len() != names.len() {
        return Err(value_error(format!(
            "a pickled Batch with {} names, {} dtypes, {} shapes and {} arrays",
            names.len(),
            dtypes.len(),
            shapes.len(),
            arrays.len()
        )));
    }
    if is_pad.as_ref().is_some_and(|p| p.len() != n) {
        return Err(value_error(
            "a pickled Batch whose is_pad is not one per record",
        ));
    }
    let mut fields = Vec::with_capacity(names.len());
    let mut nbytes = 0usize;
    for ((name, dtype), a) in names.iter().zip(&dtypes).zip(&arrays) {
        let a = a.bind(py);
        let rows = a.len()?;
        if rows != n {
            return Err(value_error(format!(
                "a pickled Batch whose field {name:?} has {rows} rows for {n} indices"
            )));
        }
        let values = match a.cast::<Ragged>() {
            Ok(r) => r.get().values_ref(py).into_bound(py),
            Err(_) => a.clone(),
        };
        nbytes += values.getattr("nbytes")?.extract::<usize>()?;
        fields.push((name.clone(), crate::schema::dtype_of(dtype)?));
    }
    let columns = Columns {
        indices,
        fields,
        shapes,
        cols: Mutex::new((0..names.len()).map(|_| Slot::Done).collect()),
        built: Condvar::new(),
        nbytes,
    };
    Ok(PyBatch {
        columns,
        is_pad,
        epoch,
        position,
        cache: Mutex::new(arrays.into_iter().map(Some).collect()),
    })
}
