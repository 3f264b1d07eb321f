//! Arrow data in, through the Arrow PyCapsule interface: anything with `__arrow_c_stream__` (a
//! pyarrow `Table` or `RecordBatchReader`, a polars `DataFrame`, …) or `__arrow_c_array__` (a
//! record batch, or a struct array whose members are the columns). The capsules are imported
//! with arrow-array's C data interface: no pyarrow on the Rust side, and no copy of a buffer.

use crate::errors::value_error;
use arrow_array::ffi::{from_ffi, FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::ffi_stream::{FFI_ArrowArrayStream, RecordBatchStreamReader};
use arrow_array::{cast::AsArray, make_array, Array, RecordBatch};
use arrow_schema::Schema;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods, PyTuple};
use std::sync::Arc;

/// What `Writer.append_arrow` was given: one record batch, or a stream of them.
pub(crate) enum ArrowInput {
    Batch(RecordBatch),
    Stream(RecordBatchStreamReader),
}

/// Imports `data` through its Arrow PyCapsule: the stream if it has one (a table's chunks, a
/// reader's batches), else the array (a record batch or a struct array).
pub(crate) fn import(data: &Bound<'_, PyAny>) -> PyResult<ArrowInput> {
    if data.hasattr("__arrow_c_stream__")? {
        let capsule = data.call_method0("__arrow_c_stream__")?;
        let capsule = capsule.cast::<PyCapsule>()?;
        let ptr = capsule.pointer_checked(Some(c"arrow_array_stream"))?;
        // SAFETY: a capsule named "arrow_array_stream" holds a valid `ArrowArrayStream` (the
        // PyCapsule interface's contract). `from_raw` moves it out and leaves a released stream
        // behind, so the capsule's destructor does not release it a second time.
        let stream = unsafe { FFI_ArrowArrayStream::from_raw(ptr.as_ptr().cast()) };
        let reader = RecordBatchStreamReader::try_new(stream)
            .map_err(|e| value_error(format!("cannot read the Arrow stream: {e}")))?;
        return Ok(ArrowInput::Stream(reader));
    }
    if data.hasattr("__arrow_c_array__")? {
        let pair = data.call_method0("__arrow_c_array__")?;
        let pair = pair.cast::<PyTuple>()?;
        let schema = pair.get_item(0)?;
        let array = pair.get_item(1)?;
        let schema = schema.cast::<PyCapsule>()?;
        let array = array.cast::<PyCapsule>()?;
        let schema_ptr = schema.pointer_checked(Some(c"arrow_schema"))?;
        let array_ptr = array.pointer_checked(Some(c"arrow_array"))?;
        // SAFETY: a capsule named "arrow_array" holds a valid `ArrowArray`; `from_raw` moves it
        // out (the capsule keeps a released one, which its destructor leaves alone).
        let ffi_array = unsafe { FFI_ArrowArray::from_raw(array_ptr.as_ptr().cast()) };
        // SAFETY: a capsule named "arrow_schema" holds a valid `ArrowSchema`, owned by the
        // capsule, which `schema` keeps alive for as long as this borrow.
        let ffi_schema = unsafe { &*schema_ptr.as_ptr().cast::<FFI_ArrowSchema>() };
        // SAFETY: the array and its schema come from the same `__arrow_c_array__` call.
        let imported = unsafe { from_ffi(ffi_array, ffi_schema) }
            .map_err(|e| value_error(format!("cannot import the Arrow array: {e}")))?;
        let array = make_array(imported);
        let Some(st) = array.as_struct_opt() else {
            return Err(PyTypeError::new_err(format!(
                "append_arrow takes a record batch, a struct array, a table or a stream; got an \
                 Arrow array of type {}",
                array.data_type()
            )));
        };
        if st.null_count() > 0 {
            return Err(value_error(
                "a struct array with null rows is not a record batch: fill or drop them first",
            ));
        }
        let schema = Arc::new(Schema::new(st.fields().clone()));
        let batch = RecordBatch::try_new(schema, st.columns().to_vec())
            .map_err(|e| value_error(format!("not a record batch: {e}")))?;
        return Ok(ArrowInput::Batch(batch));
    }
    Err(PyTypeError::new_err(format!(
        "append_arrow takes an object with the Arrow PyCapsule interface (__arrow_c_stream__ or \
         __arrow_c_array__: a pyarrow Table, RecordBatch or RecordBatchReader, a polars \
         DataFrame, ...); got {}",
        data.get_type().name()?
    )))
}
