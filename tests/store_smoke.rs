//! Committed records survive reopen byte-exact; uncommitted work vanishes on reopen.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use zrecord::{Codec, DType, Dataset, Field, Schema, Writer, WriterConfig};

fn schema() -> Schema {
    Schema::new()
        .field(Field::new("image", DType::U8).codec(Codec::Deflate))
        .field(Field::new("label", DType::I64).shape(vec![]))
        .chunk_size_bytes(10_000)
}

fn record(i: u64) -> Vec<Vec<u8>> {
    let image: Vec<u8> = (0..(i * 37 % 3000))
        .map(|j| (j % 13) as u8 ^ (i as u8))
        .collect();
    vec![image, (i as i64 * 3).to_le_bytes().to_vec()]
}

#[test]
fn committed_work_survives_reopen_and_uncommitted_work_vanishes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let mut w = Writer::create(&dir, &schema(), WriterConfig::default()).unwrap();
    for i in 0..200 {
        assert_eq!(w.append(&record(i)).unwrap(), i);
    }
    w.commit().unwrap();
    // Uncommitted: more appends, a modify and a delete.
    for i in 200..250 {
        w.append(&record(i)).unwrap();
    }
    w.modify(5, "image", b"changed").unwrap();
    w.delete(0).unwrap();
    drop(w);

    let ds = Dataset::open(&dir).unwrap();
    assert_eq!(ds.len(), 200);
    for i in 0..200 {
        let got = ds.get(i).unwrap();
        let want = record(i);
        assert_eq!(&got[0][..], &want[0][..], "record {i}");
        assert_eq!(&got[1][..], &want[1][..], "record {i}");
    }
    let b = ds.gather_blocking(&[199, 3, 3, 0]).unwrap();
    assert_eq!(b.get(0, 0).unwrap(), &record(199)[0][..]);
    assert_eq!(b.typed::<i64>(1, 1).unwrap(), &[9]);

    // Now commit a modify and a delete and check them after reopen.
    let mut w = ds.writer().unwrap();
    assert!(matches!(
        ds.writer(),
        Err(zrecord::Error::WriterBusy { .. })
    ));
    w.modify(5, "image", b"changed").unwrap();
    w.delete(0).unwrap();
    w.commit().unwrap();
    drop(w);
    assert!(ds.refresh().unwrap());
    assert_eq!(ds.len(), 199);
    assert_eq!(&ds.get_field(5, "image").unwrap()[..], b"changed");
    assert_eq!(&ds.get(0).unwrap()[0][..], &record(199)[0][..]);
}
