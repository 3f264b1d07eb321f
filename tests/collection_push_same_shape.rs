//! A collection push takes a part on the store for the local one only if their bytes are equal:
//! a collection written again with other records under the same part ids, generations, lengths
//! and `meta.json` text is refused with a typed error naming the part, whether the store's
//! manifest lists the part or a push left it there unlisted, and the store keeps what it had.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/parts.rs"]
mod parts;
#[path = "support/s3.rs"]
mod s3;

use std::path::Path;

use zrecord::collection::{commit, CommitOptions};
use zrecord::remote::{push, RemoteConfig, TransferOptions};
use zrecord::{DType, Error, Field, ReadConfig, Schema, Writer, WriterConfig};

/// A raw part of `n` records of 40 bytes at `dir`, each byte `seed + record + position`: the
/// same `meta.json` for every seed (lengths and chunk sizes do not depend on it).
fn make(dir: &Path, seed: u8, n: u64) -> Vec<Vec<u8>> {
    let schema = Schema::new()
        .field(Field::new("x", DType::U8))
        .chunk_size_bytes(4 << 10);
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    let recs: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            (0..40u8)
                .map(|j| seed.wrapping_add(i as u8).wrapping_add(j))
                .collect()
        })
        .collect();
    for r in &recs {
        w.append(&[r]).unwrap();
    }
    w.commit().unwrap();
    recs
}

/// A local collection at `root` of parts `a` and `b` written with `seed`; its records.
fn collection(root: &Path, seed: u8) -> Vec<Vec<u8>> {
    let src = root.with_extension("src");
    let mut model = make(&src.join("a"), seed, 300);
    model.extend(make(&src.join("b"), seed.wrapping_add(100), 200));
    commit(
        root,
        &[src.join("a"), src.join("b")],
        CommitOptions::default(),
    )
    .unwrap();
    model
}

fn refused_naming(r: zrecord::Result<zrecord::remote::TransferReport>, part: &str) {
    match r {
        Err(Error::PublishConflict { url, reason }) => {
            assert!(url.ends_with(part), "URL {url}: {reason}")
        }
        other => panic!("expected PublishConflict, got {other:?}"),
    }
}

#[test]
fn a_collection_written_again_is_not_taken_for_the_pushed_one() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let t = TransferOptions::default().store(server.options());
    let url = server.url("bench/coll");
    let first = collection(&tmp.path().join("first"), 1);
    push(tmp.path().join("first"), &url, &t).unwrap();

    let again = collection(&tmp.path().join("again"), 7);
    assert_ne!(again, first);
    for id in ["a", "b"] {
        assert_eq!(
            std::fs::read(tmp.path().join(format!("first/parts/{id}/meta.json"))).unwrap(),
            std::fs::read(tmp.path().join(format!("again/parts/{id}/meta.json"))).unwrap(),
            "the two collections' part {id} must look alike but for their bytes"
        );
    }
    // The store's manifest lists a and b at the same generations and lengths.
    refused_naming(push(tmp.path().join("again"), &url, &t), "parts/a");

    // A part the store holds unlisted (a push cut short before its manifest): the same.
    let url2 = server.url("bench/coll2");
    push(
        tmp.path().join("first/parts/a"),
        &format!("{url2}/parts/a"),
        &t,
    )
    .unwrap();
    refused_naming(push(tmp.path().join("again"), &url2, &t), "parts/a");

    // The store still serves the first collection.
    let cache = tmp.path().join("cache");
    let remote = zrecord::remote::open(
        &url,
        ReadConfig::default(),
        RemoteConfig::default()
            .store(server.options())
            .cache_dir(&cache),
    )
    .unwrap();
    assert_eq!(parts::records(&remote), first);
    // And the collection written again pushes fine elsewhere.
    let url3 = server.url("bench/coll3");
    assert!(
        !push(tmp.path().join("again"), &url3, &t)
            .unwrap()
            .already_done
    );
}
