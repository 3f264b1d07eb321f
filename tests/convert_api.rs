//! `zrecord::convert::NpyConvert` converts without the CLI: the dataset holds every row, the
//! progress callback counts up to the totals, and a failed conversion leaves nothing at the
//! output.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod cli_support;

use cli_support::{listing, write_f32};
use zrecord::convert::NpyConvert;
use zrecord::{Codec, Dataset, Error};

#[test]
fn a_conversion_reports_progress_and_writes_every_row() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a.npy"), tmp.path().join("b.npy"));
    write_f32(&a, 1000, 3);
    write_f32(&b, 1000, 1);
    let out = tmp.path().join("nested").join("out.zr");
    let mut seen = Vec::new();
    let report = NpyConvert::new([&a, &b], &out)
        .field_names(["x", "y"])
        .codec(Codec::Deflate)
        .block_bytes(1000)
        .num_writers(3)
        .on_progress(|p| seen.push(p))
        .run()
        .unwrap();
    assert_eq!(
        (report.rows, report.fields, report.bytes),
        (1000, 2, 16_000)
    );
    assert_eq!(report.out, out);
    assert!(seen.len() > 1, "one block only: {seen:?}");
    assert!(seen.windows(2).all(|w| w[0].rows_done < w[1].rows_done));
    let last = seen.last().unwrap();
    assert_eq!((last.rows_done, last.rows_total), (1000, 1000));
    assert_eq!((last.bytes_done, last.bytes_total), (16_000, 16_000));
    let ds = Dataset::open(&out).unwrap();
    let batch = ds.gather_blocking(&[999, 0]).unwrap();
    assert_eq!(
        batch.typed::<f32>(0, 0).unwrap(),
        &[999_000.0, 999_001.0, 999_002.0]
    );
    assert_eq!(batch.typed::<f32>(1, 1).unwrap(), &[0.0]);
}

#[test]
fn a_failed_conversion_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a.npy"), tmp.path().join("b.npy"));
    write_f32(&a, 10, 3);
    write_f32(&b, 11, 3);
    let out = tmp.path().join("out.zr");
    let err = NpyConvert::new([&a, &b], &out).run().unwrap_err();
    assert!(
        matches!(
            err,
            Error::RowCountMismatch {
                rows: 11,
                expected: 10,
                ..
            }
        ),
        "{err}"
    );
    let err = NpyConvert::new([&a], &out)
        .field_names(["x", "y"])
        .run()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
    let none: [&std::path::Path; 0] = [];
    assert!(NpyConvert::new(none, &out).run().is_err());
    assert_eq!(listing(tmp.path()), ["a.npy", "b.npy"]);
}
