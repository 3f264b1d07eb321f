//! `zrecord convert` → `info` → `verify` → `cat` round-trips every value exactly, for every
//! supported dtype, C and Fortran order, both byte orders and .npy versions 1.0–3.0, whatever
//! the codec, the number of decode threads and the block size.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod cli_support;

use cli_support::{write_npy, zrecord, zrecord_ok};
use serde_json::Value;
use std::path::{Path, PathBuf};

const ROWS: u64 = 7;

/// A numpy dtype code, its zrecord name and item size.
const DTYPES: &[(&str, &str, usize)] = &[
    ("b1", "bool", 1),
    ("i1", "i8", 1),
    ("u1", "u8", 1),
    ("i2", "i16", 2),
    ("u2", "u16", 2),
    ("i4", "i32", 4),
    ("u4", "u32", 4),
    ("i8", "i64", 8),
    ("u8", "u64", 8),
    ("f2", "f16", 2),
    ("f4", "f32", 4),
    ("f8", "f64", 8),
];

/// The value of element `k` (row-major index over the whole array) as little-endian bytes.
fn value_le(code: &str, k: u64) -> Vec<u8> {
    let mix = k.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17) ^ k;
    match code {
        "b1" => vec![u8::from(k.is_multiple_of(3))],
        "i1" | "u1" => vec![mix as u8],
        "i2" | "u2" => (mix as u16).to_le_bytes().to_vec(),
        "i4" | "u4" => (mix as u32).to_le_bytes().to_vec(),
        "i8" | "u8" => mix.to_le_bytes().to_vec(),
        "f2" => half::f16::from_f32(k as f32 * 0.37 - 3.0)
            .to_le_bytes()
            .to_vec(),
        "f4" => (k as f32 * 0.1 - 2.5).to_le_bytes().to_vec(),
        "f8" => (k as f64 / 7.0 - 1.0).to_le_bytes().to_vec(),
        _ => unreachable!(),
    }
}

/// Checks one JSON item against the expected little-endian bytes.
fn check_item(code: &str, v: &Value, want: &[u8], ctx: &str) {
    let ok = match code {
        "b1" => v.as_bool() == Some(want[0] != 0),
        "i1" => v.as_i64() == Some(i64::from(want[0] as i8)),
        "u1" => v.as_u64() == Some(u64::from(want[0])),
        "i2" => v.as_i64() == Some(i64::from(i16::from_le_bytes(want.try_into().unwrap()))),
        "u2" => v.as_u64() == Some(u64::from(u16::from_le_bytes(want.try_into().unwrap()))),
        "i4" => v.as_i64() == Some(i64::from(i32::from_le_bytes(want.try_into().unwrap()))),
        "u4" => v.as_u64() == Some(u64::from(u32::from_le_bytes(want.try_into().unwrap()))),
        "i8" => v.as_i64() == Some(i64::from_le_bytes(want.try_into().unwrap())),
        "u8" => v.as_u64() == Some(u64::from_le_bytes(want.try_into().unwrap())),
        "f2" => {
            half::f16::from_f64(v.as_f64().unwrap()).to_bits()
                == half::f16::from_le_bytes(want.try_into().unwrap()).to_bits()
        }
        "f4" => {
            (v.as_f64().unwrap() as f32).to_bits()
                == f32::from_le_bytes(want.try_into().unwrap()).to_bits()
        }
        "f8" => {
            v.as_f64().unwrap().to_bits() == f64::from_le_bytes(want.try_into().unwrap()).to_bits()
        }
        _ => unreachable!(),
    };
    assert!(ok, "{ctx}: got {v}, want bytes {want:?}");
}

/// One input file of the test.
struct Case {
    field: String,
    code: &'static str,
    dtype: &'static str,
    item: usize,
    shape: Vec<u64>,
    path: PathBuf,
}

impl Case {
    fn row_items(&self) -> u64 {
        self.shape[1..].iter().product()
    }

    /// Row `r` as little-endian, row-major bytes.
    fn row_le(&self, r: u64) -> Vec<u8> {
        let m = self.row_items();
        (r * m..(r + 1) * m)
            .flat_map(|k| value_le(self.code, k))
            .collect()
    }
}

/// The row-major flat index of each element, in Fortran (first index fastest) order.
fn fortran_positions(shape: &[u64]) -> Vec<u64> {
    let total: u64 = shape.iter().product();
    let mut c_strides = vec![1u64; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        c_strides[k] = c_strides[k + 1] * shape[k + 1];
    }
    (0..total)
        .map(|t| {
            let mut rest = t;
            let mut c = 0;
            for (k, &d) in shape.iter().enumerate() {
                c += (rest % d) * c_strides[k];
                rest /= d;
            }
            c
        })
        .collect()
}

/// Writes one `.npy` per (dtype, byte order, memory order), cycling the format version.
fn write_cases(dir: &Path) -> Vec<Case> {
    let mut cases = Vec::new();
    let mut version = 0u8;
    for &(code, dtype, item) in DTYPES {
        let orders: &[(char, &str)] = if item == 1 {
            &[('|', "na")]
        } else {
            &[('<', "le"), ('>', "be")]
        };
        for &(bo, bo_name) in orders {
            for fortran in [false, true] {
                version = version % 3 + 1;
                // Vary the row shape: 2-D items, a 3-D item, scalars.
                let shape: Vec<u64> = match (code, fortran) {
                    ("f4", true) => vec![ROWS, 2, 3, 2],
                    ("i2", false) => vec![ROWS],
                    _ => vec![ROWS, 2, 3],
                };
                let field = format!("{code}_{bo_name}_{}", if fortran { "f" } else { "c" });
                let path = dir.join(format!("{field}.npy"));
                let order: Vec<u64> = if fortran {
                    fortran_positions(&shape)
                } else {
                    (0..shape.iter().product()).collect()
                };
                let data: Vec<u8> = order
                    .iter()
                    .flat_map(|&k| {
                        let mut v = value_le(code, k);
                        if bo == '>' {
                            v.reverse();
                        }
                        v
                    })
                    .collect();
                write_npy(
                    &path,
                    version,
                    &format!("{bo}{code}"),
                    fortran,
                    &shape,
                    &data,
                );
                cases.push(Case {
                    field,
                    code,
                    dtype,
                    item,
                    shape,
                    path,
                });
            }
        }
    }
    cases
}

/// Walks a JSON value nested by `dims`, collecting its leaves.
fn leaves<'a>(v: &'a Value, dims: &[u64], out: &mut Vec<&'a Value>) {
    match dims.split_first() {
        None => out.push(v),
        Some((&d, rest)) => {
            let a = v.as_array().expect("nested array");
            assert_eq!(a.len() as u64, d, "dimension length");
            for x in a {
                leaves(x, rest, out);
            }
        }
    }
}

fn convert_and_check(extra: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let cases = write_cases(tmp.path());
    let out = tmp.path().join("ds");
    let mut args: Vec<String> = vec!["convert".into()];
    args.extend(cases.iter().map(|c| c.path.display().to_string()));
    args.extend(["--out".to_string(), out.display().to_string()]);
    args.extend(extra.iter().map(|s| s.to_string()));
    let r = zrecord_ok(&args);
    assert!(
        r.stdout_str().contains("converted 7 rows"),
        "{}",
        r.stdout_str()
    );

    // info: length, dtypes, shapes.
    let info = zrecord_ok(&["info", out.to_str().unwrap(), "--json"]);
    let info: Value = serde_json::from_slice(&info.stdout).unwrap();
    assert_eq!(info["len"], ROWS);
    let fields = info["fields"].as_array().unwrap();
    assert_eq!(fields.len(), cases.len());
    for (c, f) in cases.iter().zip(fields) {
        assert_eq!(f["name"], c.field.as_str());
        assert_eq!(f["dtype"], c.dtype, "{}", c.field);
        let shape: Vec<u64> = f["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        assert_eq!(shape, c.shape[1..], "{}", c.field);
        assert_eq!(f["logical_bytes"], ROWS * c.row_items() * c.item as u64);
    }

    // verify: clean.
    let v = zrecord_ok(&["verify", out.to_str().unwrap()]);
    assert!(v.stdout_str().contains("verified"));

    // cat json: every value of every record.
    for r in 0..ROWS {
        let j = zrecord_ok(&["cat", out.to_str().unwrap(), "--index", &r.to_string()]);
        let j: Value = serde_json::from_slice(&j.stdout).unwrap();
        for c in &cases {
            let mut got = Vec::new();
            leaves(&j[&c.field], &c.shape[1..], &mut got);
            let want = c.row_le(r);
            assert_eq!(got.len() * c.item, want.len(), "{} row {r}", c.field);
            for (k, (v, w)) in got.iter().zip(want.chunks_exact(c.item)).enumerate() {
                check_item(c.code, v, w, &format!("{} row {r} item {k}", c.field));
            }
        }
    }

    // cat raw: the exact little-endian, row-major bytes.
    for r in [0, ROWS / 2, ROWS - 1] {
        for c in &cases {
            let raw = zrecord_ok(&[
                "cat",
                out.to_str().unwrap(),
                "--index",
                &r.to_string(),
                "--field",
                &c.field,
                "--format",
                "raw",
            ]);
            assert_eq!(raw.stdout, c.row_le(r), "{} row {r}", c.field);
        }
    }

    // Past the end: a clear error.
    let past = zrecord(&["cat", out.to_str().unwrap(), "--index", "7"]);
    assert!(!past.ok);
    assert!(past.stderr.contains("out of range"), "{}", past.stderr);
}

#[test]
fn every_dtype_order_and_byte_order_round_trips() {
    convert_and_check(&[]);
}

#[test]
fn deflate_many_blocks_and_decode_threads_round_trip() {
    convert_and_check(&[
        "--codec",
        "deflate",
        "--writers",
        "3",
        "--block-bytes",
        "64",
        "--chunk-size",
        "1K",
    ]);
}

#[test]
fn field_names_can_be_given() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("x.npy");
    let b = tmp.path().join("y.npy");
    cli_support::write_f32(&a, 3, 2);
    cli_support::write_f32(&b, 3, 1);
    let out = tmp.path().join("named");
    zrecord_ok(&[
        "convert",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--field",
        "image",
        "--field",
        "label",
    ]);
    let j = zrecord_ok(&[
        "cat",
        out.to_str().unwrap(),
        "--index",
        "2",
        "--field",
        "label",
    ]);
    let v: Value = serde_json::from_slice(&j.stdout).unwrap();
    assert_eq!(v, serde_json::json!([2000.0]));
    let j = zrecord_ok(&["cat", out.to_str().unwrap(), "--index", "1"]);
    let v: Value = serde_json::from_slice(&j.stdout).unwrap();
    assert_eq!(v["image"], serde_json::json!([1000.0, 1001.0]));
}
