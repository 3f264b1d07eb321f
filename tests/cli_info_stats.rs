//! `zrecord info` reports length, fields, generation, compression ratio (logical / stored bytes)
//! and utilization (live stored bytes / chunk bytes) computed from the offset tables: a fresh
//! dataset is fully utilized, and rewritten records lower utilization.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod cli_support;

use cli_support::{write_npy, zrecord_ok};
use serde_json::Value;
use zrecord::{Writer, WriterConfig};

fn info(dir: &std::path::Path) -> Value {
    let r = zrecord_ok(&["info", dir.to_str().unwrap(), "--json"]);
    serde_json::from_slice(&r.stdout).unwrap()
}

#[test]
fn ratio_and_utilization_follow_the_tables() {
    let tmp = tempfile::tempdir().unwrap();
    // 100 rows of 256 very compressible u16 values.
    let data: Vec<u8> = (0..100u32 * 256)
        .flat_map(|k| ((k / 256) as u16).to_le_bytes())
        .collect();
    let input = tmp.path().join("tokens.npy");
    write_npy(&input, 1, "<u2", false, &[100, 256], &data);
    let dir = tmp.path().join("ds");
    zrecord_ok(&[
        "convert",
        input.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
        "--codec",
        "deflate",
    ]);
    let v = info(&dir);
    assert_eq!(v["len"], 100);
    assert_eq!(v["fields"][0]["name"], "tokens");
    assert_eq!(v["fields"][0]["dtype"], "u16");
    assert_eq!(v["fields"][0]["shape"], serde_json::json!([256]));
    assert_eq!(v["fields"][0]["codec"], "deflate");
    assert_eq!(v["logical_bytes"], 100 * 512);
    let stored = v["stored_bytes"].as_u64().unwrap();
    assert!(
        stored < 100 * 512 / 4,
        "deflate should shrink runs: {stored}"
    );
    let ratio = v["compression_ratio"].as_f64().unwrap();
    assert!((ratio - 51_200.0 / stored as f64).abs() < 1e-9);
    assert_eq!(v["utilization"].as_f64().unwrap(), 1.0);
    assert_eq!(v["chunk_bytes"].as_u64().unwrap(), stored);
    let generation = v["generation"].as_u64().unwrap();

    // Rewrite half the records: their old bytes stay in the chunks, dead.
    let mut w = Writer::open(&dir, WriterConfig::default()).unwrap();
    for i in (0..100).step_by(2) {
        w.modify(i, "tokens", &data[..512]).unwrap();
    }
    w.commit().unwrap();
    drop(w);
    let v2 = info(&dir);
    assert_eq!(v2["len"], 100);
    assert_eq!(v2["generation"].as_u64().unwrap(), generation + 1);
    let u = v2["utilization"].as_f64().unwrap();
    let live = v2["stored_bytes"].as_u64().unwrap() as f64;
    let held = v2["chunk_bytes"].as_u64().unwrap() as f64;
    assert!(u < 1.0, "{u}");
    assert!((u - live / held).abs() < 1e-9);

    // The text form names the same figures.
    let text = zrecord_ok(&["info", dir.to_str().unwrap()]).stdout_str();
    for want in [
        "records     100",
        "tokens",
        "u16",
        "deflate",
        "compression",
        "utilization",
    ] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }
}
