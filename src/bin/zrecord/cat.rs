//! `zrecord cat`: one record, as typed JSON values or raw bytes.

use crate::Res;
use clap::{Args, ValueEnum};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use zrecord::{DType, Dataset, Error};

#[derive(Args)]
#[command(
    after_help = "JSON: without --field, an object with one member per field; with \
    --field, that field's value alone. Numbers are typed by the field's dtype (f16 and bf16 as \
    numbers, bool as true/false, bytes as a string when valid UTF-8), nested by the field's \
    shape; an absent value is null; NaN and infinities are the strings \"NaN\", \"Infinity\", \
    \"-Infinity\". Raw: the stored value's bytes (little-endian, row-major), exactly."
)]
pub struct CatArgs {
    /// The dataset directory, or its URL on an object store (s3://bucket/prefix, gs://bucket/prefix, az://container/prefix).
    dir: PathBuf,
    /// The record index.
    #[arg(long)]
    index: u64,
    /// Print only this field (required for raw output when the dataset has several fields).
    #[arg(long)]
    field: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Json)]
    format: Format,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    /// Typed values as JSON.
    Json,
    /// The value's bytes, unchanged.
    Raw,
}

/// Runs `zrecord cat`.
pub fn run(a: &CatArgs) -> Res {
    let ds = Dataset::open(&a.dir)?;
    let snap = ds.snapshot();
    let meta = snap.meta();
    let fields: Vec<usize> = match &a.field {
        Some(name) => match snap.field_index(name) {
            Ok(f) => vec![f],
            Err(e) => {
                let all: Vec<&str> = meta.fields.iter().map(|f| f.name.as_str()).collect();
                return Err(
                    format!("{e}: {} has fields {}", a.dir.display(), all.join(", ")).into(),
                );
            }
        },
        None => (0..meta.fields.len()).collect(),
    };
    let names: Vec<&str> = fields
        .iter()
        .filter_map(|&f| meta.fields.get(f).map(|m| m.name.as_str()))
        .collect();
    let batch = ds.gather_fields_blocking(&[a.index], &names)?;
    let mut stdout = std::io::stdout().lock();
    match a.format {
        Format::Raw => {
            if fields.len() != 1 {
                return Err(Error::InvalidConfig {
                    reason: format!(
                        "--format raw writes one field: choose it with --field (fields: {})",
                        names.join(", ")
                    ),
                }
                .into());
            }
            stdout.write_all(batch.get(0, 0).unwrap_or_default())?;
        }
        Format::Json => {
            let mut out = String::new();
            let value = |pos: usize, out: &mut String| {
                let m = fields.get(pos).and_then(|&f| meta.fields.get(f));
                let bytes = batch.get(0, pos).unwrap_or_default();
                match m {
                    Some(m) => render(out, m.dtype, m.shape.as_deref(), bytes),
                    None => out.push_str("null"),
                }
            };
            if a.field.is_some() {
                value(0, &mut out);
            } else {
                out.push('{');
                for (pos, name) in names.iter().enumerate() {
                    if pos > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(&serde_json::Value::from(*name).to_string());
                    out.push_str(": ");
                    value(pos, &mut out);
                }
                out.push('}');
            }
            writeln!(stdout, "{out}")?;
        }
    }
    stdout.flush()?;
    Ok(())
}

/// Appends a value as JSON: null if absent, typed items nested by `shape` when it fits.
fn render(out: &mut String, dtype: DType, shape: Option<&[u64]>, bytes: &[u8]) {
    if bytes.is_empty() {
        out.push_str("null");
        return;
    }
    if dtype == DType::Bytes {
        match std::str::from_utf8(bytes) {
            Ok(s) => out.push_str(&serde_json::Value::from(s).to_string()),
            Err(_) => render(out, DType::U8, None, bytes),
        }
        return;
    }
    let item = usize::try_from(dtype.item_bytes()).unwrap_or(1);
    let n = (bytes.len() / item) as u64;
    let flat = [n];
    let dims: &[u64] = match shape {
        Some(s) if s.iter().product::<u64>() == n && bytes.len().is_multiple_of(item) => s,
        _ => &flat,
    };
    let mut items = bytes.chunks_exact(item);
    nest(out, dims, &mut || match items.next() {
        Some(b) => element(dtype, b),
        None => "null".to_string(),
    });
}

fn nest(out: &mut String, dims: &[u64], next: &mut dyn FnMut() -> String) {
    match dims.split_first() {
        None => out.push_str(&next()),
        Some((&d, rest)) => {
            out.push('[');
            for k in 0..d {
                if k > 0 {
                    out.push_str(", ");
                }
                nest(out, rest, next);
            }
            out.push(']');
        }
    }
}

/// One item as a JSON value.
fn element(dtype: DType, b: &[u8]) -> String {
    fn arr<const N: usize>(b: &[u8]) -> [u8; N] {
        b.try_into().unwrap_or([0; N])
    }
    let mut s = String::new();
    let _ = match dtype {
        DType::Bool => write!(s, "{}", b.first().is_some_and(|&v| v != 0)),
        DType::U8 | DType::Bytes => write!(s, "{}", b.first().copied().unwrap_or(0)),
        DType::I8 => write!(s, "{}", i8::from_le_bytes(arr(b))),
        DType::U16 => write!(s, "{}", u16::from_le_bytes(arr(b))),
        DType::I16 => write!(s, "{}", i16::from_le_bytes(arr(b))),
        DType::U32 => write!(s, "{}", u32::from_le_bytes(arr(b))),
        DType::I32 => write!(s, "{}", i32::from_le_bytes(arr(b))),
        DType::U64 => write!(s, "{}", u64::from_le_bytes(arr(b))),
        DType::I64 => write!(s, "{}", i64::from_le_bytes(arr(b))),
        DType::F16 => return float(f64::from(half::f16::from_le_bytes(arr(b)).to_f32()), true),
        DType::Bf16 => return float(f64::from(half::bf16::from_le_bytes(arr(b)).to_f32()), true),
        DType::F32 => return float(f64::from(f32::from_le_bytes(arr(b))), true),
        DType::F64 => return float(f64::from_le_bytes(arr(b)), false),
        _ => write!(s, "null"),
    };
    s
}

/// A float as a JSON number in its shortest exact form (`narrow`: the value is an f32, or
/// narrower, and prints as the shortest f32 that reads back to it).
fn float(v: f64, narrow: bool) -> String {
    if v.is_nan() {
        "\"NaN\"".to_string()
    } else if v.is_infinite() {
        let s = if v > 0.0 {
            "\"Infinity\""
        } else {
            "\"-Infinity\""
        };
        s.to_string()
    } else if narrow {
        format!("{:?}", v as f32)
    } else {
        format!("{v:?}")
    }
}
