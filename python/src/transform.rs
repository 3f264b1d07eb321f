//! `zrecord.transform`: the transform stage's operations for Python. The built-in image
//! operations are Rust (`zrecord::transform::image`), run on the loader's worker threads
//! without the GIL; a Python callable in a field's list runs there too, taking the GIL for its
//! call (Pillow, OpenCV and NumPy release it while they work, so the workers overlap).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use zrecord::transform::image::{
    CenterCrop, Decode, Layout, Normalize, RandomCrop, RandomFlip, RandomResizedCrop, Resize,
};
use zrecord::transform::{Image, Map, Op, OpError, Rng, Tensor, Value};
use zrecord::DType;

use crate::errors::value_error;
use crate::schema::dtype_of;

/// One operation of a field's transform (made by the functions of `zrecord.transform`).
#[pyclass(frozen, module = "zrecord._zrecord", name = "Op")]
pub struct PyOp {
    pub(crate) inner: Arc<dyn Op>,
    /// What made it, for pickling: `(_op, (kind, args))` or `(_py_op, (f, random, name))`.
    recipe: Option<(Py<PyAny>, Py<PyTuple>)>,
}

#[pymethods]
impl PyOp {
    /// The operation and its arguments.
    #[getter]
    fn name(&self) -> String {
        self.inner.name()
    }

    fn __repr__(&self) -> String {
        format!("zrecord.transform.{}", self.inner.name())
    }

    /// Pickles as the call that made it (a callable pickles by reference, as `pickle` does).
    fn __reduce__(&self, py: Python<'_>) -> PyResult<(Py<PyAny>, Py<PyTuple>)> {
        match &self.recipe {
            Some((f, args)) => Ok((f.clone_ref(py), args.clone_ref(py))),
            None => Err(value_error("this operation cannot be pickled")),
        }
    }
}

/// The recipe of an operation made by `name(args...)` of this module.
fn recipe(
    py: Python<'_>,
    name: &str,
    args: PyResult<Bound<'_, PyTuple>>,
) -> Option<(Py<PyAny>, Py<PyTuple>)> {
    let f = py.import("zrecord._zrecord").ok()?.getattr(name).ok()?;
    Some((f.unbind(), args.ok()?.unbind()))
}

fn get<'py, T: FromPyObjectOwned<'py>>(
    args: &Bound<'py, PyDict>,
    key: &str,
) -> PyResult<Option<T>> {
    match args.get_item(key)? {
        Some(v) if !v.is_none() => match v.extract::<T>() {
            Ok(t) => Ok(Some(t)),
            Err(_) => Err(value_error(format!(
                "{key}: {} is not the right type",
                v.repr()?
            ))),
        },
        _ => Ok(None),
    }
}

fn side(v: i128, what: &str) -> PyResult<u32> {
    u32::try_from(v)
        .ok()
        .filter(|s| (1..=16384).contains(s))
        .ok_or_else(|| value_error(format!("{what} must be 1 to 16384 pixels, not {v}")))
}

/// `(height, width)` from an int (a square) or a pair.
fn size_of(args: &Bound<'_, PyDict>) -> PyResult<(u32, u32)> {
    let v = args
        .get_item("size")?
        .ok_or_else(|| value_error("size is required"))?;
    if let Ok(s) = v.extract::<i128>() {
        let s = side(s, "size")?;
        return Ok((s, s));
    }
    let (h, w): (i128, i128) = v
        .extract()
        .map_err(|_| value_error("size is an int or a (height, width) pair"))?;
    Ok((side(h, "height")?, side(w, "width")?))
}

/// `_op(kind, args)`: a built-in operation (`zrecord.transform`'s functions call this).
#[pyfunction]
pub(crate) fn _op(py: Python<'_>, kind: &str, args: Bound<'_, PyDict>) -> PyResult<PyOp> {
    let inner: Arc<dyn Op> = match kind {
        "decode" => {
            let channels = match get::<u8>(&args, "channels")? {
                None => None,
                Some(c @ (1 | 3 | 4)) => Some(c),
                Some(c) => {
                    return Err(value_error(format!(
                        "channels must be 1, 3, 4 or None, not {c}"
                    )))
                }
            };
            Arc::new(Decode { channels })
        }
        "random_resized_crop" => {
            let (height, width) = size_of(&args)?;
            let mut op = RandomResizedCrop::new(width, height);
            if let Some(s) = get::<(f64, f64)>(&args, "scale")? {
                op.scale = s;
            }
            if let Some(r) = get::<(f64, f64)>(&args, "ratio")? {
                op.ratio = r;
            }
            let ok = 0.0 < op.scale.0
                && op.scale.0 <= op.scale.1
                && op.scale.1 <= 1.0
                && 0.0 < op.ratio.0
                && op.ratio.0 <= op.ratio.1
                && op.ratio.1.is_finite();
            if !ok {
                return Err(value_error(format!(
                    "random_resized_crop needs 0 < scale[0] <= scale[1] <= 1 and 0 < ratio[0] <= \
                     ratio[1], not scale={:?}, ratio={:?}",
                    op.scale, op.ratio
                )));
            }
            Arc::new(op)
        }
        "resize" => {
            let v = args
                .get_item("size")?
                .ok_or_else(|| value_error("size is required"))?;
            if let Ok(s) = v.extract::<i128>() {
                Arc::new(Resize::ShorterSide(side(s, "size")?))
            } else {
                let (height, width) = size_of(&args)?;
                Arc::new(Resize::Exact { width, height })
            }
        }
        "random_crop" => {
            let (height, width) = size_of(&args)?;
            Arc::new(RandomCrop { width, height })
        }
        "center_crop" => {
            let (height, width) = size_of(&args)?;
            Arc::new(CenterCrop { width, height })
        }
        "random_flip" => {
            let p = get::<f64>(&args, "p")?.unwrap_or(0.5);
            if !(0.0..=1.0).contains(&p) {
                return Err(value_error(format!("p must be from 0 to 1, not {p}")));
            }
            let horizontal = get::<bool>(&args, "horizontal")?.unwrap_or(true);
            Arc::new(RandomFlip { horizontal, p })
        }
        "normalize" => {
            let mean: Vec<f32> =
                get(&args, "mean")?.ok_or_else(|| value_error("mean is required"))?;
            let std: Vec<f32> = get(&args, "std")?.ok_or_else(|| value_error("std is required"))?;
            if mean.len() != std.len() || std.contains(&0.0) {
                return Err(value_error(
                    "mean and std need one value per channel, std non-zero",
                ));
            }
            let dtype = match get::<String>(&args, "dtype")? {
                None => DType::F32,
                Some(s) => dtype_of(&s)?,
            };
            if !matches!(dtype, DType::F32 | DType::F16 | DType::Bf16) {
                return Err(value_error(format!(
                    "normalize's dtype is float32, float16 or bfloat16, not {dtype}"
                )));
            }
            let layout = match get::<String>(&args, "layout")?
                .as_deref()
                .map(str::to_ascii_uppercase)
                .as_deref()
            {
                None | Some("CHW") => Layout::Chw,
                Some("HWC") => Layout::Hwc,
                Some(other) => {
                    return Err(value_error(format!(
                        "layout is 'CHW' or 'HWC', not {other:?}"
                    )))
                }
            };
            Arc::new(Normalize {
                mean,
                std,
                dtype,
                layout,
            })
        }
        other => return Err(value_error(format!("unknown operation {other:?}"))),
    };
    let recipe = recipe(py, "_op", (kind, args.copy()?).into_pyobject(py));
    Ok(PyOp { inner, recipe })
}

/// `_py_op(fn, random, name)`: a Python callable as an operation, called `fn(x)` or, if
/// `random`, `fn(x, rng)` with a `numpy.random.Generator` seeded from the record's generator.
#[pyfunction]
#[pyo3(signature = (f, random, name=None))]
pub(crate) fn _py_op(
    py: Python<'_>,
    f: Py<PyAny>,
    random: bool,
    name: Option<String>,
) -> PyResult<PyOp> {
    if !f.bind(py).is_callable() {
        return Err(value_error(
            "a transform's operation is a zrecord.transform op or a callable",
        ));
    }
    let name = match name {
        Some(n) => n,
        None => f
            .bind(py)
            .getattr("__qualname__")
            .or_else(|_| f.bind(py).repr().map(|r| r.into_any()))?
            .str()?
            .to_string(),
    };
    let made = recipe(
        py,
        "_py_op",
        (f.clone_ref(py), random, name.clone()).into_pyobject(py),
    );
    Ok(PyOp {
        inner: Arc::new(PyCall { f, random, name }),
        recipe: made,
    })
}

/// A Python callable on the loader's worker threads.
struct PyCall {
    f: Py<PyAny>,
    random: bool,
    name: String,
}

impl std::fmt::Debug for PyCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PyCall({})", self.name)
    }
}

/// Set by `_at_exit`: the interpreter is finalizing, and no worker may enter Python again (a
/// thread that takes the GIL then is ended by CPython with `pthread_exit`, which unwinds
/// through Rust frames: a crash at exit).
static CLOSING: AtomicBool = AtomicBool::new(false);
/// Callables in progress on worker threads, and the signal `_at_exit` waits on.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);
static IDLE: (Mutex<()>, Condvar) = (Mutex::new(()), Condvar::new());

/// One callable in progress (see [`CLOSING`]).
pub(crate) struct InPython;

impl InPython {
    /// `None` once the interpreter is finalizing. The count goes up before the flag is read,
    /// and `_at_exit` sets the flag before it reads the count: one of the two sees the other.
    pub(crate) fn enter() -> Option<InPython> {
        ACTIVE.fetch_add(1, Ordering::SeqCst);
        if CLOSING.load(Ordering::SeqCst) {
            InPython::leave();
            return None;
        }
        Some(InPython)
    }

    fn leave() {
        if ACTIVE.fetch_sub(1, Ordering::SeqCst) == 1 {
            let _g = IDLE.0.lock().unwrap_or_else(PoisonError::into_inner);
            IDLE.1.notify_all();
        }
    }
}

impl Drop for InPython {
    fn drop(&mut self) {
        InPython::leave();
    }
}

/// `_at_exit()` (registered with `atexit` at import): from now on no worker thread calls a
/// transform's Python callable; waits (without the GIL, at most 10 s) for the calls in
/// progress to return.
#[pyfunction]
pub(crate) fn _at_exit(py: Python<'_>) {
    CLOSING.store(true, Ordering::SeqCst);
    py.detach(|| {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut g = IDLE.0.lock().unwrap_or_else(PoisonError::into_inner);
        while ACTIVE.load(Ordering::SeqCst) > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            g = IDLE
                .1
                .wait_timeout(g, left.min(Duration::from_millis(50)))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    });
}

/// `_after_fork_child()` (registered with `os.register_at_fork`): the parent's worker threads
/// did not cross the fork, so none of their calls is in progress here.
#[pyfunction]
pub(crate) fn _after_fork_child() {
    ACTIVE.store(0, Ordering::SeqCst);
}

impl Op for PyCall {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn apply(&self, value: Value, rng: &mut Rng) -> Result<Value, OpError> {
        // Drawn whether or not the call succeeds: the record's later draws stay the same.
        let seed = rng.next_u64();
        let Some(_in) = InPython::enter() else {
            return Err(OpError::new("the Python interpreter is exiting"));
        };
        Python::attach(|py| -> PyResult<Value> {
            let x = to_python(py, value)?;
            let out = if self.random {
                let np = py.import("numpy")?;
                let g = np.getattr("random")?.call_method1("default_rng", (seed,))?;
                self.f.call1(py, (x, g))?
            } else {
                self.f.call1(py, (x,))?
            };
            from_python(out.bind(py))
        })
        .map_err(|e| {
            Python::attach(|py| {
                let kind = e
                    .get_type(py)
                    .qualname()
                    .map_or_else(|_| "Exception".to_string(), |q| q.to_string());
                OpError::new(format!("{kind}: {}", e.value(py)))
            })
        })
    }
}

/// A value as Python sees it: bytes, or a NumPy array (an image `(height, width, channels)`
/// `uint8`, a tensor of its dtype and shape).
fn to_python(py: Python<'_>, value: Value) -> PyResult<Py<PyAny>> {
    let np = py.import("numpy")?;
    let array = |data: Vec<u8>, dtype: &str, shape: Vec<u64>| -> PyResult<Py<PyAny>> {
        let buf = pyo3::types::PyByteArray::new(py, &data);
        Ok(np
            .call_method1("frombuffer", (buf, dtype))?
            .call_method1("reshape", (PyTuple::new(py, shape)?,))?
            .unbind())
    };
    match value {
        Value::Bytes(b) => Ok(PyBytes::new(py, &b).into_any().unbind()),
        Value::Image(img) => {
            let shape = vec![
                u64::from(img.height()),
                u64::from(img.width()),
                u64::from(img.channels()),
            ];
            let pixels = img.into_pixels().map_err(value_error)?;
            array(pixels, "uint8", shape)
        }
        Value::Tensor(t) => {
            let (dtype, shape) = (numpy_name(t.dtype())?, t.shape().to_vec());
            array(t.into_data(), dtype, shape)
        }
    }
}

fn numpy_name(d: DType) -> PyResult<&'static str> {
    Ok(match d {
        DType::Bool => "bool",
        DType::U8 | DType::Bytes => "uint8",
        DType::I8 => "int8",
        DType::U16 => "uint16",
        DType::I16 => "int16",
        DType::U32 => "uint32",
        DType::I32 => "int32",
        DType::U64 => "uint64",
        DType::I64 => "int64",
        DType::F16 => "float16",
        DType::F32 => "float32",
        DType::F64 => "float64",
        other => return Err(value_error(format!("no NumPy dtype for {other}"))),
    })
}

/// What a Python callable returned, as a value: bytes stay bytes; anything else goes through
/// `numpy.ascontiguousarray` (a PIL image, a list, an array): a `uint8` array of shape
/// `(height, width, 1 to 4)` is an image (the image operations take it), any other a tensor.
fn from_python(out: &Bound<'_, PyAny>) -> PyResult<Value> {
    if let Ok(b) = out.cast::<PyBytes>() {
        return Ok(Value::Bytes(bytes::Bytes::copy_from_slice(b.as_bytes())));
    }
    let py = out.py();
    let a = py
        .import("numpy")?
        .call_method1("ascontiguousarray", (out,))?;
    let dtype = dtype_of(&a.getattr("dtype")?.getattr("str")?.extract::<String>()?)?;
    let shape: Vec<u64> = a.getattr("shape")?.extract()?;
    let data: Vec<u8> = a
        .call_method0("tobytes")?
        .cast::<PyBytes>()?
        .as_bytes()
        .to_vec();
    if dtype == DType::U8 && shape.len() == 3 && (1..=4).contains(&shape[2]) {
        let (h, w, c) = (shape[0], shape[1], shape[2]);
        if let (Ok(h), Ok(w)) = (u32::try_from(h), u32::try_from(w)) {
            return Image::from_pixels(w, h, c as u8, data)
                .map(Value::Image)
                .map_err(value_error);
        }
    }
    Tensor::new(dtype, shape, data)
        .map(Value::Tensor)
        .map_err(value_error)
}

/// The `transform=` argument of a `Loader`: `{field: op or [ops]}`, each op a
/// `zrecord.transform` operation or a callable (`fn(x)`).
pub(crate) fn map_of(py: Python<'_>, transform: &Bound<'_, PyAny>) -> PyResult<Map> {
    let d = transform.cast::<PyDict>().map_err(|_| {
        value_error("transform is a dict of field name -> an operation or a list of operations")
    })?;
    let mut map = Map::new();
    for (field, ops) in d.iter() {
        let field: String = field
            .extract()
            .map_err(|_| value_error("transform's keys are field names"))?;
        let list: Vec<Bound<'_, PyAny>> =
            if ops.cast::<PyList>().is_ok() || ops.cast::<PyTuple>().is_ok() {
                ops.try_iter()?.collect::<PyResult<_>>()?
            } else {
                vec![ops]
            };
        let mut made: Vec<Arc<dyn Op>> = Vec::with_capacity(list.len());
        for op in list {
            if let Ok(o) = op.cast::<PyOp>() {
                made.push(Arc::clone(&o.get().inner));
            } else if op.is_callable() {
                made.push(_py_op(py, op.unbind(), false, None)?.inner);
            } else {
                return Err(value_error(format!(
                    "transform[{field:?}]: {} is not a zrecord.transform operation or a callable",
                    op.repr()?
                )));
            }
        }
        map = map.field(field, made);
    }
    Ok(map)
}
