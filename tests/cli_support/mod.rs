//! Shared helpers of the `cli_*` tests: running the real binary and writing `.npy` files.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing
)]

use std::path::Path;
use std::process::{Command, Output};

/// The outcome of one run of the binary.
pub struct Run {
    pub ok: bool,
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

impl Run {
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

/// Runs `zrecord ARGS` (no terminal: progress bars stay hidden).
pub fn zrecord<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Run {
    zrecord_env(args, &[])
}

/// Runs `zrecord ARGS` with `ZRECORD_IO` and `RUST_LOG` unset, then the variables `env` set.
pub fn zrecord_env<S: AsRef<std::ffi::OsStr>>(args: &[S], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_zrecord"));
    cmd.args(args)
        .env_remove("ZRECORD_IO")
        .env_remove("RUST_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    run(&mut cmd)
}

/// Runs a prepared command and collects its outcome.
pub fn run(cmd: &mut Command) -> Run {
    let out: Output = cmd.output().expect("run zrecord");
    Run {
        ok: out.status.success(),
        code: out.status.code(),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `zrecord ARGS` and panics with its stderr unless it succeeds.
pub fn zrecord_ok<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Run {
    let r = zrecord(args);
    assert!(r.ok, "zrecord failed: {}", r.stderr);
    r
}

/// A `.npy` file as NumPy writes it: format `version`, header padded with spaces to a multiple
/// of 64 bytes and ended by a newline, then `data` as given (already in the file's order and
/// byte order).
pub fn npy_bytes(version: u8, descr: &str, fortran: bool, shape: &[u64], data: &[u8]) -> Vec<u8> {
    let shape_txt = match shape {
        [n] => format!("({n},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let fortran = if fortran { "True" } else { "False" };
    let text =
        format!("{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape_txt}, }}");
    npy_with_header(version, &text, data)
}

/// A `.npy` file with the given header text (padded as NumPy pads it) and data.
pub fn npy_with_header(version: u8, header: &str, data: &[u8]) -> Vec<u8> {
    let mut text = header.to_string();
    let prefix = if version == 1 { 10 } else { 12 };
    while !(prefix + text.len() + 1).is_multiple_of(64) {
        text.push(' ');
    }
    text.push('\n');
    let mut f = b"\x93NUMPY".to_vec();
    f.extend_from_slice(&[version, 0]);
    if version == 1 {
        f.extend_from_slice(&(text.len() as u16).to_le_bytes());
    } else {
        f.extend_from_slice(&(text.len() as u32).to_le_bytes());
    }
    f.extend_from_slice(text.as_bytes());
    f.extend_from_slice(data);
    f
}

/// Writes a `.npy` file.
pub fn write_npy(path: &Path, version: u8, descr: &str, fortran: bool, shape: &[u64], data: &[u8]) {
    std::fs::write(path, npy_bytes(version, descr, fortran, shape, data)).unwrap();
}

/// A C-order little-endian f32 `.npy` of `rows` rows of `cols` values `row * 1000 + col`.
pub fn write_f32(path: &Path, rows: u64, cols: u64) {
    let data: Vec<u8> = (0..rows)
        .flat_map(|r| (0..cols).map(move |c| (r * 1000 + c) as f32))
        .flat_map(f32::to_le_bytes)
        .collect();
    write_npy(path, 1, "<f4", false, &[rows, cols], &data);
}

/// The names in a directory, sorted.
pub fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}
