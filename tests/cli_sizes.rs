//! Byte sizes parse the same in every flag that takes one (`convert --chunk-size`, `bench make
//! --chunk-bytes` and `--record-bytes`): plain bytes, `K`/`KiB`, `M`/`MiB`, `G`/`GiB` as binary
//! multiples; decimal units and zero are usage errors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod cli_support;

use cli_support::{write_f32, zrecord, zrecord_ok};
use serde_json::Value;

fn chunk_size(dir: &std::path::Path) -> u64 {
    let r = zrecord_ok(&["info", dir.to_str().unwrap(), "--json"]);
    let v: Value = serde_json::from_slice(&r.stdout).unwrap();
    v["chunk_size_bytes"].as_u64().unwrap()
}

#[test]
fn every_size_flag_reads_the_same_spellings() {
    let tmp = tempfile::tempdir().unwrap();
    let npy = tmp.path().join("a.npy");
    write_f32(&npy, 3, 2);
    let cases = [
        ("65536", 65536u64),
        ("64K", 64 << 10),
        ("64k", 64 << 10),
        ("64KiB", 64 << 10),
        ("1M", 1 << 20),
        ("256MiB", 256 << 20),
        ("1GiB", 1 << 30),
        ("1G", 1 << 30),
    ];
    for (k, (text, bytes)) in cases.iter().enumerate() {
        let out = tmp.path().join(format!("c{k}"));
        let o = out.to_str().unwrap();
        zrecord_ok(&[
            "convert",
            npy.to_str().unwrap(),
            "--out",
            o,
            "--chunk-size",
            text,
        ]);
        assert_eq!(chunk_size(&out), *bytes, "convert --chunk-size {text}");
        let made = tmp.path().join(format!("m{k}"));
        let m = made.to_str().unwrap();
        zrecord_ok(&[
            "bench",
            "make",
            m,
            "--records",
            "2",
            "--record-bytes",
            "1K",
            "--chunk-bytes",
            text,
        ]);
        assert_eq!(chunk_size(&made), *bytes, "bench make --chunk-bytes {text}");
    }
    let r = zrecord_ok(&[
        "cat",
        tmp.path().join("m0").to_str().unwrap(),
        "--index",
        "1",
        "--format",
        "raw",
    ]);
    assert_eq!(r.stdout.len(), 1024, "--record-bytes 1K");
}

#[test]
fn decimal_units_and_zero_are_usage_errors_everywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let npy = tmp.path().join("a.npy");
    write_f32(&npy, 3, 2);
    let out = tmp.path().join("o");
    for bad in ["64MB", "1KB", "0", "1.5M", "lots", "12Q"] {
        let r = zrecord(&[
            "convert",
            npy.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--chunk-size",
            bad,
        ]);
        assert_eq!(r.code, Some(2), "--chunk-size {bad}: {}", r.stderr);
        assert!(r.stderr.contains("byte size"), "{}", r.stderr);
        let r = zrecord(&[
            "bench",
            "make",
            out.to_str().unwrap(),
            "--records",
            "1",
            "--record-bytes",
            "8",
            "--chunk-bytes",
            bad,
        ]);
        assert_eq!(r.code, Some(2), "--chunk-bytes {bad}: {}", r.stderr);
        let r = zrecord(&[
            "bench",
            "make",
            out.to_str().unwrap(),
            "--records",
            "1",
            "--record-bytes",
            bad,
        ]);
        assert_eq!(r.code, Some(2), "--record-bytes {bad}: {}", r.stderr);
        assert!(!out.exists());
    }
}
