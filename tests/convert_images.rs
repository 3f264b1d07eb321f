//! `ImagesConvert` stores a folder of class folders as one record per image, in class then path
//! order: `image` is the file's bytes, `label` the index of its class among the sorted class
//! names, and the names are the dataset's `classes` attribute; with `max_side`, images over it
//! are stored scaled down to it as JPEG, and smaller ones unchanged.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/convert.rs"]
mod convert;
#[path = "support/images.rs"]
mod images;

use serde_json::json;
use zrecord::convert::ImagesConvert;
use zrecord::{DType, Dataset};

#[test]
fn class_folders_become_labelled_records() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("train");
    // Created out of order: classes are sorted by name.
    let expected = convert::class_folders(&root, &["ant", "bee", "cat"], 7);
    let out = tmp.path().join("sub/train.zr");
    let mut last = None;
    let report = ImagesConvert::new(&root, &out)
        .commit_every(5)
        .on_progress(|p| last = Some(p))
        .run()
        .unwrap();
    assert_eq!((report.rows, report.skipped, report.resumed), (21, 0, 0));
    let last = last.unwrap();
    assert_eq!((last.rows_done, last.rows_total), (21, 21));

    let ds = Dataset::open(&out).unwrap();
    assert_eq!(ds.attributes()["classes"], json!(["ant", "bee", "cat"]));
    // The progress note of the build is gone; only the classes remain.
    assert_eq!(ds.attributes().len(), 1);
    let schema = ds.schema();
    assert_eq!(schema.fields[0].name, "image");
    assert_eq!(schema.fields[1].dtype, DType::I64);
    let got = convert::records(&out);
    assert_eq!(got.len(), expected.len());
    for (i, (rec, (bytes, label))) in got.iter().zip(&expected).enumerate() {
        assert_eq!(&rec[0], bytes, "image {i}");
        assert_eq!(rec[1], label.to_le_bytes(), "label {i}");
    }
    // No build directory is left beside the output.
    let left: Vec<_> = std::fs::read_dir(tmp.path().join("sub"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["train.zr"]);
    // A second run refuses to overwrite.
    let e = ImagesConvert::new(&root, &out).run().unwrap_err();
    assert!(matches!(e, zrecord::Error::AlreadyExists { .. }), "{e}");
}

#[test]
fn max_side_scales_large_images_only_and_shuffle_is_seeded() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("train");
    let expected = convert::class_folders(&root, &["a", "b"], 6);
    let out = tmp.path().join("small.zr");
    ImagesConvert::new(&root, &out).max_side(14).run().unwrap();
    for (rec, (bytes, _)) in convert::records(&out).iter().zip(&expected) {
        // Every image is 16-20 wide: each is now a JPEG whose longer side is 14.
        assert_ne!(&rec[0], bytes);
        assert!(rec[0].starts_with(&[0xff, 0xd8, 0xff]));
        let v = zrecord::transform::image::decode()
            .apply(
                zrecord::transform::Value::Bytes(rec[0].clone().into()),
                &mut zrecord::transform::Rng::new(0),
            )
            .unwrap();
        let zrecord::transform::Value::Image(img) = v else {
            panic!("not an image")
        };
        assert_eq!(img.width().max(img.height()), 14);
    }
    let out = tmp.path().join("big.zr");
    ImagesConvert::new(&root, &out).max_side(64).run().unwrap();
    let kept: Vec<Vec<u8>> = convert::records(&out)
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    let orig: Vec<Vec<u8>> = expected.iter().map(|e| e.0.clone()).collect();
    assert_eq!(kept, orig);

    let shuffled = |name: &str, seed: u64| {
        let out = tmp.path().join(name);
        ImagesConvert::new(&root, &out).shuffle(seed).run().unwrap();
        convert::records(&out)
    };
    let a = shuffled("s1.zr", 7);
    assert_eq!(a, shuffled("s2.zr", 7));
    assert_ne!(a, shuffled("s3.zr", 8));
    let mut sorted = a.iter().map(|r| r[0].clone()).collect::<Vec<_>>();
    sorted.sort();
    let mut want = orig.clone();
    want.sort();
    assert_eq!(sorted, want);
}
