//! Every command-line usage error — an unknown subcommand or flag, a bad `--backend`,
//! `--format`, `--codec` or size — exits with status 2 and one line on stderr that keeps clap's
//! hints (a similar subcommand or value, the accepted values).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod cli_support;

use cli_support::{zrecord, zrecord_ok};

/// Runs `args`, which must be a usage error; returns its one stderr line.
fn usage_error(args: &[&str]) -> String {
    let r = zrecord(args);
    assert_eq!(r.code, Some(2), "{args:?}: {}", r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "{args:?}: {}", r.stderr);
    assert!(r.stderr.starts_with("zrecord: "), "{args:?}: {}", r.stderr);
    assert!(r.stdout.is_empty(), "{args:?}");
    r.stderr
}

#[test]
fn a_misspelt_subcommand_keeps_the_similar_subcommand_hint() {
    let line = usage_error(&["conver", "a.npy"]);
    assert!(line.contains("'conver'"), "{line}");
    assert!(line.contains("similar subcommand"), "{line}");
    assert!(line.contains("'convert'"), "{line}");
    let line = usage_error(&["bench", "gathr", "x"]);
    assert!(line.contains("'gather'"), "{line}");
}

#[test]
fn bad_values_of_every_enumerated_flag_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let d = dir.to_str().unwrap();
    zrecord_ok(&["bench", "make", d, "--records", "4", "--record-bytes", "8"]);
    let line = usage_error(&["bench", "gather", d, "--backend", "urng"]);
    assert!(line.contains("--backend"), "{line}");
    assert!(line.contains("auto, uring, mmap, psync"), "{line}");
    assert!(line.contains("'uring'"), "{line}");
    let line = usage_error(&["bench", "loader", d, "--backend", "io-uring-please"]);
    assert!(line.contains("--backend"), "{line}");
    let line = usage_error(&["cat", d, "--index", "0", "--format", "jsn"]);
    assert!(line.contains("--format"), "{line}");
    assert!(line.contains("json, raw"), "{line}");
    let line = usage_error(&[
        "bench",
        "make",
        "x",
        "--records",
        "1",
        "--record-bytes",
        "8",
        "--codec",
        "lz4",
    ]);
    assert!(line.contains("raw, deflate, zstd, zstd-dict"), "{line}");
    usage_error(&["info", d, "--jsn"]);
    usage_error(&["cat", d]);
    usage_error(&["info"]);
    usage_error(&[
        "bench",
        "make",
        "x",
        "--records",
        "1",
        "--record-bytes",
        "64MB",
    ]);
}
