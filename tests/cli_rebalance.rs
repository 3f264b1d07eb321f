//! `zrecord rebalance` rewrites the live records into fresh chunks: utilization goes back to 1.0,
//! every value reads back the same, `verify` stays clean, and a dataset held by another writer is
//! refused with one clear line.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod cli_support;

use cli_support::{write_npy, zrecord, zrecord_ok};
use serde_json::Value;
use zrecord::{Dataset, Writer, WriterConfig};

fn json(args: &[&str]) -> Value {
    serde_json::from_slice(&zrecord_ok(args).stdout).unwrap()
}

#[test]
fn rebalance_restores_utilization_and_keeps_every_value() {
    let tmp = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..200u32 * 64).flat_map(|k| k.to_le_bytes()).collect();
    let input = tmp.path().join("x.npy");
    write_npy(&input, 1, "<u4", false, &[200, 64], &data);
    let dir = tmp.path().join("ds");
    let d = dir.to_str().unwrap();
    zrecord_ok(&["convert", input.to_str().unwrap(), "--out", d]);

    // Rewrite some records and delete others: dead bytes stay in the chunks.
    let mut w = Writer::open(&dir, WriterConfig::default()).unwrap();
    for i in (0..150).step_by(3) {
        w.modify(i, "x", &data[..256]).unwrap();
    }
    for _ in 0..20 {
        w.delete(0).unwrap();
    }
    w.commit().unwrap();
    drop(w);
    let before: Vec<Vec<u8>> = {
        let ds = Dataset::open(&dir).unwrap();
        (0..ds.len())
            .map(|i| ds.get(i).unwrap()[0].to_vec())
            .collect()
    };
    assert!(
        json(&["info", d, "--json"])["utilization"]
            .as_f64()
            .unwrap()
            < 1.0
    );

    let r = json(&["rebalance", d, "--json"]);
    assert!(r["utilization_before"].as_f64().unwrap() < 1.0, "{r}");
    assert_eq!(r["utilization_after"].as_f64().unwrap(), 1.0, "{r}");
    assert_eq!(r["records"], 180);
    let info = json(&["info", d, "--json"]);
    assert_eq!(info["utilization"].as_f64().unwrap(), 1.0);
    assert_eq!(info["len"], 180);

    let ds = Dataset::open(&dir).unwrap();
    for (i, want) in before.iter().enumerate() {
        assert_eq!(&ds.get(i as u64).unwrap()[0][..], &want[..], "record {i}");
    }
    zrecord_ok(&["verify", d]);

    // The text form, and a second writer's refusal.
    let text = zrecord_ok(&["rebalance", d]).stdout_str();
    assert!(text.contains("utilization"), "{text}");
    let held = Writer::open(&dir, WriterConfig::default()).unwrap();
    let out = zrecord(&["rebalance", d]);
    assert!(!out.ok);
    let err = &out.stderr;
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("writer.lock"), "{err}");
    drop(held);
}
