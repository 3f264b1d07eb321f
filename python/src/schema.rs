//! `zrecord.Field` and schemas given as a dict or a list of fields.

use crate::errors::{to_py, value_error};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use zrecord::{Codec, DType, Field, Schema};

/// The dtype named `s`: zrecord's names (`u8`, `i64`, `f32`, `bytes`, `bf16`, ...; the digits
/// count bits), NumPy's names (`uint8`, `float32`, `bool`, ...) or NumPy's type strings with a
/// byte order (`<i8`, `|u1`, `<f4`: the digits count bytes, as in `arr.dtype.str`).
pub(crate) fn dtype_of(s: &str) -> PyResult<DType> {
    let t = s.trim();
    if let Some(rest) = t.strip_prefix(['<', '=', '|']) {
        let d = match rest {
            "b1" | "?" => DType::Bool,
            "u1" => DType::U8,
            "i1" => DType::I8,
            "u2" => DType::U16,
            "i2" => DType::I16,
            "u4" => DType::U32,
            "i4" => DType::I32,
            "u8" => DType::U64,
            "i8" => DType::I64,
            "f2" => DType::F16,
            "f4" => DType::F32,
            "f8" => DType::F64,
            other => {
                return Err(value_error(format!(
                    "unsupported NumPy type string {t:?} ({other:?} is not one of zrecord's dtypes)"
                )))
            }
        };
        return Ok(d);
    }
    if t.starts_with('>') {
        return Err(value_error(format!(
            "big-endian dtype {t:?}: zrecord stores little-endian values"
        )));
    }
    let d = match t {
        "bytes" => DType::Bytes,
        "bool" | "?" => DType::Bool,
        "u8" | "uint8" => DType::U8,
        "i8" | "int8" => DType::I8,
        "u16" | "uint16" => DType::U16,
        "i16" | "int16" => DType::I16,
        "u32" | "uint32" => DType::U32,
        "i32" | "int32" => DType::I32,
        "u64" | "uint64" => DType::U64,
        "i64" | "int64" => DType::I64,
        "f16" | "float16" | "half" => DType::F16,
        "bf16" | "bfloat16" => DType::Bf16,
        "f32" | "float32" => DType::F32,
        "f64" | "float64" => DType::F64,
        other => {
            return Err(value_error(format!(
                "unknown dtype {other:?} (expected bytes, bool, u8, i8, u16, i16, u32, i32, u64, \
                 i64, f16, bf16, f32, f64, a NumPy name of one or a NumPy type string like '<f4')"
            )))
        }
    };
    Ok(d)
}

/// A codec named as `Field.codec` reports it: `raw`, `deflate`, `zstd`, `zstd_dict`, the zstd
/// ones optionally with a level (`zstd:9`, `zstd_dict:19`).
pub(crate) fn codec_of(s: &str) -> PyResult<Codec> {
    let s = s.trim().to_ascii_lowercase().replace('-', "_");
    let (name, level) = match s.split_once(':') {
        Some((name, level)) => {
            let level: i32 = level
                .parse()
                .ok()
                .filter(|l| (1..=19).contains(l))
                .ok_or_else(|| {
                    value_error(format!(
                        "zstd level {level:?} is not an integer from 1 to 19"
                    ))
                })?;
            (name.to_string(), Some(level))
        }
        None => (s.clone(), None),
    };
    let level = level.unwrap_or(Codec::ZSTD_DEFAULT_LEVEL);
    match name.as_str() {
        "raw" | "none" if s == name => Ok(Codec::Raw),
        "deflate" if s == name => Ok(Codec::Deflate),
        "zstd" => Ok(Codec::Zstd { level }),
        "zstd_dict" => Ok(Codec::ZstdDict { level }),
        _ => Err(value_error(format!(
            "unknown codec {s:?} (expected raw, deflate, zstd, zstd_dict, or zstd:LEVEL, \
             zstd_dict:LEVEL)"
        ))),
    }
}

/// A dtype given as a string, a NumPy dtype or a NumPy scalar type.
fn dtype_from(obj: &Bound<'_, PyAny>) -> PyResult<DType> {
    if let Ok(s) = obj.extract::<String>() {
        return dtype_of(&s);
    }
    let np = obj.py().import("numpy")?;
    let name: String = np
        .call_method1("dtype", (obj,))?
        .getattr("name")?
        .extract()?;
    dtype_of(&name)
}

/// One field of a schema: a name, a dtype, an optional fixed item shape and a codec.
#[pyclass(
    frozen,
    module = "zrecord._zrecord",
    name = "Field",
    eq,
    from_py_object
)]
#[derive(Clone, PartialEq)]
pub struct PyField {
    pub(crate) inner: Field,
}

impl PyField {
    pub(crate) fn from_field(inner: Field) -> Self {
        PyField { inner }
    }
}

#[pymethods]
impl PyField {
    #[new]
    #[pyo3(signature = (name, dtype, shape=None, codec="raw"))]
    fn new(
        name: String,
        dtype: Bound<'_, PyAny>,
        shape: Option<Vec<u64>>,
        codec: &str,
    ) -> PyResult<Self> {
        let mut f = Field::new(name, dtype_from(&dtype)?).codec(codec_of(codec)?);
        f.shape = shape;
        Ok(PyField { inner: f })
    }

    #[getter]
    fn name(&self) -> String {
        self.inner.name.clone()
    }

    /// zrecord's dtype name (`u8`, `f32`, `bytes`, ...).
    #[getter]
    fn dtype(&self) -> String {
        self.inner.dtype.name().to_string()
    }

    /// The fixed item shape, or None for variable-length values.
    #[getter]
    fn shape(&self) -> Option<Vec<u64>> {
        self.inner.shape.clone()
    }

    #[getter]
    fn codec(&self) -> String {
        self.inner.codec.to_string()
    }

    /// Pickles as its name, dtype, shape and codec.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, pyo3::types::PyTuple>> {
        let py = slf.py();
        let f = slf.get();
        let args = (f.name(), f.dtype(), f.shape(), f.codec()).into_pyobject(py)?;
        pyo3::types::PyTuple::new(py, [slf.get_type().into_any(), args.into_any()])
    }

    fn __repr__(&self) -> String {
        format!(
            "Field({:?}, {:?}, shape={:?}, codec={:?})",
            self.inner.name,
            self.inner.dtype.name(),
            self.inner.shape,
            self.codec()
        )
    }
}

/// A schema from a list of `Field`s, or a dict `{name: dtype}` / `{name: (dtype, shape)}` /
/// `{name: {"dtype": .., "shape": .., "codec": ..}}`.
pub(crate) fn schema_from(
    obj: &Bound<'_, PyAny>,
    chunk_size_bytes: Option<u64>,
) -> PyResult<Schema> {
    let mut schema = Schema::new();
    if let Some(c) = chunk_size_bytes {
        schema = schema.chunk_size_bytes(c);
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        for (k, v) in d.iter() {
            let name: String = k.extract()?;
            let field = if let Ok(f) = v.extract::<PyField>() {
                let mut f = f.inner;
                f.name = name;
                f
            } else if let Ok(spec) = v.cast::<PyDict>() {
                let dtype = spec
                    .get_item("dtype")?
                    .ok_or_else(|| value_error(format!("field {name:?}: no dtype")))?;
                let mut f = Field::new(name, dtype_from(&dtype)?);
                if let Some(s) = spec.get_item("shape")? {
                    f.shape = s.extract()?;
                }
                if let Some(c) = spec.get_item("codec")? {
                    f = f.codec(codec_of(&c.extract::<String>()?)?);
                }
                f
            } else if let Ok((dtype, shape)) = v.extract::<(Bound<'_, PyAny>, Option<Vec<u64>>)>() {
                let mut f = Field::new(name, dtype_from(&dtype)?);
                f.shape = shape;
                f
            } else {
                Field::new(name, dtype_from(&v)?)
            };
            schema = schema.field(field);
        }
    } else {
        for item in obj.try_iter()? {
            let f: PyField = item?.extract()?;
            schema = schema.field(f.inner);
        }
    }
    schema.validate().map_err(to_py)?;
    Ok(schema)
}
