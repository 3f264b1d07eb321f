//! A flipped byte in an object of a collection's part on the store fails the pull of the
//! collection with a typed error naming that object, and leaves the local collection as it was:
//! the same manifest, the same records. Against s3s-fs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/parts.rs"]
mod parts;
#[path = "support/s3.rs"]
mod s3;

use std::path::Path;

use zrecord::collection::{commit, CommitOptions};
use zrecord::remote::{pull, push, TransferOptions};
use zrecord::{DType, Dataset, Error};

use parts::records;

fn make(dir: &Path, seed: u8, n: u32) {
    parts::write(dir, DType::Bytes, Some(8 << 10), n, |i| {
        vec![seed.wrapping_add(i as u8); 200 + i as usize % 50]
    });
}

/// Every file under `dir`, relative to it.
fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out
}

#[test]
fn a_flipped_byte_on_the_store_fails_the_pull_and_changes_nothing_local() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let t = TransferOptions::default().store(server.options());
    let root = tmp.path().join("coll");
    for (k, name) in ["a", "b", "c"].iter().enumerate() {
        make(&tmp.path().join(name), k as u8 * 40, 120);
    }
    commit(
        &root,
        &[tmp.path().join("a"), tmp.path().join("b")],
        CommitOptions::default(),
    )
    .unwrap();
    let url = server.url("damaged/coll");
    push(&root, &url, &t).unwrap();
    let dst = tmp.path().join("dst");
    pull(&url, &dst, &t).unwrap();
    let before = records(&Dataset::open(&dst).unwrap());

    // The collection grows by c on the store; one byte of one of c's chunks flips there.
    commit(&root, &[tmp.path().join("c")], CommitOptions::default()).unwrap();
    push(&root, &url, &t).unwrap();
    let data = server.object_file("damaged/coll/parts/c/data/chunk");
    let chunk = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_file() && p.to_string_lossy().contains(".zr."))
        .unwrap();
    let mut bytes = std::fs::read(&chunk).unwrap();
    bytes[100] ^= 0x20;
    std::fs::write(&chunk, &bytes).unwrap();
    let key = chunk
        .strip_prefix(server.root.path().join(s3::BUCKET))
        .unwrap()
        .display()
        .to_string();

    for into in [dst.clone(), tmp.path().join("fresh")] {
        let existed = into.exists();
        match pull(&url, &into, &t) {
            Err(Error::RemoteCorrupt { object, reason }) => {
                assert_eq!(object, format!("s3://{}/{key}", s3::BUCKET), "{reason}");
            }
            other => panic!("{}: {other:?}", into.display()),
        }
        if existed {
            let ds = Dataset::open(&into).unwrap();
            assert_eq!(ds.snapshot().generation(), 1);
            assert_eq!(ds.snapshot().part_ids(), ["a", "b"]);
            assert!(records(&ds) == before);
        } else {
            assert!(
                matches!(Dataset::open(&into), Err(Error::NotADataset { .. })),
                "a failed first pull leaves no collection"
            );
        }
        let manifests: Vec<String> = files(&into)
            .into_iter()
            .filter(|f| {
                f.starts_with("_collection/")
                    && f != "_collection/commit.lock"
                    && f != "_collection/pull.lock"
            })
            .collect();
        let want: &[&str] = if existed {
            &["_collection/00000000000000000001.json"]
        } else {
            &[]
        };
        assert_eq!(manifests, want);
    }
}
