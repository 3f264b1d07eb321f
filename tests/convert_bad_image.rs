//! A file that is not a readable image, in a class folder or as a shard's image member, stops
//! the conversion with `NotAnImage` naming the file (and the tar member), after committing
//! what came before it, so fixing the file and rerunning resumes; with `skip_bad` it is
//! skipped and counted instead.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/convert.rs"]
mod convert;
#[path = "support/images.rs"]
mod images;

use zrecord::convert::{ImagesConvert, WebDatasetConvert};
use zrecord::{Dataset, Error};

#[test]
fn a_bad_image_file_is_named_and_a_rerun_after_the_fix_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("train");
    let expected = convert::class_folders(&root, &["a", "b"], 40);
    let bad = root.join("b/img013.png");
    let good = std::fs::read(&bad).unwrap();
    std::fs::write(&bad, b"GIF89a, not what zrecord reads").unwrap();
    let out = tmp.path().join("out.zr");
    let conv = || ImagesConvert::new(&root, &out).commit_every(8);
    match conv().run().unwrap_err() {
        Error::NotAnImage {
            path,
            member: None,
            reason,
        } => {
            assert_eq!(path, bad);
            assert!(reason.contains("not a JPEG, PNG or WebP"), "{reason}");
        }
        e => panic!("{e}"),
    }
    assert!(!out.exists());
    // Skipping: one record fewer.
    let skipped = tmp.path().join("skipped.zr");
    let report = ImagesConvert::new(&root, &skipped)
        .skip_bad(true)
        .run()
        .unwrap();
    assert_eq!((report.rows, report.skipped), (79, 1));
    // A truncated JPEG header is caught too.
    let cut = root.join("a/img002.jpg");
    let whole = std::fs::read(&cut).unwrap();
    std::fs::write(&cut, &whole[..10]).unwrap();
    let e = ImagesConvert::new(&root, tmp.path().join("x.zr"))
        .run()
        .unwrap_err();
    assert!(
        matches!(&e, Error::NotAnImage { path, .. } if *path == cut),
        "{e}"
    );
    std::fs::write(&cut, whole).unwrap();

    std::fs::write(&bad, good).unwrap();
    let report = conv().run().unwrap();
    // Images 40..53 of class b come before the bad one; blocks are committed before it.
    assert!(report.resumed > 0, "{report:?}");
    let got = convert::records(&out);
    assert_eq!(got.len(), 80);
    for (rec, (bytes, _)) in got.iter().zip(&expected) {
        assert_eq!(&rec[0], bytes);
    }
    assert_eq!(Dataset::open(&out).unwrap().attributes().len(), 1);
}

#[test]
fn a_bad_image_member_names_shard_and_member() {
    let tmp = tempfile::tempdir().unwrap();
    let shard = tmp.path().join("s.tar");
    let mut members = Vec::new();
    for i in 0..5u64 {
        let img = if i == 3 {
            b"\x89PNG\r\n\x1a\n but broken".to_vec()
        } else {
            images::jpeg(6, 6, i)
        };
        members.push((format!("{i:03}.jpg"), img));
        members.push((format!("{i:03}.txt"), b"x".to_vec()));
    }
    convert::shard(&shard, &members);
    let out = tmp.path().join("out.zr");
    match WebDatasetConvert::new([&shard], &out).run().unwrap_err() {
        Error::NotAnImage {
            path,
            member: Some(member),
            ..
        } => {
            assert_eq!(path, shard);
            assert_eq!(member, "003.jpg");
        }
        e => panic!("{e}"),
    }
    let out = tmp.path().join("skip.zr");
    let r = WebDatasetConvert::new([&shard], &out)
        .skip_bad(true)
        .run()
        .unwrap();
    assert_eq!((r.rows, r.skipped), (4, 1));
    // Not a tar at all.
    let junk = tmp.path().join("junk.tar");
    std::fs::write(&junk, vec![7u8; 1500]).unwrap();
    let e = WebDatasetConvert::new([&junk], tmp.path().join("j.zr"))
        .run()
        .unwrap_err();
    assert!(
        matches!(&e, Error::BadShard { path, .. } if *path == junk),
        "{e}"
    );
}
