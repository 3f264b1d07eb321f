//! A dataset's user attributes are committed with the next commit and kept by every later
//! rewrite of `meta.json` (commits of appends, modify, delete, rebalance, reopen); a dataset
//! without them keeps its old format version, and attributes a reader cannot trust (too large,
//! bad keys, in a version that cannot hold them) are `MetaCorrupt`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use serde_json::json;
use std::path::Path;
use zrecord::diagnostics::Meta;
use zrecord::{DType, Dataset, Error, Field, Schema, Writer, WriterConfig, MAX_ATTRIBUTES_BYTES};

fn create(dir: &Path) -> Writer {
    let schema = Schema::new()
        .field(Field::new("a", DType::U8))
        .chunk_size_bytes(16 << 10);
    Writer::create(dir, &schema, WriterConfig::default()).unwrap()
}

fn meta(dir: &Path) -> Meta {
    Meta::decode(&std::fs::read(dir.join("meta.json")).unwrap()).unwrap()
}

#[test]
fn attributes_round_trip_and_survive_every_rewrite() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let mut w = create(&dir);
    for i in 0..200u32 {
        w.append(&[vec![i as u8; 300]]).unwrap();
    }
    w.commit().unwrap();
    assert_eq!(meta(&dir).version, 1);
    let ds = Dataset::open(&dir).unwrap();
    assert!(ds.attributes().is_empty());

    w.set_attribute("classes", json!(["cat", "dog"])).unwrap();
    w.set_attribute("note", json!({"n": 3})).unwrap();
    // Not visible before the commit.
    ds.refresh().unwrap();
    assert!(ds.attributes().is_empty());
    assert_eq!(meta(&dir).version, 1);
    // A commit of nothing but attributes is a commit.
    let g = w.generation();
    assert_eq!(w.commit().unwrap(), g + 1);
    ds.refresh().unwrap();
    assert_eq!(ds.attributes()["classes"], json!(["cat", "dog"]));
    assert_eq!(ds.snapshot().attributes()["note"], json!({"n": 3}));
    assert_eq!(meta(&dir).version, 3);

    // Modify, delete, append, rebalance, reopen: the attributes stay.
    w.modify(3, "a", b"x").unwrap();
    w.delete(5).unwrap();
    w.append(&[b"y"]).unwrap();
    w.commit().unwrap();
    for _ in 0..150 {
        w.delete(0).unwrap();
    }
    w.commit().unwrap();
    let report = w.rebalance().unwrap();
    assert!(report.rewritten);
    drop(w);
    let m = meta(&dir);
    assert_eq!(m.attributes.len(), 2);
    assert_eq!(m.version, 3);
    let mut w = Writer::open(&dir, WriterConfig::default()).unwrap();
    assert_eq!(w.attributes()["classes"], json!(["cat", "dog"]));
    assert_eq!(w.remove_attribute("note").unwrap(), Some(json!({"n": 3})));
    w.commit().unwrap();
    let ds = Dataset::open(&dir).unwrap();
    assert_eq!(ds.attributes().len(), 1);
    // Removing the last attribute returns the dataset to the lowest version that holds it.
    w.remove_attribute("classes").unwrap();
    w.commit().unwrap();
    assert_eq!(meta(&dir).version, 1);
    assert!(!std::fs::read_to_string(dir.join("meta.json"))
        .unwrap()
        .contains("attributes"));
}

#[test]
fn bad_attributes_are_refused_by_the_writer_and_corrupt_to_readers() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let mut w = create(&dir);
    w.set_attribute("ok", json!(1)).unwrap();
    for (key, value) in [
        (String::new(), json!(1)),
        ("k".repeat(257), json!(1)),
        ("big".to_string(), json!("x".repeat(MAX_ATTRIBUTES_BYTES))),
    ] {
        let e = w.set_attribute(key, value).unwrap_err();
        assert!(matches!(e, Error::InvalidConfig { .. }), "{e}");
    }
    // A refused call changes nothing.
    assert_eq!(w.attributes().len(), 1);
    w.commit().unwrap();
    drop(w);

    // Checksummed but lying: an oversized value, an empty key, version 2 with attributes.
    type Lie = Box<dyn Fn(&mut Meta)>;
    let lies: Vec<Lie> = vec![
        Box::new(|m| {
            m.attributes
                .insert("big".into(), json!("x".repeat(MAX_ATTRIBUTES_BYTES)));
        }),
        Box::new(|m| {
            m.attributes.insert(String::new(), json!(0));
        }),
        Box::new(|m| m.version = 2),
    ];
    let good = std::fs::read(dir.join("meta.json")).unwrap();
    for lie in lies {
        let mut m = Meta::decode(&good).unwrap();
        lie(&mut m);
        std::fs::write(dir.join("meta.json"), m.encode()).unwrap();
        let e = Dataset::open(&dir).unwrap_err();
        assert!(matches!(e, Error::MetaCorrupt { .. }), "{e}");
        let e = Writer::open(&dir, WriterConfig::default()).unwrap_err();
        assert!(matches!(e, Error::MetaCorrupt { .. }), "{e}");
    }
    std::fs::write(dir.join("meta.json"), &good).unwrap();
    assert_eq!(Dataset::open(&dir).unwrap().attributes()["ok"], json!(1));
}

/// A collection shows its first part's attributes.
#[test]
fn a_collection_shows_its_first_parts_attributes() {
    let tmp = tempfile::tempdir().unwrap();
    let mut parts = Vec::new();
    for p in 0..2 {
        let path = tmp.path().join(format!("part-{p}"));
        let mut w = create(&path);
        w.append(&[vec![p as u8; 10]]).unwrap();
        w.set_attribute("part", json!(p)).unwrap();
        w.commit().unwrap();
        parts.push(path);
    }
    let root = tmp.path().join("c");
    zrecord::collection::commit(&root, &parts, Default::default()).unwrap();
    let ds = Dataset::open(&root).unwrap();
    assert_eq!(ds.len(), 2);
    assert_eq!(ds.attributes()["part"], json!(0));
}
