//! `zrecord convert` takes every form with positional `INPUT... OUT`: `npy` (and the original
//! nameless `IN.npy... --out DIR`, unchanged), `images DIR OUT` and `webdataset SHARDS... OUT`
//! with a quoted pattern it expands itself; each gives the dataset the library converter gives.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod cli_support;
#[path = "support/convert.rs"]
mod convert;
#[path = "support/images.rs"]
mod images;

use cli_support::{write_f32, zrecord, zrecord_ok};
use zrecord::Dataset;

#[test]
fn npy_forms_old_and_new_make_the_same_dataset() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a.npy");
    write_f32(&a, 5, 3);
    let a = a.to_str().unwrap();
    let old = tmp.path().join("old.zr");
    let new = tmp.path().join("new.zr");
    let flag = tmp.path().join("flag.zr");
    zrecord_ok(&["convert", a, "--out", old.to_str().unwrap()]);
    zrecord_ok(&["convert", "npy", a, new.to_str().unwrap()]);
    zrecord_ok(&["convert", "npy", a, "--out", flag.to_str().unwrap()]);
    let want = convert::records(&old);
    assert_eq!(want.len(), 5);
    assert_eq!(convert::records(&new), want);
    assert_eq!(convert::records(&flag), want);
    // No output: a usage error.
    for args in [&["convert", a][..], &["convert", "npy", a][..]] {
        let r = zrecord(args);
        assert_eq!(r.code, Some(2), "{args:?}: {}", r.stderr);
    }
}

#[test]
fn images_and_webdataset_forms_convert() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("train");
    let expected = convert::class_folders(&root, &["x", "y"], 5);
    let out = tmp.path().join("img.zr");
    let r = zrecord_ok(&[
        "convert",
        "images",
        root.to_str().unwrap(),
        out.to_str().unwrap(),
        "--commit-every",
        "3",
    ]);
    assert!(
        r.stdout_str().contains("converted 10 images"),
        "{}",
        r.stdout_str()
    );
    let ds = Dataset::open(&out).unwrap();
    assert_eq!(ds.attributes()["classes"], serde_json::json!(["x", "y"]));
    let got = convert::records(&out);
    for (rec, (bytes, label)) in got.iter().zip(&expected) {
        assert_eq!(&rec[0], bytes);
        assert_eq!(rec[1], label.to_le_bytes());
    }

    for s in 0..3 {
        let members: Vec<(String, Vec<u8>)> = (0..4)
            .map(|i| (format!("{s}{i:03}.txt"), format!("t{s}{i}").into_bytes()))
            .collect();
        convert::shard(&tmp.path().join(format!("shard-{s}.tar")), &members);
    }
    let pattern = tmp.path().join("shard-*.tar");
    let out = tmp.path().join("wds.zr");
    zrecord_ok(&[
        "convert",
        "webdataset",
        pattern.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
    let got = convert::records(&out);
    assert_eq!(got.len(), 12);
    assert_eq!(got[5][0], b"t11");
    // A pattern that matches nothing is an error naming it.
    let r = zrecord(&[
        "convert",
        "webdataset",
        tmp.path().join("none-*.tar").to_str().unwrap(),
        tmp.path().join("w2.zr").to_str().unwrap(),
    ]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(r.stderr.contains("none-*.tar"), "{}", r.stderr);
    // A bad image: exit 1, the file named.
    std::fs::write(root.join("y/img001.png"), b"nope").unwrap();
    let r = zrecord(&[
        "convert",
        "images",
        root.to_str().unwrap(),
        tmp.path().join("bad.zr").to_str().unwrap(),
    ]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(r.stderr.contains("img001.png"), "{}", r.stderr);
}
