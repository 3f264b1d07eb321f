//! A pull of a collection into a directory where a writer holds one of the parts it fetches
//! (`<root>/parts/<id>`) is `WriterBusy` naming that part's lock, at once: it holds the
//! collection's commit lock, and waiting on the writer would hold up every `gc` of the
//! collection for as long as the writer lives. A `gc` right after it runs, and the pull
//! succeeds once the writer is gone. Against s3s-fs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/parts.rs"]
mod parts;
#[path = "support/s3.rs"]
mod s3;

use std::time::Duration;

use zrecord::collection::{commit, gc, CommitOptions, GcOptions};
use zrecord::remote::{pull, push, TransferOptions};
use zrecord::{DType, Dataset, Error, Schema, Writer, WriterConfig};

#[test]
fn a_pull_refuses_a_part_a_writer_holds_and_gc_is_not_held_up() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("coll");
    for name in ["p0", "p1"] {
        parts::write(&tmp.path().join(name), DType::Bytes, None, 3, |i| {
            format!("{name}/{i}").into_bytes()
        });
    }
    commit(
        &root,
        &[tmp.path().join("p0"), tmp.path().join("p1")],
        CommitOptions::default(),
    )
    .unwrap();
    let url = server.url("busy/coll");
    let t = TransferOptions::default().store(server.options());
    push(&root, &url, &t).unwrap();

    // A task writing a dataset of its own under the id the pull fetches second.
    let dst = tmp.path().join("dst");
    let schema = Schema::new().field(zrecord::Field::new("x", DType::Bytes));
    let writer = Writer::create(
        dst.join("parts").join("p1"),
        &schema,
        WriterConfig::default(),
    )
    .unwrap();
    // (Before, the pull waited here for as long as the writer lived.)
    let err = pull(&url, &dst, &t).unwrap_err();
    match &err {
        Error::WriterBusy { path } => assert!(path.ends_with("parts/p1/writer.lock"), "{err}"),
        other => panic!("expected WriterBusy, got {other}"),
    }
    // Nothing holds the commit lock now: a gc runs (and keeps the part the writer holds).
    let r = gc(dst.to_str().unwrap(), Duration::ZERO, &GcOptions::default()).unwrap();
    assert!(r.kept.contains(&"p1".to_string()), "{r:?}");
    drop(writer);
    // The writer's own dataset is in the way: the user removes it, and the pull completes.
    std::fs::remove_dir_all(dst.join("parts").join("p1")).unwrap();
    pull(&url, &dst, &t).unwrap();
    let ds = Dataset::open(&dst).unwrap();
    assert_eq!(ds.snapshot().part_ids(), ["p0", "p1"]);
    assert_eq!(parts::records(&ds)[4], b"p1/1");
}
