//! On Azure Blob Storage (Azurite), `refresh` never misses a dataset or collection deleted and
//! published again at the same URL with the same commit slot (manifest number), lengths and
//! part ids: it reports the change and the handle reads the new records, never a 404 of the
//! deleted objects.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/azurite.rs"]
mod azurite;
#[path = "support/parts.rs"]
mod parts;

use std::path::Path;

use zrecord::collection::{commit_url, CommitOptions};
use zrecord::remote::{push, RemoteConfig, TransferOptions};
use zrecord::{DType, Dataset, ReadConfig};

const N: u32 = 40;

/// Record `i` of version `v` of part `p`.
fn record(v: u8, p: u8, i: u32) -> Vec<u8> {
    vec![v.wrapping_mul(100).wrapping_add(p).wrapping_add(i as u8); 24]
}

fn records(v: u8, parts: u8) -> Vec<Vec<u8>> {
    (0..parts)
        .flat_map(|p| (0..N).map(move |i| record(v, p, i)))
        .collect()
}

fn open(server: &azurite::Azurite, url: &str, cache: &Path) -> Dataset {
    zrecord::remote::open(
        url,
        ReadConfig::default(),
        RemoteConfig::default()
            .store(server.options())
            .cache_dir(cache),
    )
    .unwrap()
}

#[test]
fn a_republished_dataset_and_collection_are_refreshed() {
    let mut server = azurite::Azurite::start();
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");

    // Version 1 of a dataset and of a two-part collection.
    let local = |v: u8, name: &str, p: u8| {
        let dir = tmp.path().join(format!("v{v}")).join(name);
        parts::write(&dir, DType::U8, None, N, |i| record(v, p, i));
        dir
    };
    let ds_url = server.url("sets/ds");
    let c_url = server.url("sets/coll");
    let publish = |server: &azurite::Azurite, v: u8| {
        let t = TransferOptions::default().store(server.options());
        let r = push(local(v, "ds", 0), &ds_url, &t).unwrap();
        assert_eq!(r.slot, 1);
        let given = [local(v, "task-0", 0), local(v, "task-1", 1)];
        let given: Vec<String> = given.iter().map(|d| d.display().to_string()).collect();
        let r = commit_url(&c_url, &given, CommitOptions::default(), &t).unwrap();
        assert_eq!(
            (r.number, r.ids.clone()),
            (1, vec!["task-0".to_string(), "task-1".into()])
        );
    };
    publish(&server, 1);
    let ds = open(&server, &ds_url, &cache);
    let coll = open(&server, &c_url, &cache);
    assert!(coll.snapshot().is_collection());
    assert_eq!(parts::records(&ds), records(1, 1));
    assert_eq!(parts::records(&coll), records(1, 2));
    assert!(
        !ds.refresh().unwrap() && !coll.refresh().unwrap(),
        "nothing new yet"
    );

    // Everything deleted, then version 2 published at the same URLs: slot 1 and manifest 1
    // again, the same part ids and lengths.
    server.restart_empty();
    publish(&server, 2);
    let seen = (ds.refresh().unwrap(), coll.refresh().unwrap());
    assert_eq!(
        seen,
        (true, true),
        "(dataset, collection) re-published and seen"
    );
    assert_eq!(parts::records(&ds), records(2, 1));
    assert_eq!(parts::records(&coll), records(2, 2));
    assert!(
        !ds.refresh().unwrap() && !coll.refresh().unwrap(),
        "nothing new after"
    );
}
