//! `commit_collection` and `gc_collection`: many datasets (parts) committed as one collection,
//! and the parts no manifest names removed, with the GIL released.

use crate::dataset::path_str;
use crate::guard::without_gil;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::time::Duration;
use zrecord::collection::{CommitOptions, CommitReport, GcOptions, GcReport};
use zrecord::remote::StoreOptions;

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
    let Some(local) = zrecord::remote::local_path(&root).map(str::to_string) else {
        let o = crate::transfer::options(storage_options, None, single_writer)?;
        let r = without_gil(py, move || {
            zrecord::collection::commit_url(&root, &parts, CommitOptions::new(), &o)
        })?;
        return report(py, &r);
    };
    let r = without_gil(py, move || {
        zrecord::collection::commit(&local, &parts, CommitOptions::new())
    })?;
    report(py, &r)
}

fn gc_report<'py>(py: Python<'py>, r: &GcReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("removed", r.removed.clone())?;
    d.set_item("kept", r.kept.clone())?;
    d.set_item("bytes_freed", r.bytes_freed)?;
    d.set_item("leftovers", r.leftovers)?;
    d.set_item("manifests", r.manifests)?;
    Ok(d)
}

/// Removes the parts of the collection at `root` (a directory or an object-store URL) that no
/// manifest names and that are older than `older_than` seconds, and old leftovers of failed
/// commits; never a part any manifest names. `older_than` must exceed the longest commit (a
/// part placed but not yet committed is protected by its age only). Returns a report dict:
/// `removed` and `kept` (part ids), `bytes_freed`, `leftovers`, `manifests`.
#[pyfunction]
#[pyo3(signature = (root, older_than, *, storage_options=None))]
pub(crate) fn gc_collection<'py>(
    py: Python<'py>,
    root: Bound<'py, PyAny>,
    older_than: f64,
    storage_options: Option<Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyDict>> {
    let older_than = Duration::try_from_secs_f64(older_than).map_err(|_| {
        crate::errors::config_error(format!(
            "older_than must be a number of seconds >= 0, not {older_than}"
        ))
    })?;
    let root = path_str(&root)?;
    let mut store = StoreOptions::default();
    for (k, v) in crate::dataset::storage_options_of(storage_options)? {
        store = store.with(k, v);
    }
    let o = GcOptions::new().store(store);
    let r = without_gil(py, move || zrecord::collection::gc(&root, older_than, &o))?;
    gc_report(py, &r)
}
