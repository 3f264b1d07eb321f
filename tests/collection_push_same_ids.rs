//! A push of a local collection never takes a remote part for its own because the remote
//! manifest lists the same id, generation and length: part ids come from directory names
//! ("part-0"), so two collections may share them with other bytes. A remote whose listed parts
//! hold another collection's commits is refused (nothing uploaded, no manifest created), never
//! reported as already done nor appended to.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/parts.rs"]
mod parts;
#[path = "support/s3.rs"]
mod s3;

use std::path::Path;

use zrecord::collection::{commit, CommitOptions};
use zrecord::remote::{push, RemoteConfig, TransferOptions};
use zrecord::{DType, Dataset, Error, ReadConfig};

/// A dataset of `n` records at `dir` whose bytes follow from `seed` (same length for any seed).
use parts::records;

fn make(dir: &Path, seed: u8, n: u32) {
    parts::write(dir, DType::U8, None, n, |i| {
        vec![seed.wrapping_add(i as u8); 10 + (i as usize % 7)]
    });
}

/// A collection at `root` of parts named `names`, made with `seed`.
fn collection(root: &Path, src: &Path, names: &[&str], seed: u8) {
    let dirs: Vec<_> = names
        .iter()
        .map(|name| {
            let dir = src.join(name);
            make(&dir, seed, 50);
            dir
        })
        .collect();
    commit(root, &dirs, CommitOptions::default()).unwrap();
}

#[test]
fn a_remote_listing_the_same_ids_with_other_bytes_is_refused() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let t = TransferOptions::default().store(server.options());
    let open = |url: &str| {
        zrecord::remote::open(
            url,
            ReadConfig::default(),
            RemoteConfig::default()
                .store(server.options())
                .cache_dir(tmp.path().join("cache")),
        )
        .unwrap()
    };

    // Collection A: part-0 (seed 1). Collection B: part-0 (seed 2, same length), part-1.
    let a = tmp.path().join("a");
    collection(&a, &tmp.path().join("src-a"), &["part-0"], 1);
    let b = tmp.path().join("b");
    collection(&b, &tmp.path().join("src-b"), &["part-0", "part-1"], 2);
    let b_one = tmp.path().join("b-one");
    collection(&b_one, &tmp.path().join("src-b-one"), &["part-0"], 2);
    assert_ne!(
        records(&Dataset::open(&a).unwrap()),
        records(&Dataset::open(&b_one).unwrap())
    );

    let url = server.url("shared/coll");
    push(&a, &url, &t).unwrap();
    let before = records(&open(&url));

    // The same list (ids, generations, lengths), other bytes: not "already done".
    match push(&b_one, &url, &t) {
        Err(Error::PublishConflict { url, reason }) => {
            assert!(url.ends_with("/parts/part-0"), "{url}: {reason}");
            assert!(reason.contains("another dataset"), "{reason}");
        }
        other => panic!("B's part-0 is not A's: {other:?}"),
    }
    // A longer list starting with the same entry: not appended to A's part-0.
    match push(&b, &url, &t) {
        Err(Error::PublishConflict { url, reason }) => {
            assert!(url.ends_with("/parts/part-0"), "{url}: {reason}");
            assert!(reason.contains("another dataset"), "{reason}");
        }
        other => panic!("B's part-0 is not A's: {other:?}"),
    }
    let remote = open(&url);
    assert_eq!(remote.snapshot().part_ids(), ["part-0"]);
    assert_eq!(remote.snapshot().generation(), 1);
    assert_eq!(records(&remote), before);

    // A's own collection, grown, still appends.
    let more = tmp.path().join("src-a2/part-1");
    make(&more, 1, 20);
    commit(&a, &[more], CommitOptions::default()).unwrap();
    let r = push(&a, &url, &t).unwrap();
    assert!(!r.already_done, "{r:?}");
    let remote = open(&url);
    assert_eq!(remote.snapshot().part_ids(), ["part-0", "part-1"]);
    assert_eq!(records(&remote), records(&Dataset::open(&a).unwrap()));
    assert!(push(&a, &url, &t).unwrap().already_done);
}
