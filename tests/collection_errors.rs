//! Committing or opening a bad collection is a typed error naming what is wrong, and never
//! loses what was committed: a part with another schema (`PartMismatch`, naming the part and
//! the field), a part that is not a dataset (`NotADataset`), a damaged manifest (`MetaCorrupt`
//! naming the file), a manifest of an unknown version (`UnsupportedVersion`), a part written
//! after it was committed (`PartChanged`, naming the part and both generations), a root that is
//! a dataset.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use zrecord::collection::commit;
use zrecord::{DType, Dataset, Error, Field, Schema, Writer, WriterConfig};

fn part(dir: &Path, name: &str, schema: &Schema, n: u8) -> PathBuf {
    let path = dir.join(name);
    let mut w = Writer::create(&path, schema, WriterConfig::default()).unwrap();
    for i in 0..n {
        let rec: Vec<Vec<u8>> = schema.fields.iter().map(|_| vec![i; 4]).collect();
        w.append(&rec).unwrap();
    }
    w.commit().unwrap();
    path
}

fn schema() -> Schema {
    Schema::new()
        .field(Field::new("x", DType::U8))
        .field(Field::new("y", DType::F32))
}

/// The collection at `root` opens with `len` records at manifest `number`.
fn intact(root: &Path, number: u64, len: u64) {
    let ds = Dataset::open(root).unwrap();
    assert_eq!((ds.generation(), ds.len()), (number, len));
    for i in 0..len {
        ds.get(i).unwrap();
    }
}

#[test]
fn bad_parts_are_refused_and_nothing_committed_is_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("c");
    let good = part(tmp.path(), "good", &schema(), 3);
    commit(&root, &[good], Default::default()).unwrap();

    // Another dtype of field "y".
    let other = Schema::new()
        .field(Field::new("x", DType::U8))
        .field(Field::new("y", DType::I32));
    let bad = part(tmp.path(), "bad", &other, 2);
    let ok = part(tmp.path(), "ok", &schema(), 2);
    let e = commit(&root, &[ok.clone(), bad.clone()], Default::default()).unwrap_err();
    match &e {
        Error::PartMismatch { field, path, .. } => {
            assert_eq!(field, "y");
            assert_eq!(path, &bad);
        }
        e => panic!("expected PartMismatch, got {e}"),
    }
    assert!(e.to_string().contains("dtype"), "{e}");
    // Nothing moved, nothing committed.
    assert!(bad.is_dir() && ok.is_dir());
    intact(&root, 1, 3);

    // A field missing.
    let fewer = part(
        tmp.path(),
        "fewer",
        &Schema::new().field(Field::new("x", DType::U8)),
        1,
    );
    let e = commit(&root, &[fewer], Default::default()).unwrap_err();
    assert!(
        matches!(&e, Error::PartMismatch { field, .. } if field == "y"),
        "{e}"
    );

    // Not a dataset.
    let junk = tmp.path().join("junk");
    std::fs::create_dir(&junk).unwrap();
    let e = commit(&root, std::slice::from_ref(&junk), Default::default()).unwrap_err();
    assert!(
        matches!(&e, Error::NotADataset { path, .. } if path == &junk),
        "{e}"
    );
    let e = commit(&root, &[tmp.path().join("nowhere")], Default::default()).unwrap_err();
    assert!(matches!(e, Error::NotADataset { .. }), "{e}");
    intact(&root, 1, 3);

    // A root that is a dataset.
    let e = commit(&ok, &[tmp.path().join("good")], Default::default()).unwrap_err();
    assert!(matches!(e, Error::InvalidConfig { .. }), "{e}");

    // The good part still commits.
    let r = commit(&root, &[ok], Default::default()).unwrap();
    assert_eq!((r.number, r.len), (2, 5));
    intact(&root, 2, 5);
}

#[test]
fn a_damaged_manifest_is_named_and_an_unknown_version_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("c");
    commit(
        &root,
        &[part(tmp.path(), "a", &schema(), 3)],
        Default::default(),
    )
    .unwrap();
    let file = root.join("_collection/00000000000000000001.json");
    let bytes = std::fs::read(&file).unwrap();
    // Every byte flipped in turn (but the trailing newline): a typed error naming the file.
    for at in (0..bytes.len() - 1).step_by(7) {
        let mut b = bytes.clone();
        b[at] ^= 0x20;
        std::fs::write(&file, &b).unwrap();
        match Dataset::open(&root) {
            Err(Error::MetaCorrupt { path, .. }) => assert_eq!(path, file),
            Err(e) => panic!("byte {at}: expected MetaCorrupt, got {e}"),
            Ok(_) => panic!("byte {at}: a damaged manifest opened"),
        }
        // A commit on top of it refuses too: it never builds on what it cannot read.
        let e = commit(&root, &[tmp.path().join("none")], Default::default()).unwrap_err();
        assert!(
            matches!(e, Error::MetaCorrupt { .. } | Error::NotADataset { .. }),
            "{e}"
        );
    }
    // A manifest of a version this build does not know.
    let text = String::from_utf8(bytes.clone()).unwrap();
    let body_start = text.find("{\"format\"").unwrap();
    let body_end = text.rfind(",\"crc32c\"").unwrap();
    let body = text[body_start..body_end].replace("\"version\":1", "\"version\":7");
    let crc = crc32c_of(body.as_bytes());
    std::fs::write(
        &file,
        format!("{{\"collection\":{body},\"crc32c\":{crc}}}\n"),
    )
    .unwrap();
    match Dataset::open(&root) {
        Err(Error::UnsupportedVersion { path, found, .. }) => {
            assert_eq!((path, found), (file.clone(), 7));
        }
        Err(e) => panic!("expected UnsupportedVersion, got {e}"),
        Ok(_) => panic!("version 7 opened"),
    }
    std::fs::write(&file, &bytes).unwrap();
    intact(&root, 1, 3);
}

/// CRC32C (Castagnoli), bit by bit: the manifest's checksum.
fn crc32c_of(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn a_part_written_after_its_commit_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("c");
    let a = part(tmp.path(), "a", &schema(), 3);
    commit(&root, &[a], Default::default()).unwrap();
    let inside = root.join("parts/a");
    // A writer on the committed part is refused (tests/collection_part_immutable.rs); one
    // changed all the same (by a build without that check, or moved out and back by hand) is
    // refused by every reader.
    assert!(matches!(
        Writer::open(&inside, WriterConfig::default()),
        Err(Error::PartCommitted { .. })
    ));
    let out = tmp.path().join("a-out");
    std::fs::rename(&inside, &out).unwrap();
    let mut w = Writer::open(&out, WriterConfig::default()).unwrap();
    w.append(&[vec![9u8], vec![0u8; 4]]).unwrap();
    w.commit().unwrap();
    drop(w);
    std::fs::rename(&out, &inside).unwrap();
    match Dataset::open(&root) {
        Err(e @ Error::PartChanged { .. }) => {
            let Error::PartChanged {
                part,
                expected,
                found,
                ..
            } = &e
            else {
                unreachable!()
            };
            assert_eq!(part, "a");
            assert_eq!((*expected, *found), (1, 2));
            assert!(e.to_string().contains("\"a\""), "{e}");
        }
        Err(e) => panic!("expected PartChanged, got {e}"),
        Ok(_) => panic!("a changed part opened"),
    }
    // Committing the changed part again is refused the same way, and adds nothing.
    let e = commit(&root, &[&inside], Default::default()).unwrap_err();
    assert!(matches!(e, Error::PartChanged { .. }), "{e}");
    let manifests = std::fs::read_dir(root.join("_collection"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".json")
        })
        .count();
    assert_eq!(manifests, 1);
}
