//! Record indices and integer options from Python, read the way NumPy indexes, with the errors
//! the docs name: a value of the wrong type is a `TypeError`, an index array that is not 1-D a
//! `ValueError`, an index outside the records an `IndexError` with `index` (and `len` where
//! known), an option outside its range a `ValueError` naming the option and the range.

use crate::errors::value_error;
use numpy::PyArrayMethods;
use pyo3::exceptions::{PyIndexError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyString};

/// `IndexError` for an index that is not the number of a record (negative, or past `u64`),
/// with the `index` attribute (the Python int given) and `len` when known.
fn out_of_range(py: Python<'_>, index: &Bound<'_, PyAny>, len: Option<u64>) -> PyErr {
    let shown = index
        .str()
        .map(|s| s.to_string())
        .unwrap_or_else(|_| "?".into());
    let message = match len {
        Some(n) => format!(
            "index {shown} is out of range for {n} records (indices are record numbers from 0; \
             negative ones are refused)"
        ),
        None => format!(
            "index {shown} is not a record number (indices are from 0 to 2**64 - 1; negative \
             ones are refused)"
        ),
    };
    let e = PyIndexError::new_err(message);
    let _ = e.value(py).setattr("index", index);
    if let Some(n) = len {
        let _ = e.value(py).setattr("len", n);
    }
    e
}

/// The `TypeError` for a value that is no index: a bool (NumPy reads bools as a mask, not as
/// record numbers), a float, bytes, a string, any other object.
fn not_an_index(what: &str) -> PyErr {
    PyTypeError::new_err(format!(
        "indices must be integers (an int, a NumPy integer, a sequence of them or an integer \
         array), not {what}{}",
        if what.contains("bool") {
            " (NumPy reads bools as a mask: pass np.flatnonzero(mask) for its indices)"
        } else {
            ""
        }
    ))
}

/// The type name of `obj`, for messages.
fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// One index from an int or a NumPy integer scalar (anything with `__index__` but a bool).
/// `len`, when known, only names the range in the error.
pub(crate) fn index_of(obj: &Bound<'_, PyAny>, len: Option<u64>) -> PyResult<u64> {
    let py = obj.py();
    if obj.is_instance_of::<PyBool>() || type_name(obj) == "bool" {
        return Err(not_an_index("a bool"));
    }
    let Ok(int) = obj.call_method0("__index__") else {
        return Err(not_an_index(&format!("a {}", type_name(obj))));
    };
    match int.extract::<i128>() {
        Ok(i) => u64::try_from(i).map_err(|_| out_of_range(py, &int, len)),
        Err(_) => Err(out_of_range(py, &int, len)),
    }
}

/// Indices from an int, a NumPy integer scalar, any sequence of them, or a 1-D integer array,
/// in the caller's order. `len` only names the range in an error.
pub(crate) fn indices_of(obj: &Bound<'_, PyAny>, len: Option<u64>) -> PyResult<Vec<u64>> {
    let py = obj.py();
    if obj.is_instance_of::<PyBytes>()
        || obj.is_instance_of::<PyByteArray>()
        || obj.is_instance_of::<PyString>()
    {
        return Err(not_an_index(&format!("a {} object", type_name(obj))));
    }
    // NumPy arrays: one conversion and one copy, no object per index.
    if let Ok(arr) = obj.cast::<numpy::PyUntypedArray>() {
        let dtype = arr.getattr("dtype")?;
        let kind: String = dtype.getattr("kind")?.extract()?;
        if kind == "b" {
            return Err(not_an_index("a bool array"));
        }
        if kind != "i" && kind != "u" {
            return Err(not_an_index(&format!("an array of dtype {}", dtype.str()?)));
        }
        let ndim: usize = arr.getattr("ndim")?.extract()?;
        if ndim == 0 {
            return Ok(vec![index_of(&arr.call_method0("item")?, len)?]);
        }
        if ndim != 1 {
            return Err(value_error(format!(
                "indices must be 1-D (a batch is one row of records), not an array of shape {}",
                arr.getattr("shape")?.str()?
            )));
        }
        let np = py.import("numpy")?;
        if kind == "u" {
            let flat = np.call_method1("ascontiguousarray", (arr, "uint64"))?;
            let typed = flat.cast_into::<numpy::PyArray1<u64>>()?;
            let ro = typed.readonly();
            return Ok(ro.as_slice()?.to_vec());
        }
        let flat = np.call_method1("ascontiguousarray", (arr, "int64"))?;
        let typed = flat.cast_into::<numpy::PyArray1<i64>>()?;
        let ro = typed.readonly();
        return ro
            .as_slice()?
            .iter()
            .map(|&i| {
                u64::try_from(i).map_err(|_| {
                    let v = i.into_pyobject(py).map(|v| v.into_any());
                    match v {
                        Ok(v) => out_of_range(py, &v, len),
                        Err(never) => match never {},
                    }
                })
            })
            .collect();
    }
    // One int or NumPy integer scalar: one index (as NumPy's `a[np.int64(3)]`).
    if obj.hasattr("__index__")? {
        return Ok(vec![index_of(obj, len)?]);
    }
    let Ok(items) = obj.try_iter() else {
        return Err(not_an_index(&format!("a {}", type_name(obj))));
    };
    let mut out = Vec::with_capacity(obj.len().unwrap_or(0));
    for item in items {
        let item = item?;
        if item.cast::<numpy::PyUntypedArray>().is_ok()
            || (!item.hasattr("__index__")?
                && !item.is_instance_of::<PyString>()
                && !item.is_instance_of::<PyBytes>()
                && item.try_iter().is_ok())
        {
            return Err(value_error(
                "indices must be 1-D (a batch is one row of records), not a nested sequence",
            ));
        }
        out.push(index_of(&item, len)?);
    }
    Ok(out)
}

/// An integer option (`seed=`, `batch_size=`, ...) of type `T` (an unsigned integer type),
/// or a `ValueError` naming the option and the range.
pub(crate) fn option_in_range<T>(name: &str, value: i128) -> PyResult<T>
where
    T: TryFrom<i128> + num_max::Max,
{
    T::try_from(value).map_err(|_| {
        value_error(format!(
            "{name} must be an integer from 0 to {}, not {value}",
            T::max_text()
        ))
    })
}

/// The largest value of an unsigned option type, as the error names it.
pub(crate) mod num_max {
    /// Implemented by the option types [`super::option_in_range`] reads.
    pub(crate) trait Max {
        fn max_text() -> String;
    }
    impl Max for u64 {
        fn max_text() -> String {
            "2**64 - 1".into()
        }
    }
    impl Max for u32 {
        fn max_text() -> String {
            "2**32 - 1".into()
        }
    }
    impl Max for usize {
        fn max_text() -> String {
            format!("{}", usize::MAX)
        }
    }
}
