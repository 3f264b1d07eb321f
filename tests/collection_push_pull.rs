//! A local collection pushed to an object store (s3s-fs) and pulled back reads record for
//! record as the local one: the remote and the pulled collection list exactly the local parts,
//! in order; a rerun transfers and commits nothing and says already done; a later local commit
//! is pushed and pulled as an append; a remote (or a local copy) whose parts are not a prefix of
//! the source's, or that holds another dataset under a part's id, is refused with a typed error
//! and left unchanged.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/s3.rs"]
mod s3;

use std::path::{Path, PathBuf};

use zrecord::collection::{commit, CommitOptions};
use zrecord::remote::{pull, push, RemoteConfig, TransferOptions};
use zrecord::{Codec, DType, Dataset, Error, Field, ReadConfig, Schema, Writer, WriterConfig};

type Rec = Vec<Vec<u8>>;

fn record(part: u64, i: u64) -> Rec {
    let len = ((i * 37 + part * 11) % 300) as usize;
    let x: Vec<u8> = (0..len)
        .map(|j| {
            (part as u8)
                .wrapping_mul(29)
                .wrapping_add((i + j as u64) as u8)
        })
        .collect();
    vec![
        x,
        (i as u32 + (part as u32) * 100_000).to_le_bytes().to_vec(),
    ]
}

/// Part `part` with `n` records at `dir` (several chunks); returns its records.
fn make(dir: &Path, part: u64, n: u64) -> Vec<Rec> {
    let schema = Schema::new()
        .field(Field::new("x", DType::U8).codec(Codec::Deflate))
        .field(Field::new("label", DType::U32))
        .chunk_size_bytes(16 << 10);
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    let recs: Vec<Rec> = (0..n).map(|i| record(part, i)).collect();
    for r in &recs {
        w.append(&[&r[0], &r[1]]).unwrap();
    }
    w.commit().unwrap();
    recs
}

fn all(ds: &Dataset) -> Vec<Rec> {
    let idx: Vec<u64> = (0..ds.len()).collect();
    ds.gather_blocking(&idx)
        .unwrap()
        .into_records()
        .into_iter()
        .map(|r| r.into_iter().map(|b| b.to_vec()).collect())
        .collect()
}

fn open_url(server: &s3::S3Server, url: &str, cache: &Path) -> zrecord::Result<Dataset> {
    zrecord::remote::open(
        url,
        ReadConfig::default(),
        RemoteConfig::default()
            .store(server.options())
            .cache_dir(cache),
    )
}

/// The ids of the latest manifest of the local collection at `root`.
fn local_ids(root: &Path) -> Vec<String> {
    Dataset::open(root).unwrap().snapshot().part_ids().to_vec()
}

#[test]
fn push_and_pull_round_trip_a_collection() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let t = TransferOptions::default().store(server.options());
    let root = tmp.path().join("coll");

    // A local collection of two commits: a and b, then c.
    let mut model = make(&tmp.path().join("a"), 1, 700);
    model.extend(make(&tmp.path().join("b"), 2, 450));
    commit(
        &root,
        &[tmp.path().join("a"), tmp.path().join("b")],
        CommitOptions::default(),
    )
    .unwrap();
    model.extend(make(&tmp.path().join("c"), 3, 5));
    commit(&root, &[tmp.path().join("c")], CommitOptions::default()).unwrap();
    assert_eq!(all(&Dataset::open(&root).unwrap()), model);

    // A push cut short after its first part (what a killed push leaves): run again, it
    // uploads only the other parts.
    let url = server.url("pushed/coll");
    let first = push(root.join("parts/a"), &format!("{url}/parts/a"), &t).unwrap();
    let r = push(&root, &url, &t).unwrap();
    assert!(!r.already_done, "{r:?}");
    assert_eq!((r.generation, r.slot, r.parts), (2, 1, Some(3)), "{r:?}");
    assert_eq!(r.skipped, first.transferred, "a's objects: {r:?}");
    assert!(r.transferred.0 > 3, "{r:?}");
    let remote = open_url(&server, &url, &cache).unwrap();
    assert!(remote.snapshot().is_collection());
    assert_eq!(remote.snapshot().part_ids(), ["a", "b", "c"]);
    assert_eq!(remote.snapshot().generation(), 1);
    assert_eq!(all(&remote), model);

    // Again: nothing transferred, nothing committed.
    let again = push(&root, &url, &t).unwrap();
    assert!(again.already_done, "{again:?}");
    assert_eq!((again.slot, again.transferred), (1, (0, 0)), "{again:?}");
    assert!(!remote.refresh().unwrap(), "a rerun created a manifest");

    // Pulled back: the same records, the same parts in the same order. A pull cut short after
    // its first part, run again, downloads only the other parts.
    let back = tmp.path().join("back");
    let first = pull(&format!("{url}/parts/a"), back.join("parts/a"), &t).unwrap();
    let r = pull(&url, &back, &t).unwrap();
    assert!(!r.already_done, "{r:?}");
    assert_eq!((r.slot, r.parts), (1, Some(3)), "{r:?}");
    assert_eq!(r.skipped, first.transferred, "a's objects: {r:?}");
    assert_eq!(local_ids(&back), ["a", "b", "c"]);
    assert_eq!(all(&Dataset::open(&back).unwrap()), model);
    let again = pull(&url, &back, &t).unwrap();
    assert!(again.already_done, "{again:?}");
    assert_eq!(again.transferred, (0, 0), "{again:?}");
    assert_eq!(Dataset::open(&back).unwrap().snapshot().generation(), 1);

    // A later local commit goes as an append: only the new part's objects, one new manifest.
    model.extend(make(&tmp.path().join("d"), 4, 300));
    commit(&root, &[tmp.path().join("d")], CommitOptions::default()).unwrap();
    let r = push(&root, &url, &t).unwrap();
    assert!(!r.already_done, "{r:?}");
    assert_eq!((r.generation, r.slot, r.parts), (3, 2, Some(4)), "{r:?}");
    let d_objects = std::fs::read_dir(tmp.path().join("coll/parts/d/chunk"))
        .unwrap()
        .count() as u64;
    assert!(
        r.transferred.0 >= d_objects && r.transferred.0 <= d_objects + 4,
        "only d's files: {r:?}"
    );
    assert!(remote.refresh().unwrap());
    assert_eq!(remote.snapshot().part_ids(), ["a", "b", "c", "d"]);
    assert_eq!(all(&remote), model);
    let r = pull(&url, &back, &t).unwrap();
    assert!(!r.already_done, "{r:?}");
    assert_eq!(local_ids(&back), ["a", "b", "c", "d"]);
    assert_eq!(all(&Dataset::open(&back).unwrap()), model);
}

#[test]
fn a_diverged_remote_or_local_copy_is_refused_and_left_unchanged() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let t = TransferOptions::default().store(server.options());
    let url = server.url("diverged/coll");

    // Collection one: a, b. Collection two: a, x (another part at the second place).
    let one = tmp.path().join("one");
    let two = tmp.path().join("two");
    for (root, parts) in [
        (&one, [("a", 1u64), ("b", 2)]),
        (&two, [("a", 1), ("x", 9)]),
    ] {
        let src = tmp.path().join(format!(
            "src-{}",
            root.file_name().unwrap().to_str().unwrap()
        ));
        let dirs: Vec<PathBuf> = parts
            .iter()
            .map(|(name, seed)| {
                make(&src.join(name), *seed, 40);
                src.join(name)
            })
            .collect();
        commit(root, &dirs, CommitOptions::default()).unwrap();
    }
    push(&one, &url, &t).unwrap();
    let before = all(&open_url(&server, &url, &cache).unwrap());

    match push(&two, &url, &t) {
        Err(Error::PublishConflict { url: u, reason }) => {
            assert_eq!(u, url);
            assert!(
                reason.contains("\"b\"") && reason.contains("\"x\""),
                "the reason names what differs: {reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    let remote = open_url(&server, &url, &cache).unwrap();
    assert_eq!(remote.snapshot().generation(), 1);
    assert_eq!(remote.snapshot().part_ids(), ["a", "b"]);
    assert_eq!(all(&remote), before);

    // A local copy of collection two does not take collection one's parts.
    let local_before = all(&Dataset::open(&two).unwrap());
    match pull(&url, &two, &t) {
        Err(Error::InvalidConfig { reason }) => {
            assert!(reason.contains("\"x\""), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(local_ids(&two), ["a", "x"]);
    assert_eq!(all(&Dataset::open(&two).unwrap()), local_before);
    assert!(!two.join("parts/b").exists(), "nothing was pulled");

    // Another dataset pushed under the id of a part the store lacks is not overwritten.
    let three = tmp.path().join("three");
    let src = tmp.path().join("src-three");
    make(&src.join("a"), 1, 40);
    make(&src.join("b"), 2, 40);
    make(&src.join("c"), 3, 40);
    commit(
        &three,
        &[src.join("a"), src.join("b"), src.join("c")],
        CommitOptions::default(),
    )
    .unwrap();
    push(
        tmp.path().join("two/parts/x"),
        &format!("{url}/parts/c"),
        &t,
    )
    .unwrap();
    match push(&three, &url, &t) {
        Err(Error::PublishConflict { url: u, reason }) => {
            assert_eq!(u, format!("{url}/parts/c"));
            assert!(reason.contains("another dataset"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        open_url(&server, &url, &cache)
            .unwrap()
            .snapshot()
            .generation(),
        1
    );

    // A dataset directory is no place for a collection, nor a collection for a dataset.
    let ds = tmp.path().join("ds");
    make(&ds, 5, 3);
    assert!(matches!(
        pull(&url, &ds, &t),
        Err(Error::InvalidConfig { .. })
    ));
    let ds_url = server.url("a-dataset");
    push(&ds, &ds_url, &t).unwrap();
    assert!(matches!(
        pull(&ds_url, &one, &t),
        Err(Error::InvalidConfig { .. })
    ));
    assert_eq!(local_ids(&one), ["a", "b"]);
}
