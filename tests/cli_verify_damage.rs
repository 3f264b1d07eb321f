//! A damaged dataset makes `zrecord verify` exit non-zero, listing every problem with its file,
//! record, field and byte offset; an intact one passes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod cli_support;

use cli_support::zrecord;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use zrecord::{Codec, DType, Dataset, Field, Schema, Writer, WriterConfig};

const N: u64 = 200;

fn build(dir: &Path) {
    let schema = Schema::new()
        .field(Field::new("a", DType::U8))
        .field(Field::new("b", DType::U8).codec(Codec::Deflate))
        .chunk_size_bytes(4096);
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    for i in 0..N {
        let a: Vec<u8> = (0..64).map(|j| (i * 7 + j) as u8).collect();
        let b = format!("record {i} ").repeat(8).into_bytes();
        w.append(&[a, b]).unwrap();
    }
    w.commit().unwrap();
}

fn flip(path: &Path, at: u64) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    b[0] ^= 0x40;
    f.write_all_at(&b, at).unwrap();
}

fn file_name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

#[test]
fn an_intact_dataset_verifies() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    build(&dir);
    let r = zrecord(&["verify", dir.to_str().unwrap()]);
    assert!(r.ok, "{}", r.stderr);
}

#[test]
fn flipped_bytes_in_chunks_are_each_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    build(&dir);
    let snap = Dataset::open(&dir).unwrap().snapshot();
    let mut damaged: Vec<(u64, &str, PathBuf, u64)> = Vec::new();
    for (i, field) in [(17u64, 0usize), (150, 0), (99, 1)] {
        let loc = snap.locate(field, i).unwrap();
        let chunk = loc.chunk.clone().unwrap();
        flip(&chunk, loc.offset + 3);
        damaged.push((i, ["a", "b"][field], chunk, loc.offset));
    }
    drop(snap);
    let r = zrecord(&["verify", dir.to_str().unwrap()]);
    assert!(!r.ok);
    assert_eq!(r.code, Some(1));
    for (i, field, chunk, offset) in &damaged {
        let line = r
            .stderr
            .lines()
            .find(|l| l.contains(&format!("record {i})")))
            .unwrap_or_else(|| panic!("record {i} not reported:\n{}", r.stderr));
        assert!(line.contains(&file_name(chunk)), "{line}");
        assert!(line.contains(&format!("field {field:?}")), "{line}");
        assert!(line.contains(&format!("at byte {offset}")), "{line}");
    }
    // Three problems and a summary line.
    assert_eq!(r.stderr.lines().count(), 4, "{}", r.stderr);
    assert!(
        r.stderr.lines().last().unwrap().contains("3 problem"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_flipped_byte_in_an_offset_table_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    build(&dir);
    let table = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let n = file_name(p);
            n.starts_with("b.") && n.ends_with(".offsets")
        })
        .unwrap();
    // Entry 33 (24 bytes each): a byte of its chunk offset.
    flip(&table, 33 * 24 + 3);
    let r = zrecord(&["verify", dir.to_str().unwrap()]);
    assert!(!r.ok);
    let line = r
        .stderr
        .lines()
        .find(|l| l.contains("record 33"))
        .unwrap_or_else(|| panic!("not reported:\n{}", r.stderr));
    assert!(line.contains(&file_name(&table)), "{line}");
    assert!(line.contains(&format!("at byte {}", 33 * 24)), "{line}");
}

#[test]
fn a_missing_chunk_file_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    build(&dir);
    // The second chunk file, whichever ids the append tasks took.
    let mut names: Vec<String> = std::fs::read_dir(dir.join("chunk"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.len() > 1, "{names:?}");
    let name = &names[1];
    std::fs::remove_file(dir.join("chunk").join(name)).unwrap();
    let r = zrecord(&["verify", dir.to_str().unwrap()]);
    assert!(!r.ok);
    assert!(r.stderr.contains(name.as_str()), "{}", r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
}
