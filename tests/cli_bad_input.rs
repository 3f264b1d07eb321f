//! Bad input to `zrecord convert` — a missing file, mismatched row counts, an object array, a
//! structured dtype, a truncated .npy, a non-empty `--out` — fails with exit status 1 and one
//! clear line on stderr naming the problem, and leaves no dataset (or staging directory) behind.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod cli_support;

use cli_support::{listing, npy_with_header, write_f32, write_npy, zrecord};
use std::path::Path;

/// Runs a convert that must fail; checks the one-line message and that nothing was created.
fn fails(dir: &Path, inputs: &[&str], expect: &[&str]) {
    let before = listing(dir);
    let out = dir.join("out.zr");
    let mut args = vec!["convert".to_string()];
    args.extend(inputs.iter().map(|i| dir.join(i).display().to_string()));
    args.extend(["--out".to_string(), out.display().to_string()]);
    let r = zrecord(&args);
    assert!(!r.ok, "convert of {inputs:?} succeeded");
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "not one line: {}", r.stderr);
    assert!(r.stderr.starts_with("zrecord: "), "{}", r.stderr);
    for e in expect {
        assert!(r.stderr.contains(e), "{:?} lacks {e:?}", r.stderr);
    }
    assert!(!out.exists(), "{} left behind", out.display());
    assert_eq!(
        listing(dir),
        before,
        "something was left in {}",
        dir.display()
    );
}

#[test]
fn a_missing_file_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    write_f32(&tmp.path().join("a.npy"), 4, 2);
    fails(
        tmp.path(),
        &["a.npy", "nope.npy"],
        &["nope.npy", "No such file"],
    );
}

#[test]
fn mismatched_row_counts_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    write_f32(&tmp.path().join("a.npy"), 4, 2);
    write_f32(&tmp.path().join("b.npy"), 5, 2);
    fails(
        tmp.path(),
        &["a.npy", "b.npy"],
        &["b.npy", "5 rows", "a.npy", "4"],
    );
}

#[test]
fn an_object_array_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    write_npy(
        &tmp.path().join("obj.npy"),
        1,
        "|O",
        false,
        &[3],
        &[0u8; 24],
    );
    fails(tmp.path(), &["obj.npy"], &["obj.npy", "object array"]);
}

#[test]
fn a_structured_dtype_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let f = npy_with_header(
        1,
        "{'descr': [('a', '<f4'), ('b', '<i8')], 'fortran_order': False, 'shape': (2,), }",
        &[0u8; 24],
    );
    std::fs::write(tmp.path().join("rec.npy"), &f).unwrap();
    fails(tmp.path(), &["rec.npy"], &["rec.npy", "structured dtype"]);
}

#[test]
fn a_complex_dtype_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    write_npy(&tmp.path().join("c.npy"), 2, "<c8", false, &[2], &[0u8; 16]);
    fails(tmp.path(), &["c.npy"], &["c.npy", "complex"]);
}

#[test]
fn a_truncated_file_is_refused_before_writing() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("t.npy");
    write_f32(&p, 10, 3);
    let full = std::fs::read(&p).unwrap();
    // Cut inside the data, then inside the header.
    std::fs::write(&p, &full[..full.len() - 5]).unwrap();
    fails(tmp.path(), &["t.npy"], &["t.npy", "truncated"]);
    std::fs::write(&p, &full[..40]).unwrap();
    fails(tmp.path(), &["t.npy"], &["t.npy", "truncated"]);
}

#[test]
fn garbage_is_not_an_npy_file() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("g.npy"), b"PK\x03\x04 this is a zip").unwrap();
    fails(tmp.path(), &["g.npy"], &["g.npy", "magic"]);
}

#[test]
fn a_non_empty_out_is_refused_and_kept() {
    let tmp = tempfile::tempdir().unwrap();
    write_f32(&tmp.path().join("a.npy"), 4, 2);
    let out = tmp.path().join("busy");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("precious.txt"), b"keep me").unwrap();
    let r = zrecord(&[
        "convert",
        tmp.path().join("a.npy").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!r.ok);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(r.stderr.contains("not empty"), "{}", r.stderr);
    assert_eq!(listing(&out), vec!["precious.txt".to_string()]);
    assert_eq!(std::fs::read(out.join("precious.txt")).unwrap(), b"keep me");
    assert_eq!(
        listing(tmp.path()),
        vec!["a.npy".to_string(), "busy".to_string()]
    );
}

#[test]
fn an_empty_out_directory_is_used() {
    let tmp = tempfile::tempdir().unwrap();
    write_f32(&tmp.path().join("a.npy"), 4, 2);
    let out = tmp.path().join("empty");
    std::fs::create_dir(&out).unwrap();
    let r = zrecord(&[
        "convert",
        tmp.path().join("a.npy").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(r.ok, "{}", r.stderr);
    assert!(out.join("meta.json").exists());
    assert_eq!(
        listing(tmp.path()),
        vec!["a.npy".to_string(), "empty".to_string()]
    );
}

#[test]
fn bad_flags_are_one_line_usage_errors() {
    let tmp = tempfile::tempdir().unwrap();
    write_f32(&tmp.path().join("a.npy"), 4, 2);
    let a = tmp.path().join("a.npy");
    let out = tmp.path().join("o");
    for extra in [
        &["--writers", "9"][..],
        &["--codec", "lz4"][..],
        &["--chunk-size", "lots"][..],
    ] {
        let mut args = vec![
            "convert",
            a.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let r = zrecord(&args);
        assert_eq!(r.code, Some(2), "{extra:?}: {}", r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{extra:?}: {}", r.stderr);
        assert!(!out.exists());
    }
    // A --field count that does not match the inputs.
    let r = zrecord(&[
        "convert",
        a.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--field",
        "x",
        "--field",
        "y",
    ]);
    assert_eq!(r.code, Some(1));
    assert!(r.stderr.contains("--field"), "{}", r.stderr);
    assert!(!out.exists());
}

#[test]
fn a_failure_while_writing_leaves_nothing_behind() {
    // 65,600 one-byte rows, one chunk each (chunk size 1): the writer runs out of chunk ids
    // (65,535) in the middle of the conversion. Deflate skips the up-front chunk-count check
    // (compressed sizes are unknown before writing), so the failure comes from the writer.
    let tmp = tempfile::tempdir().unwrap();
    let rows = 65_600u64;
    let data: Vec<u8> = (0..rows).map(|i| i as u8).collect();
    write_npy(
        &tmp.path().join("bytes.npy"),
        1,
        "|u1",
        false,
        &[rows],
        &data,
    );
    let out = tmp.path().join("new").join("parents").join("out.zr");
    let r = zrecord(&[
        "convert",
        tmp.path().join("bytes.npy").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--codec",
        "deflate",
        "--chunk-size",
        "1",
    ]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(r.stderr.contains("chunk"), "{}", r.stderr);
    // Neither the dataset, nor its staging directory, nor the parents convert created.
    assert_eq!(listing(tmp.path()), vec!["bytes.npy".to_string()]);
}
