//! The `zrecord._zrecord` extension module: zrecord's Rust core for Python. The pure-Python
//! package `zrecord` (python/zrecord/) re-exports it and adds the torch and Grain adapters.
//!
//! Every call that reads, waits or writes releases the GIL; the only Python code that runs on
//! zrecord's threads is a Python callable given to a `Loader`'s `transform=` (on the prefetch
//! workers, each call holding the GIL); a panic becomes `zrecord.InternalError`.

mod arrow;
mod batch;
mod collection;
mod dataset;
mod errors;
mod guard;
mod indices;
mod loader;
mod schema;
mod transfer;
mod transform;
mod writer;

use pyo3::prelude::*;

/// `open(path, **options)`: the same as `Dataset(path, **options)`.
#[pyfunction]
#[pyo3(signature = (path, *, backend=None, verify=true, direct=false, cache_bytes=None,
                    cache_dir=None, lookahead_bytes=None, storage_options=None, copy_mapped=true))]
#[allow(clippy::too_many_arguments)]
fn open(
    py: Python<'_>,
    path: Bound<'_, PyAny>,
    backend: Option<String>,
    verify: bool,
    direct: bool,
    cache_bytes: Option<u64>,
    cache_dir: Option<Bound<'_, PyAny>>,
    lookahead_bytes: Option<u64>,
    storage_options: Option<Bound<'_, pyo3::types::PyDict>>,
    copy_mapped: bool,
) -> PyResult<dataset::PyDataset> {
    dataset::PyDataset::new(
        py,
        path,
        backend,
        verify,
        direct,
        cache_bytes,
        cache_dir,
        lookahead_bytes,
        storage_options,
        copy_mapped,
    )
}

/// `_local_path(name)`: the local path `name` names (itself, or what follows `file://`), or
/// `None` for an object store's URL: `zrecord::remote::local_path`, the one rule, which
/// `zrecord.ray` asks instead of keeping its own list of schemes.
#[pyfunction]
fn _local_path(name: &str) -> Option<String> {
    zrecord::remote::local_path(name).map(str::to_string)
}

#[pymodule]
fn _zrecord(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<dataset::PyDataset>()?;
    m.add_class::<batch::PyBatch>()?;
    m.add_class::<batch::Ragged>()?;
    m.add_class::<batch::Buffer>()?;
    m.add_class::<schema::PyField>()?;
    m.add_class::<writer::PyWriter>()?;
    m.add_class::<loader::PyLoader>()?;
    m.add_class::<loader::PyMix>()?;
    m.add_class::<transform::PyOp>()?;
    m.add_function(wrap_pyfunction!(transform::_op, m)?)?;
    m.add_function(wrap_pyfunction!(transform::_py_op, m)?)?;
    let at_exit = wrap_pyfunction!(transform::_at_exit, m)?;
    m.py()
        .import("atexit")?
        .call_method1("register", (&at_exit,))?;
    let kw = pyo3::types::PyDict::new(m.py());
    kw.set_item(
        "after_in_child",
        wrap_pyfunction!(transform::_after_fork_child, m)?,
    )?;
    m.py()
        .import("os")?
        .call_method("register_at_fork", (), Some(&kw))?;
    m.add_function(wrap_pyfunction!(open, m)?)?;
    m.add_function(wrap_pyfunction!(_local_path, m)?)?;
    m.add_function(wrap_pyfunction!(dataset::_reopen, m)?)?;
    m.add_function(wrap_pyfunction!(batch::_batch, m)?)?;
    m.add_function(wrap_pyfunction!(loader::mix, m)?)?;
    m.add_function(wrap_pyfunction!(transfer::push, m)?)?;
    m.add_function(wrap_pyfunction!(transfer::pull, m)?)?;
    m.add_function(wrap_pyfunction!(transfer::convert_npy, m)?)?;
    m.add_function(wrap_pyfunction!(transfer::convert_images, m)?)?;
    m.add_function(wrap_pyfunction!(transfer::convert_webdataset, m)?)?;
    m.add_function(wrap_pyfunction!(collection::commit_collection, m)?)?;
    m.add_function(wrap_pyfunction!(collection::gc_collection, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
