//! `WebDatasetConvert` stores each sample of a list of tar shards (members grouped by the key
//! before the first dot of their file name) as one record with a field per extension: bytes as
//! they were in the tar, `cls` as an `i64` when every one is an integer, absent where a sample
//! lacks the extension; shards in the order given, members in tar order.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/convert.rs"]
mod convert;
#[path = "support/images.rs"]
mod images;

use zrecord::convert::WebDatasetConvert;
use zrecord::{DType, Dataset};

/// Samples `first..first + n`: a JPEG, a label, a caption, and every third a `seg.png`.
fn members(first: u64, n: u64) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for i in first..first + n {
        let key = format!("part/{i:06}");
        out.push((format!("{key}.jpg"), images::jpeg(10, 8, i)));
        out.push((format!("{key}.cls"), format!(" {}\n", i % 4).into_bytes()));
        out.push((format!("{key}.txt"), format!("caption {i}").into_bytes()));
        if i % 3 == 0 {
            let p = images::pixels(4, 4, i);
            out.push((format!("{key}.seg.png"), images::png(&p, 4, 4, 3)));
        }
    }
    out
}

#[test]
fn shards_round_trip_sample_by_sample() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("shard-000.tar");
    let b = tmp.path().join("shard-001.tar");
    let ma = members(0, 10);
    let mb = members(10, 7);
    convert::shard(&a, &ma);
    convert::shard(&b, &mb);
    let out = tmp.path().join("wds.zr");
    let report = WebDatasetConvert::new([&a, &b], &out)
        .commit_every(4)
        .run()
        .unwrap();
    assert_eq!((report.rows, report.fields), (17, 4));

    let ds = Dataset::open(&out).unwrap();
    let names: Vec<String> = ds.schema().fields.iter().map(|f| f.name.clone()).collect();
    assert_eq!(names, ["cls", "jpg", "seg_png", "txt"]);
    assert_eq!(ds.schema().fields[0].dtype, DType::I64);
    assert_eq!(ds.schema().fields[1].dtype, DType::Bytes);
    assert!(ds.attributes().is_empty());
    let got = convert::records(&out);
    let all: Vec<_> = ma.iter().chain(&mb).collect();
    for (i, rec) in got.iter().enumerate() {
        let find = |ext: &str| {
            all.iter()
                .find(|(n, _)| *n == format!("part/{i:06}.{ext}"))
                .map(|(_, b)| b.clone())
                .unwrap_or_default()
        };
        assert_eq!(rec[0], (i as i64 % 4).to_le_bytes(), "cls of {i}");
        assert_eq!(rec[1], find("jpg"), "jpg of {i}");
        assert_eq!(rec[2], find("seg.png"), "seg.png of {i}");
        assert_eq!(rec[2].is_empty(), i % 3 != 0);
        assert_eq!(rec[3], find("txt"), "txt of {i}");
    }
}

#[test]
fn a_cls_that_is_not_an_integer_keeps_its_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a.tar");
    let mut m = members(0, 3);
    m.push(("part/000009.cls".to_string(), b"dog".to_vec()));
    convert::shard(&a, &m);
    let out = tmp.path().join("wds.zr");
    WebDatasetConvert::new([&a], &out).run().unwrap();
    let ds = Dataset::open(&out).unwrap();
    assert_eq!(ds.schema().fields[0].dtype, DType::Bytes);
    let got = convert::records(&out);
    assert_eq!(got.len(), 4);
    assert_eq!(got[1][0], b" 1\n");
    assert_eq!(got[3][0], b"dog");
}
