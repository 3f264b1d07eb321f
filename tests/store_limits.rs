//! Every format limit and schema rule is a typed error raised before any byte is written: the
//! dataset's files are unchanged and the writer goes on working.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod support;

use std::path::Path;
use support::tree;
use zrecord::{DType, Dataset, Error, Field, Schema, Writer, WriterConfig};

fn writer(dir: &Path, chunk: u64) -> Writer {
    let schema = Schema::new()
        .field(Field::new("x", DType::F32).shape(vec![2, 2]))
        .field(Field::new("v", DType::I32))
        .chunk_size_bytes(chunk);
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    w.append(&[vec![0u8; 16], vec![1u8; 8]]).unwrap();
    w.commit().unwrap();
    w
}

/// Runs `bad` against a fresh dataset, checks it fails as `expect` says and changes no file,
/// then checks the writer still appends and commits.
fn refused(bad: impl FnOnce(&mut Writer) -> Result<(), Error>, expect: impl Fn(&Error) -> bool) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let mut w = writer(&dir, 1 << 20);
    let before = tree(&dir);
    let err = bad(&mut w).unwrap_err();
    assert!(expect(&err), "unexpected error: {err}");
    assert_eq!(tree(&dir), before, "a refused operation changed files");
    assert_eq!(w.len(), 1);
    w.append(&[vec![2u8; 16], vec![]]).unwrap();
    w.commit().unwrap();
    let ds = Dataset::open(&dir).unwrap();
    assert_eq!(ds.len(), 2);
    assert_eq!(&ds.get(1).unwrap()[0][..], &[2u8; 16][..]);
}

#[test]
fn a_record_of_16_mib_is_too_large() {
    refused(
        |w| w.append(&[vec![], vec![0u8; 1 << 24]]).map(drop),
        |e| matches!(e, Error::RecordTooLarge { field, len, max } if field == "v" && *len == 1 << 24 && *max == (1 << 24) - 1),
    );
    // The largest record is fine.
    let tmp = tempfile::tempdir().unwrap();
    let mut w = writer(&tmp.path().join("ds"), 1 << 20);
    w.append(&[vec![], vec![7u8; (1 << 24) - 4]]).unwrap();
    w.commit().unwrap();
}

#[test]
fn wrong_dtype_size_or_shape_is_refused() {
    refused(
        |w| w.append(&[vec![0u8; 16], vec![0u8; 3]]).map(drop),
        |e| matches!(e, Error::ShapeMismatch { field, .. } if field == "v"),
    );
    refused(
        |w| w.append(&[vec![0u8; 12], vec![]]).map(drop),
        |e| matches!(e, Error::ShapeMismatch { field, .. } if field == "x"),
    );
    refused(
        |w| w.modify(0, "x", &[0u8; 20]),
        |e| matches!(e, Error::ShapeMismatch { .. }),
    );
}

#[test]
fn unknown_field_wrong_field_count_and_bad_index_are_refused() {
    refused(
        |w| w.modify(0, "nope", b""),
        |e| matches!(e, Error::UnknownField { field } if field == "nope"),
    );
    refused(
        |w| w.append(&[vec![0u8; 16]]).map(drop),
        |e| {
            matches!(
                e,
                Error::FieldCount {
                    expected: 2,
                    actual: 1
                }
            )
        },
    );
    refused(
        |w| w.delete(1),
        |e| matches!(e, Error::IndexOutOfRange { index: 1, len: 1 }),
    );
    refused(
        |w| w.modify_record(5, &[vec![0u8; 16], vec![]]),
        |e| matches!(e, Error::IndexOutOfRange { index: 5, len: 1 }),
    );
}

#[test]
fn chunk_size_beyond_the_u40_offset_is_refused_before_creating_anything() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let schema = Schema::new()
        .field(Field::new("x", DType::U8))
        .chunk_size_bytes((1 << 40) + 1);
    let e = Writer::create(&dir, &schema, WriterConfig::default()).unwrap_err();
    assert!(matches!(e, Error::InvalidConfig { .. }), "{e}");
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "nothing may be created"
    );
    // 2^40 itself is the largest allowed chunk.
    let schema = schema.chunk_size_bytes(1 << 40);
    Writer::create(&dir, &schema, WriterConfig::default()).unwrap();
}

#[test]
fn invalid_schemas_are_refused_before_creating_anything() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    for schema in [
        Schema::new(),
        Schema::new().field(Field::new("a/b", DType::U8)),
        Schema::new()
            .field(Field::new("a", DType::U8))
            .field(Field::new("a", DType::U8)),
    ] {
        let e = Writer::create(&dir, &schema, WriterConfig::default()).unwrap_err();
        assert!(matches!(e, Error::InvalidSchema { .. }), "{e}");
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    }
    // A non-empty target is refused without touching it.
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("keep"), b"mine").unwrap();
    let e = Writer::create(
        &dir,
        &Schema::new().field(Field::new("a", DType::U8)),
        WriterConfig::default(),
    )
    .unwrap_err();
    assert!(matches!(e, Error::AlreadyExists { .. }), "{e}");
    assert_eq!(std::fs::read(dir.join("keep")).unwrap(), b"mine");
}

#[test]
fn unknown_format_version_is_refused_by_readers_and_the_writer() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    drop(writer(&dir, 1 << 20));
    // Rewrite meta.json as a well-formed envelope of version 4, newer than this build's.
    let text = std::fs::read_to_string(dir.join("meta.json")).unwrap();
    let body_start = text.find("{\"format\"").unwrap();
    let body_end = text.rfind(",\"crc32c\"").unwrap();
    let body = text[body_start..body_end].replace("\"version\":1", "\"version\":4");
    let crc = zrecord::diagnostics::crc32c(body.as_bytes());
    std::fs::write(
        dir.join("meta.json"),
        format!("{{\"meta\":{body},\"crc32c\":{crc}}}\n"),
    )
    .unwrap();
    std::fs::write(dir.join("chunk").join("00009.zr"), b"orphan-looking file").unwrap();
    let before = tree(&dir);
    let e = Dataset::open(&dir).unwrap_err();
    assert!(
        matches!(
            e,
            Error::UnsupportedVersion {
                found: 4,
                supported: 3,
                ..
            }
        ),
        "{e}"
    );
    let e = Writer::open(&dir, WriterConfig::default()).unwrap_err();
    assert!(
        matches!(e, Error::UnsupportedVersion { found: 4, .. }),
        "{e}"
    );
    assert_eq!(
        tree(&dir),
        before,
        "a writer must not clean a dataset it cannot read"
    );
}

#[test]
fn more_than_65535_chunks_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    // One-byte chunks: every one-byte record takes a chunk of its own.
    let schema = Schema::new()
        .field(Field::new("b", DType::U8))
        .chunk_size_bytes(1);
    let mut w = Writer::create(&dir, &schema, WriterConfig::default()).unwrap();
    for i in 0..65_535u32 {
        w.append(&[[i as u8]]).unwrap();
    }
    let before = tree(&dir);
    let e = w.append(&[[1u8]]).unwrap_err();
    assert!(matches!(e, Error::TooManyChunks { max: 65_535 }), "{e}");
    assert_eq!(tree(&dir), before);
    // Absent records take no chunk space and are still accepted.
    w.append(&[[0u8; 0]]).unwrap();
    assert_eq!(w.len(), 65_536);
}
