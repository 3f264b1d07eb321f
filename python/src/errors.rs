//! `zrecord.Error` and its subclasses: one Python exception per kind of `zrecord::Error`, each
//! with the attributes the Rust variant carries (path, field, index, offset, url, ...).

use pyo3::exceptions::{
    PyException, PyIndexError, PyKeyError, PyOSError, PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
use zrecord::Error as CoreError;

pyo3::create_exception!(
    zrecord,
    Error,
    PyException,
    "The base of every error zrecord raises (except IndexError/KeyError for bad arguments)."
);
pyo3::create_exception!(
    zrecord,
    CorruptError,
    Error,
    "Bytes on disk or on the store that are not what the commit says (a checksum, an offset, a \
     truncated file, a bad meta.json). Attributes: path, and where known field, index, offset."
);
pyo3::create_exception!(
    zrecord,
    ChecksumError,
    CorruptError,
    "A record whose CRC32C does not match: path, field, index, offset, expected, actual."
);
pyo3::create_exception!(
    zrecord,
    NotADatasetError,
    Error,
    "The path or URL holds no zrecord dataset: path, reason."
);
pyo3::create_exception!(
    zrecord,
    ConfigError,
    Error,
    "An option or combination of options that does not work: reason."
);
pyo3::create_exception!(
    zrecord,
    ResumeMismatch,
    Error,
    "A checkpoint that does not belong to this dataset or configuration: reason."
);
pyo3::create_exception!(
    zrecord,
    WriterBusyError,
    Error,
    "Another writer holds the dataset's lock: path."
);
pyo3::create_exception!(
    zrecord,
    ChunkGoneError,
    Error,
    "A chunk file of this snapshot was removed by a later writer (refresh and retry): path."
);
pyo3::create_exception!(
    zrecord,
    RemoteError,
    Error,
    "A request to an object store that failed after its retries: url, range, status, reason."
);
pyo3::create_exception!(
    zrecord,
    PublishConflict,
    RemoteError,
    "Another push took the commit slot first, or the store ignores conditional creates: url."
);
pyo3::create_exception!(
    zrecord,
    TransformError,
    Error,
    "An operation of a Loader's transform= failed on one record (a JPEG that does not decode, a \
     Python callable that raised): field, index (the record), op (the operation), reason."
);
pyo3::create_exception!(
    zrecord,
    InternalError,
    Error,
    "A bug in zrecord (a panic on one of its threads or in the binding): please report it."
);

/// `zrecord.SchemaError`, built at import (see [`two_bases`]).
static SCHEMA_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
/// `zrecord.IOError`, built at import (see [`two_bases`]).
static IO_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
/// `zrecord.FieldKindError`, built at import (see [`two_bases`]).
static FIELD_KIND_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

const SCHEMA_ERROR_DOC: &str = "A schema, field, dtype, shape or value that does not fit: field, \
     reason (a value given to a writer: index, value; Arrow data: column, arrow_type, dtype; \
     missing, extra, duplicated; row). Also a ValueError.";
const IO_ERROR_DOC: &str = "A file operation that failed: path, op, errno. Also an OSError.";
const FIELD_KIND_ERROR_DOC: &str = "A field read as the other kind: Batch.array of a \
     variable-length field, or Batch.ragged of a fixed-shape one: field, expected, actual \
     (each \"array\" or \"ragged\"). Also a TypeError.";

/// An exception class `zrecord.<name>` deriving from both `zrecord.Error` and `builtin`, so
/// that `except ValueError` (or `except OSError`) catches it as well as `except zrecord.Error`.
/// `create_exception!` takes one base, so the class is made by calling `type`.
fn two_bases(
    py: Python<'_>,
    name: &str,
    builtin: Bound<'_, PyType>,
    doc: &str,
) -> PyResult<Py<PyType>> {
    let namespace = PyDict::new(py);
    namespace.set_item("__module__", "zrecord")?;
    namespace.set_item("__doc__", doc)?;
    let bases = PyTuple::new(py, [py.get_type::<Error>(), builtin])?;
    let class = py
        .get_type::<PyType>()
        .call1((name, bases, namespace))?
        .cast_into::<PyType>()?;
    Ok(class.unbind())
}

/// `zrecord.SchemaError` (a `zrecord.Error` and a `ValueError`).
pub(crate) fn schema_error_type(py: Python<'_>) -> Bound<'_, PyType> {
    SCHEMA_ERROR
        .get_or_try_init(py, || {
            two_bases(
                py,
                "SchemaError",
                py.get_type::<PyValueError>(),
                SCHEMA_ERROR_DOC,
            )
        })
        .map(|t| t.bind(py).clone())
        .unwrap_or_else(|_| py.get_type::<Error>())
}

/// `zrecord.IOError` (a `zrecord.Error` and an `OSError`).
pub(crate) fn io_error_type(py: Python<'_>) -> Bound<'_, PyType> {
    IO_ERROR
        .get_or_try_init(py, || {
            two_bases(py, "IOError", py.get_type::<PyOSError>(), IO_ERROR_DOC)
        })
        .map(|t| t.bind(py).clone())
        .unwrap_or_else(|_| py.get_type::<Error>())
}

/// `zrecord.FieldKindError` (a `zrecord.Error` and a `TypeError`).
pub(crate) fn field_kind_error_type(py: Python<'_>) -> Bound<'_, PyType> {
    FIELD_KIND_ERROR
        .get_or_try_init(py, || {
            two_bases(
                py,
                "FieldKindError",
                py.get_type::<PyTypeError>(),
                FIELD_KIND_ERROR_DOC,
            )
        })
        .map(|t| t.bind(py).clone())
        .unwrap_or_else(|_| py.get_type::<Error>())
}

/// A `FieldKindError`: field `field` is `actual` (`"array"` or `"ragged"`), and the caller
/// asked for `expected`.
pub(crate) fn field_kind_error(py: Python<'_>, field: &str, expected: &str, actual: &str) -> PyErr {
    let message = if actual == "ragged" {
        format!(
            "field {field:?} is variable-length: batch.ragged({field:?}) reads it (a Ragged); \
             batch.array reads fixed-shape fields"
        )
    } else {
        format!(
            "field {field:?} has a fixed shape: batch.array({field:?}) reads it (an array); \
             batch.ragged reads variable-length fields"
        )
    };
    let err = PyErr::from_type(field_kind_error_type(py), message);
    let value = err.value(py);
    let _ = value.setattr("field", field);
    let _ = value.setattr("expected", expected);
    let _ = value.setattr("actual", actual);
    err
}

/// A `SchemaError` about one value given to a writer: `field`, `index` (the record) and
/// `reason` set.
pub(crate) fn value_schema_error(field: &str, index: u64, reason: &str) -> PyErr {
    Python::attach(|py| {
        let err = PyErr::from_type(
            schema_error_type(py),
            format!("field {field:?} of record {index}: {reason}"),
        );
        let value = err.value(py);
        let _ = value.setattr("field", field);
        let _ = value.setattr("index", index);
        let _ = value.setattr("value", py.None());
        let _ = value.setattr("reason", reason);
        err
    })
}

/// Registers the exception classes in the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    SCHEMA_ERROR.get_or_try_init(py, || {
        two_bases(
            py,
            "SchemaError",
            py.get_type::<PyValueError>(),
            SCHEMA_ERROR_DOC,
        )
    })?;
    IO_ERROR.get_or_try_init(py, || {
        two_bases(py, "IOError", py.get_type::<PyOSError>(), IO_ERROR_DOC)
    })?;
    FIELD_KIND_ERROR.get_or_try_init(py, || {
        two_bases(
            py,
            "FieldKindError",
            py.get_type::<PyTypeError>(),
            FIELD_KIND_ERROR_DOC,
        )
    })?;
    m.add("Error", py.get_type::<Error>())?;
    m.add("CorruptError", py.get_type::<CorruptError>())?;
    m.add("ChecksumError", py.get_type::<ChecksumError>())?;
    m.add("NotADatasetError", py.get_type::<NotADatasetError>())?;
    m.add("SchemaError", schema_error_type(py))?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("ResumeMismatch", py.get_type::<ResumeMismatch>())?;
    m.add("WriterBusyError", py.get_type::<WriterBusyError>())?;
    m.add("IOError", io_error_type(py))?;
    m.add("FieldKindError", field_kind_error_type(py))?;
    m.add("ChunkGoneError", py.get_type::<ChunkGoneError>())?;
    m.add("RemoteError", py.get_type::<RemoteError>())?;
    m.add("PublishConflict", py.get_type::<PublishConflict>())?;
    m.add("InternalError", py.get_type::<InternalError>())?;
    m.add("TransformError", py.get_type::<TransformError>())?;
    Ok(())
}

/// The attributes an error carries, by name.
type Attrs = Vec<(&'static str, Py<PyAny>)>;

fn attr<'py, T: IntoPyObject<'py>>(
    py: Python<'py>,
    name: &'static str,
    v: T,
) -> (&'static str, Py<PyAny>) {
    let obj = pyo3::IntoPyObjectExt::into_py_any(v, py).unwrap_or_else(|_| py.None());
    (name, obj)
}

/// The Python exception for `e`, with its attributes set.
pub(crate) fn to_py(e: CoreError) -> PyErr {
    Python::attach(|py| {
        let message = e.to_string();
        let path = |p: &std::path::Path| p.display().to_string();
        let (kind, attrs): (Bound<'_, pyo3::types::PyType>, Attrs) = match &e {
            CoreError::ChecksumMismatch {
                path: p,
                field,
                index,
                offset,
                expected,
                actual,
            } => (
                py.get_type::<ChecksumError>(),
                vec![
                    attr(py, "path", path(p)),
                    attr(py, "field", field.as_str()),
                    attr(py, "index", *index),
                    attr(py, "offset", *offset),
                    attr(py, "expected", *expected),
                    attr(py, "actual", *actual),
                ],
            ),
            CoreError::OffsetCorrupt {
                path: p,
                field,
                index,
                offset,
                reason,
            }
            | CoreError::Decompress {
                path: p,
                field,
                index,
                offset,
                reason,
            } => (
                py.get_type::<CorruptError>(),
                vec![
                    attr(py, "path", path(p)),
                    attr(py, "field", field.as_str()),
                    attr(py, "index", *index),
                    attr(py, "offset", *offset),
                    attr(py, "reason", reason.as_str()),
                ],
            ),
            CoreError::DictionaryCorrupt {
                path: p,
                field,
                number,
                reason,
            } => (
                py.get_type::<CorruptError>(),
                vec![
                    attr(py, "path", path(p)),
                    attr(py, "field", field.as_str()),
                    attr(py, "dictionary", *number),
                    attr(py, "reason", reason.as_str()),
                ],
            ),
            CoreError::MetaCorrupt { path: p, reason } => (
                py.get_type::<CorruptError>(),
                vec![
                    attr(py, "path", path(p)),
                    attr(py, "reason", reason.as_str()),
                ],
            ),
            CoreError::Truncated {
                path: p,
                expected,
                actual,
            } => (
                py.get_type::<CorruptError>(),
                vec![
                    attr(py, "path", path(p)),
                    attr(py, "expected", *expected),
                    attr(py, "actual", *actual),
                ],
            ),
            CoreError::UnsupportedVersion {
                path: p,
                found,
                supported,
            } => (
                py.get_type::<CorruptError>(),
                vec![
                    attr(py, "path", path(p)),
                    attr(py, "found", *found),
                    attr(py, "supported", *supported),
                ],
            ),
            CoreError::RemoteCorrupt { object, reason } => (
                py.get_type::<CorruptError>(),
                vec![
                    attr(py, "url", object.as_str()),
                    attr(py, "reason", reason.as_str()),
                ],
            ),
            CoreError::IndexOutOfRange { index, len } => (
                py.get_type::<PyIndexError>(),
                vec![attr(py, "index", *index), attr(py, "len", *len)],
            ),
            CoreError::UnknownField { field } => (
                py.get_type::<PyKeyError>(),
                vec![attr(py, "field", field.as_str())],
            ),
            CoreError::NotADataset { path: p, reason } => (
                py.get_type::<NotADatasetError>(),
                vec![
                    attr(py, "path", path(p)),
                    attr(py, "reason", reason.as_str()),
                ],
            ),
            CoreError::ShapeMismatch { field, reason } => (
                schema_error_type(py),
                vec![
                    attr(py, "field", field.as_str()),
                    attr(py, "reason", reason.as_str()),
                ],
            ),
            CoreError::DtypeMismatch {
                field,
                dtype,
                requested,
            } => (
                schema_error_type(py),
                vec![
                    attr(py, "field", field.as_str()),
                    attr(py, "dtype", dtype.as_str()),
                    attr(py, "requested", requested.as_str()),
                ],
            ),
            CoreError::SchemaMismatch {
                part,
                reference,
                field,
                reason,
            } => (
                schema_error_type(py),
                vec![
                    attr(py, "part", *part),
                    attr(py, "reference", *reference),
                    attr(py, "field", field.as_str()),
                    attr(py, "reason", reason.as_str()),
                ],
            ),
            CoreError::PartMismatch {
                part,
                path: p,
                field,
                reason,
            } => (
                schema_error_type(py),
                vec![
                    attr(py, "part", part.as_str()),
                    attr(py, "path", path(p)),
                    attr(py, "field", field.as_str()),
                    attr(py, "reason", reason.as_str()),
                ],
            ),
            CoreError::PartOutsideCollection { part, collection } => (
                py.get_type::<ConfigError>(),
                vec![
                    attr(py, "part", part.as_str()),
                    attr(py, "collection", collection.as_str()),
                    attr(py, "reason", message.as_str()),
                ],
            ),
            CoreError::PartOfAnotherCollection {
                part,
                collection,
                target,
            } => (
                py.get_type::<ConfigError>(),
                vec![
                    attr(py, "path", path(part)),
                    attr(py, "collection", path(collection)),
                    attr(py, "target", path(target)),
                    attr(py, "reason", message.as_str()),
                ],
            ),
            CoreError::PartCommitted {
                part,
                path: p,
                collection,
            } => (
                py.get_type::<ConfigError>(),
                vec![
                    attr(py, "part", part.as_str()),
                    attr(py, "path", path(p)),
                    attr(py, "collection", path(collection)),
                    attr(py, "reason", message.as_str()),
                ],
            ),
            CoreError::PartChanged {
                part,
                path: p,
                expected,
                found,
            } => (
                py.get_type::<CorruptError>(),
                vec![
                    attr(py, "part", part.as_str()),
                    attr(py, "path", path(p)),
                    attr(py, "expected", *expected),
                    attr(py, "found", *found),
                ],
            ),
            CoreError::ArrowColumns {
                missing,
                extra,
                duplicated,
            } => (
                schema_error_type(py),
                vec![
                    attr(py, "missing", missing.clone()),
                    attr(py, "extra", extra.clone()),
                    attr(py, "duplicated", duplicated.clone()),
                    attr(py, "reason", message.as_str()),
                ],
            ),
            CoreError::ArrowType {
                column,
                arrow_type,
                dtype,
                reason,
            } => (
                schema_error_type(py),
                vec![
                    attr(py, "field", column.as_str()),
                    attr(py, "column", column.as_str()),
                    attr(py, "arrow_type", arrow_type.as_str()),
                    attr(py, "dtype", dtype.as_str()),
                    attr(py, "reason", reason.as_str()),
                ],
            ),
            CoreError::ArrowValue {
                column,
                row,
                reason,
            } => (
                schema_error_type(py),
                vec![
                    attr(py, "field", column.as_str()),
                    attr(py, "column", column.as_str()),
                    attr(py, "row", *row),
                    attr(py, "reason", reason.as_str()),
                ],
            ),
            CoreError::InvalidSchema { reason } => (
                schema_error_type(py),
                vec![attr(py, "reason", reason.as_str())],
            ),
            CoreError::FieldCount { expected, actual } => (
                schema_error_type(py),
                vec![attr(py, "expected", *expected), attr(py, "actual", *actual)],
            ),
            CoreError::RecordTooLarge { field, len, max } => (
                schema_error_type(py),
                vec![
                    attr(py, "field", field.as_str()),
                    attr(py, "len", *len),
                    attr(py, "max", *max),
                ],
            ),
            CoreError::InvalidConfig { reason } => (
                py.get_type::<ConfigError>(),
                vec![attr(py, "reason", reason.as_str())],
            ),
            CoreError::ResumeMismatch { reason } => (
                py.get_type::<ResumeMismatch>(),
                vec![attr(py, "reason", reason.as_str())],
            ),
            CoreError::WriterBusy { path: p } => (
                py.get_type::<WriterBusyError>(),
                vec![attr(py, "path", path(p))],
            ),
            CoreError::AlreadyExists { path: p } => {
                (io_error_type(py), vec![attr(py, "path", path(p))])
            }
            CoreError::Io {
                path: p,
                op,
                source,
            } => (
                io_error_type(py),
                vec![
                    attr(py, "path", path(p)),
                    attr(py, "op", *op),
                    attr(py, "errno", source.raw_os_error()),
                ],
            ),
            CoreError::ReadFailed {
                path: p,
                offset,
                source,
            } => (
                io_error_type(py),
                vec![
                    attr(py, "path", path(p)),
                    attr(py, "offset", *offset),
                    attr(py, "errno", source.raw_os_error()),
                ],
            ),
            CoreError::ChunkGone {
                path: p,
                chunk,
                reason,
            } => (
                py.get_type::<ChunkGoneError>(),
                vec![
                    attr(py, "path", path(p)),
                    attr(py, "chunk", *chunk),
                    attr(py, "reason", reason.as_str()),
                ],
            ),
            CoreError::Remote {
                object,
                range,
                status,
                reason,
            } => (
                py.get_type::<RemoteError>(),
                vec![
                    attr(py, "url", object.as_str()),
                    attr(py, "range", range.as_ref().map(|r| (r.start, r.end))),
                    attr(py, "status", *status),
                    attr(py, "reason", reason.as_str()),
                ],
            ),
            CoreError::PublishConflict { url, reason }
            | CoreError::ConditionalCreateIgnored { url, reason } => (
                py.get_type::<PublishConflict>(),
                vec![
                    attr(py, "url", url.as_str()),
                    attr(py, "reason", reason.as_str()),
                ],
            ),
            CoreError::Poisoned { cause } => {
                (io_error_type(py), vec![attr(py, "cause", cause.as_str())])
            }
            CoreError::ChunkTooLarge { chunk, size, max } => (
                schema_error_type(py),
                vec![
                    attr(py, "chunk", *chunk),
                    attr(py, "size", *size),
                    attr(py, "max", *max),
                ],
            ),
            CoreError::TooManyChunks { max } => {
                (schema_error_type(py), vec![attr(py, "max", *max)])
            }
            CoreError::TooManyCommits { generation } => {
                (io_error_type(py), vec![attr(py, "generation", *generation)])
            }
            CoreError::TooManyRecords { max } => {
                (schema_error_type(py), vec![attr(py, "max", *max)])
            }
            CoreError::Npy { path: p, .. } => {
                (schema_error_type(py), vec![attr(py, "path", path(p))])
            }
            CoreError::NotAnImage {
                path: p,
                member,
                reason,
            }
            | CoreError::BadShard {
                path: p,
                member,
                reason,
            } => (
                schema_error_type(py),
                vec![
                    attr(py, "path", path(p)),
                    attr(py, "member", member.clone()),
                    attr(py, "reason", reason.as_str()),
                ],
            ),
            CoreError::RowCountMismatch {
                path: p,
                rows,
                reference,
                expected,
            } => (
                schema_error_type(py),
                vec![
                    attr(py, "path", path(p)),
                    attr(py, "rows", *rows),
                    attr(py, "reference", path(reference)),
                    attr(py, "expected", *expected),
                ],
            ),
            CoreError::Transform {
                field,
                index,
                op,
                reason,
            } => (
                py.get_type::<TransformError>(),
                vec![
                    attr(py, "field", field.as_str()),
                    attr(py, "index", *index),
                    attr(py, "op", op.as_str()),
                    attr(py, "reason", reason.as_str()),
                ],
            ),
            CoreError::WorkerPanicked { .. }
            | CoreError::Internal { .. }
            | CoreError::ThreadSpawn { .. }
            | CoreError::WorkerGone { .. } => (py.get_type::<InternalError>(), Vec::new()),
            _ => (py.get_type::<Error>(), Vec::new()),
        };
        let err = PyErr::from_type(kind, message);
        let value = err.value(py);
        for (name, v) in attrs {
            // Attributes on the instance; a failure to set one leaves the message.
            let _ = value.setattr(name, v);
        }
        err
    })
}

/// `ValueError(message)`.
pub(crate) fn value_error(message: impl Into<String>) -> PyErr {
    PyValueError::new_err(message.into())
}

/// Builds a `ConfigError` carrying `reason`.
pub(crate) fn config_error(reason: impl Into<String>) -> PyErr {
    to_py(CoreError::InvalidConfig {
        reason: reason.into(),
    })
}
