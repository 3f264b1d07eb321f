//! A whole-table scan ([`Snapshot::scan`]) yields, for every record in index order, exactly the
//! checked entry a per-record lookup gives — through patches, swap-removes, compaction and a
//! superseded table file — and reports a damaged entry without stopping.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use zrecord::diagnostics::SCAN_BLOCK_BYTES;
use zrecord::{Codec, DType, Dataset, Field, Schema, Snapshot, Writer, WriterConfig};

fn schema() -> Schema {
    Schema::new()
        .field(Field::new("a", DType::U8))
        .field(Field::new("b", DType::U8).codec(Codec::Deflate))
}

fn value(i: u64, salt: u64) -> Vec<u8> {
    let n = ((i * 7 + salt) % 97) as usize;
    (0..n)
        .map(|k| ((k as u64 * 13 + i + salt) % 5) as u8)
        .collect()
}

/// Scan and lookups agree on every field and record.
fn agree(snap: &Snapshot) {
    for f in 0..2 {
        let scanned: Vec<_> = snap.scan(f).unwrap().map(Result::unwrap).collect();
        assert_eq!(scanned.len() as u64, snap.len());
        for (i, e) in (0u64..).zip(&scanned) {
            let loc = snap.locate(f, i).unwrap();
            assert_eq!(
                u64::from(e.logical_len),
                snap.record_len(f, i).unwrap(),
                "field {f} record {i}"
            );
            assert_eq!(e.physical_len, loc.stored_len);
            assert_eq!(e.offset, loc.offset);
            assert_eq!(e.data_crc, loc.crc32c);
            assert_eq!(e.codec.compressed(), loc.codec != zrecord::Codec::Raw);
            assert_eq!(e.codec.dictionary(), loc.dictionary.unwrap_or(0));
        }
    }
}

#[test]
fn a_scan_equals_per_record_lookups() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    // More entries than one scan block, so the scan crosses block boundaries.
    let n = (SCAN_BLOCK_BYTES / 24) as u64 + 1000;
    let mut w = Writer::create(&dir, &schema(), WriterConfig::default()).unwrap();
    let recs: Vec<[Vec<u8>; 2]> = (0..n).map(|i| [value(i, 0), value(i, 1)]).collect();
    w.append_many(&recs).unwrap();
    w.commit().unwrap();
    agree(&Dataset::open(&dir).unwrap().snapshot());

    // Patched entries and a shorter dataset (swap-removes leave the table longer than len).
    for i in [3u64, 500, n - 2] {
        w.modify(i, "a", &value(i, 9)).unwrap();
    }
    w.delete(10).unwrap();
    w.delete(n - 100).unwrap();
    w.commit().unwrap();
    let old = Dataset::open(&dir).unwrap().snapshot();
    agree(&old);

    // A compaction writes a new table generation; the old snapshot still scans (from its own
    // mapping if the old table file is gone).
    w.force_compaction_at_next_commit();
    w.modify(0, "b", b"x").unwrap();
    w.commit().unwrap();
    drop(w);
    agree(&old);
    agree(&Dataset::open(&dir).unwrap().snapshot());
}

#[test]
fn a_damaged_entry_is_an_error_item_and_the_scan_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let mut w = Writer::create(&dir, &schema(), WriterConfig::default()).unwrap();
    for i in 0..50u64 {
        w.append(&[value(i, 0), value(i, 1)]).unwrap();
    }
    w.commit().unwrap();
    drop(w);
    let table = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let n = p.file_name().unwrap().to_string_lossy().into_owned();
            n.starts_with("a.") && n.ends_with(".offsets")
        })
        .unwrap();
    let mut bytes = std::fs::read(&table).unwrap();
    bytes[17 * 24 + 5] ^= 0x40;
    std::fs::write(&table, bytes).unwrap();
    let snap = Dataset::open(&dir).unwrap().snapshot();
    let items: Vec<_> = snap.scan(0).unwrap().collect();
    assert_eq!(items.len(), 50);
    for (i, item) in items.iter().enumerate() {
        match item {
            Err(zrecord::Error::OffsetCorrupt { index, .. }) if i == 17 => assert_eq!(*index, 17),
            Ok(_) if i != 17 => {}
            other => panic!("record {i}: {other:?}"),
        }
    }
    assert!(snap.scan(1).unwrap().all(|e| e.is_ok()));
    assert!(snap.scan(2).is_err());
}
