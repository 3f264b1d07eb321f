//! Panics stop at the binding: a panic in zrecord's code becomes `zrecord.InternalError`.

use crate::errors::InternalError;
use pyo3::PyResult;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `f`, turning a panic into `InternalError` (with the panic's message) instead of
/// letting it unwind into Python.
pub(crate) fn guarded<T>(f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let panicked = zrecord::Error::from_panic("zrecord", payload.as_ref());
            Err(InternalError::new_err(format!(
                "{panicked} (a bug; please report it)"
            )))
        }
    }
}

/// Runs `f` with the GIL released and panics stopped; its error becomes a Python exception
/// only once the GIL is back (never re-taking the GIL inside `f`, where `f` may hold locks).
pub(crate) fn without_gil<T: Send>(
    py: pyo3::Python<'_>,
    f: impl FnOnce() -> zrecord::Result<T> + Send,
) -> PyResult<T> {
    py.detach(move || guarded(|| Ok(f())))?
        .map_err(crate::errors::to_py)
}
