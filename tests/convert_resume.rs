//! An image or WebDataset conversion interrupted part way (here by a panic in its progress
//! callback, which skips every clean-up as a kill would) and run again with the same inputs
//! continues from its last commit and ends with exactly the dataset an uninterrupted run
//! makes; a rerun with other options refuses to mix into it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/convert.rs"]
mod convert;
#[path = "support/images.rs"]
mod images;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use zrecord::convert::{ImagesConvert, WebDatasetConvert};
use zrecord::Dataset;

/// Runs `run` with a progress callback that panics once 40 rows are done.
fn interrupted(run: impl FnOnce(&mut (dyn FnMut(u64) + Send))) {
    let r = catch_unwind(AssertUnwindSafe(|| {
        run(&mut |done| {
            if done >= 40 {
                panic!("interrupted at {done}");
            }
        })
    }));
    assert!(r.is_err(), "the run was not interrupted");
}

fn hidden(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect()
}

#[test]
fn an_interrupted_image_conversion_resumes_to_the_same_dataset() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("train");
    convert::class_folders(&root, &["a", "b", "c"], 30);
    let whole = tmp.path().join("whole.zr");
    ImagesConvert::new(&root, &whole).run().unwrap();

    let out = tmp.path().join("out.zr");
    let conv = || ImagesConvert::new(&root, &out).commit_every(16).shuffle(3);
    interrupted(|stop| {
        let _ = conv().on_progress(|p| stop(p.rows_done)).run();
    });
    assert!(!out.exists());
    assert_eq!(hidden(tmp.path()), [".out.zr.zrecord-convert"]);
    // Other options: refused, and the build directory is left as it was.
    let e = ImagesConvert::new(&root, &out)
        .max_side(8)
        .run()
        .unwrap_err();
    assert!(matches!(e, zrecord::Error::InvalidConfig { .. }), "{e}");
    assert!(e.to_string().contains(".out.zr.zrecord-convert"), "{e}");

    let report = conv().run().unwrap();
    assert!(report.resumed >= 32 && report.resumed < 90, "{report:?}");
    assert_eq!(report.rows, 90);
    assert!(hidden(tmp.path()).is_empty());
    // Same records as an uninterrupted run with the same shuffle.
    let fresh = tmp.path().join("fresh.zr");
    ImagesConvert::new(&root, &fresh).shuffle(3).run().unwrap();
    assert_eq!(convert::records(&out), convert::records(&fresh));
    assert_eq!(
        Dataset::open(&out).unwrap().attributes(),
        Dataset::open(&whole).unwrap().attributes()
    );
}

#[test]
fn an_interrupted_webdataset_conversion_resumes_to_the_same_dataset() {
    let tmp = tempfile::tempdir().unwrap();
    let mut shards = Vec::new();
    for s in 0..3u64 {
        let members: Vec<(String, Vec<u8>)> = (0..30u64)
            .flat_map(|i| {
                let key = format!("{:04}", s * 100 + i);
                [
                    (format!("{key}.jpg"), images::jpeg(6, 6, i)),
                    (format!("{key}.cls"), format!("{}", i % 3).into_bytes()),
                ]
            })
            .collect();
        let p = tmp.path().join(format!("s{s}.tar"));
        convert::shard(&p, &members);
        shards.push(p);
    }
    let whole = tmp.path().join("whole.zr");
    WebDatasetConvert::new(&shards, &whole).run().unwrap();
    let out = tmp.path().join("out.zr");
    let conv = || WebDatasetConvert::new(&shards, &out).commit_every(10);
    interrupted(|stop| {
        let _ = conv().on_progress(|p| stop(p.rows_done)).run();
    });
    assert!(!out.exists());
    let report = conv().run().unwrap();
    assert!(report.resumed >= 30 && report.resumed < 90, "{report:?}");
    assert_eq!(convert::records(&out), convert::records(&whole));
}

/// A build directory killed before its first commit (an empty dataset naming no conversion)
/// is replaced; one holding another dataset is refused, and left alone.
#[test]
fn an_unnamed_build_directory_is_replaced_only_when_empty() {
    use zrecord::{DType, Field, Schema, Writer, WriterConfig};
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("train");
    convert::class_folders(&root, &["a"], 3);
    let out = tmp.path().join("out.zr");
    let build = tmp.path().join(".out.zr.zrecord-convert");
    let schema = Schema::new().field(Field::new("other", DType::U8));
    drop(Writer::create(&build, &schema, WriterConfig::default()).unwrap());
    ImagesConvert::new(&root, &out).run().unwrap();
    assert_eq!(
        Dataset::open(&out).unwrap().schema().fields[0].name,
        "image"
    );

    let out = tmp.path().join("out2.zr");
    let build = tmp.path().join(".out2.zr.zrecord-convert");
    let mut w = Writer::create(&build, &schema, WriterConfig::default()).unwrap();
    w.append(&[b"x"]).unwrap();
    w.commit().unwrap();
    drop(w);
    let e = ImagesConvert::new(&root, &out).run().unwrap_err();
    assert!(matches!(e, zrecord::Error::InvalidConfig { .. }), "{e}");
    assert_eq!(Dataset::open(&build).unwrap().len(), 1);
}
