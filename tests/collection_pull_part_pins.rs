//! A pull of a collection takes a part only if the commit found under `parts/<id>` on the
//! store is the one the manifest pins (its generation, its length, the collection's fields):
//! another dataset pushed there since (same generation, other records) fails the pull with a
//! typed error, as it fails a reader, and no local manifest names it. Against s3s-fs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/s3.rs"]
mod s3;

use std::path::Path;

use zrecord::collection::{commit, CommitOptions};
use zrecord::remote::{pull, push, TransferOptions};
use zrecord::{DType, Dataset, Error, Field, Schema, Writer, WriterConfig};

fn make(dir: &Path, dtype: DType, seed: u8, n: u32) {
    let schema = Schema::new().field(Field::new("x", dtype));
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    for i in 0..n {
        w.append(&[vec![seed.wrapping_add(i as u8); 4 + (i as usize % 3) * 4]])
            .unwrap();
    }
    w.commit().unwrap();
}

#[test]
fn a_part_replaced_on_the_store_is_not_pulled_into_a_manifest() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let t = TransferOptions::default().store(server.options());

    // A collection of a (40 records) and b, pushed.
    let root = tmp.path().join("coll");
    make(&tmp.path().join("src/a"), DType::U8, 1, 40);
    make(&tmp.path().join("src/b"), DType::U8, 2, 40);
    commit(
        &root,
        &[tmp.path().join("src/a"), tmp.path().join("src/b")],
        CommitOptions::default(),
    )
    .unwrap();

    for (case, (dtype, n)) in [(DType::U8, 30u32), (DType::U32, 40)]
        .into_iter()
        .enumerate()
    {
        let url = server.url(&format!("replaced/{case}"));
        push(&root, &url, &t).unwrap();
        // Another dataset (generation 1 too: 30 records, or the same count of another
        // field type) pushed over part a.
        let other = tmp.path().join(format!("other-{case}"));
        make(&other, dtype, 9, n);
        push(&other, &format!("{url}/parts/a"), &t).unwrap();

        let back = tmp.path().join(format!("back-{case}"));
        match pull(&url, &back, &t) {
            Err(Error::RemoteCorrupt { object, reason }) => {
                assert!(object.contains("parts/a"), "{object}: {reason}");
            }
            Err(Error::PartMismatch { part, .. }) => assert_eq!(part, "a"),
            other => panic!("case {case}: part a is not the manifest's: {other:?}"),
        }
        assert!(
            Dataset::open(&back).is_err(),
            "case {case}: no local manifest names the replaced part"
        );
    }
}
