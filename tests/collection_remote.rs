//! A collection under an object-store prefix (s3s-fs) reads as one dataset with global indices
//! equal to its parts' records in commit order, whether a part was pushed under `parts/` by its
//! writer or pushed there by the commit from a local directory (and pulled, as the same local
//! collection); `refresh` sees a newer manifest; a retried commit adds nothing; bad parts and
//! damaged manifests are typed errors naming what is wrong.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/s3.rs"]
mod s3;

use std::path::{Path, PathBuf};

use zrecord::collection::{commit_url, CommitOptions};
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

/// Part `part` with `n` records at `dir`; returns its records.
fn make(dir: &Path, part: u64, n: u64, label: DType) -> Vec<Rec> {
    let schema = Schema::new()
        .field(Field::new("x", DType::U8).codec(Codec::Deflate))
        .field(Field::new("label", label))
        .chunk_size_bytes(16 << 10);
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    let recs: Vec<Rec> = (0..n).map(|i| record(part, i)).collect();
    for r in &recs {
        w.append(&[&r[0], &r[1]]).unwrap();
    }
    w.commit().unwrap();
    recs
}

fn open(server: &s3::S3Server, url: &str, cache: &Path) -> zrecord::Result<Dataset> {
    zrecord::remote::open(
        url,
        ReadConfig::default(),
        RemoteConfig::default()
            .store(server.options())
            .cache_dir(cache),
    )
}

fn read(ds: &Dataset, indices: &[u64]) -> Vec<Rec> {
    ds.gather_blocking(indices)
        .unwrap()
        .into_records()
        .into_iter()
        .map(|r| r.into_iter().map(|b| b.to_vec()).collect())
        .collect()
}

/// Every record in order, and random batches across parts, against the model.
fn check(ds: &Dataset, model: &[Rec]) {
    assert_eq!(ds.len(), model.len() as u64);
    let all: Vec<u64> = (0..ds.len()).collect();
    assert!(read(ds, &all) == model, "in order");
    let mut x = 0x9e37_79b9_u64;
    for size in [1usize, 7, 64, 300] {
        let indices: Vec<u64> = (0..size)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % ds.len()
            })
            .collect();
        let want: Vec<Rec> = indices.iter().map(|&i| model[i as usize].clone()).collect();
        assert!(read(ds, &indices) == want, "batch of {size}");
    }
}

fn dirs(tmp: &Path, name: &str) -> PathBuf {
    tmp.join(name)
}

#[test]
fn a_remote_collection_round_trips_and_refreshes() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let url = server.url("colls/c1");
    let t = TransferOptions::default().store(server.options());

    // A distributed writer's task pushes its part under parts/ itself; another part is local.
    let a = make(&dirs(tmp.path(), "task-a"), 1, 700, DType::U32);
    let b = make(&dirs(tmp.path(), "task-b"), 2, 450, DType::U32);
    push(
        dirs(tmp.path(), "task-b"),
        &format!("{url}/parts/task-b"),
        &t,
    )
    .unwrap();
    let local_a = dirs(tmp.path(), "task-a").display().to_string();
    let part_b = format!("{url}/parts/task-b/");
    let r = commit_url(&url, &[&local_a, &part_b], CommitOptions::default(), &t).unwrap();
    assert_eq!((r.number, r.len, r.parts), (1, 1150, 2));
    assert_eq!(r.ids, ["task-a", "task-b"]);
    assert_eq!(r.added, ["task-a", "task-b"]);

    let model: Vec<Rec> = a.iter().chain(&b).cloned().collect();
    let ds = open(&server, &url, &cache).unwrap();
    assert!(ds.snapshot().is_collection());
    assert_eq!(ds.snapshot().generation(), 1);
    assert_eq!(ds.backend_name(), "remote");
    check(&ds, &model);

    // A retried commit adds nothing and creates no manifest.
    let again = commit_url(&url, &[&local_a, &part_b], CommitOptions::default(), &t).unwrap();
    assert_eq!((again.number, again.added.len(), again.len), (1, 0, 1150));
    assert_eq!(again.ids, ["task-a", "task-b"]);
    assert!(!ds.refresh().unwrap(), "nothing new");

    // A third part, local, in a second commit: the open dataset refreshes to it.
    let c = make(&dirs(tmp.path(), "task-c"), 3, 333, DType::U32);
    let local_c = dirs(tmp.path(), "task-c").display().to_string();
    let r = commit_url(&url, &[&local_c], CommitOptions::default(), &t).unwrap();
    assert_eq!((r.number, r.len, r.parts), (2, 1483, 3));
    assert!(ds.refresh().unwrap());
    assert_eq!(ds.snapshot().generation(), 2);
    let model: Vec<Rec> = model.into_iter().chain(c).collect();
    check(&ds, &model);
    assert_eq!(ds.snapshot().part_ids(), ["task-a", "task-b", "task-c"]);

    // Dataset::open of the URL (default options from the environment) dispatches the same
    // way: here through zrecord::remote::open_collection with explicit options.
    let again = zrecord::remote::open_collection(
        &url,
        ReadConfig::default(),
        RemoteConfig::default()
            .store(server.options())
            .cache_dir(&cache),
    )
    .unwrap();
    check(&again, &model);

    // A different dataset under a taken part name gets another id; the same one does not.
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let d = make(&other.join("task-a"), 4, 10, DType::U32);
    let other_a = other.join("task-a").display().to_string();
    let r = commit_url(&url, &[&other_a], CommitOptions::default(), &t).unwrap();
    assert_eq!(r.number, 3);
    assert!(
        r.ids[0].starts_with("task-a-") && r.ids[0] != "task-a",
        "{:?}",
        r.ids
    );
    assert!(ds.refresh().unwrap());
    let model: Vec<Rec> = model.into_iter().chain(d).collect();
    check(&ds, &model);

    // Pulled, the collection is a local collection of the same parts and records.
    let pulled = tmp.path().join("pulled");
    let r = pull(&url, &pulled, &t).unwrap();
    assert_eq!((r.slot, r.parts), (3, Some(4)));
    let local = Dataset::open(&pulled).unwrap();
    assert_eq!(local.snapshot().part_ids(), ds.snapshot().part_ids());
    check(&local, &model);
}

#[test]
fn bad_parts_and_damaged_manifests_are_typed_errors() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let url = server.url("colls/c2");
    let t = TransferOptions::default().store(server.options());
    make(&tmp.path().join("p0"), 0, 50, DType::U32);
    make(&tmp.path().join("wrong"), 1, 50, DType::I32);
    let p0 = tmp.path().join("p0").display().to_string();
    commit_url(&url, &[&p0], CommitOptions::default(), &t).unwrap();

    // Another schema: refused, naming the field; nothing committed.
    let wrong = tmp.path().join("wrong").display().to_string();
    match commit_url(&url, &[&wrong], CommitOptions::default(), &t) {
        Err(Error::PartMismatch { field, reason, .. }) => {
            assert_eq!(field, "label");
            assert!(reason.contains("dtype"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // A part URL outside the collection's parts/.
    let elsewhere = server.url("colls/elsewhere/p9");
    push(tmp.path().join("p0"), &elsewhere, &t).unwrap();
    for bad in [
        elsewhere.clone(),
        format!("{url}/p9"),
        format!("{url}/parts/a/b"),
    ] {
        match commit_url(&url, &[&bad], CommitOptions::default(), &t) {
            Err(Error::PartOutsideCollection { part, collection }) => {
                assert_eq!(
                    (part.as_str(), collection.as_str()),
                    (bad.as_str(), url.as_str())
                );
            }
            other => panic!("{bad}: {other:?}"),
        }
    }
    // A part URL under parts/ with nothing pushed there.
    let missing = format!("{url}/parts/never-pushed");
    match commit_url(&url, &[&missing], CommitOptions::default(), &t) {
        Err(Error::NotADataset { path, .. }) => assert_eq!(path, Path::new(&missing)),
        other => panic!("{other:?}"),
    }
    let ds = open(&server, &url, &cache).unwrap();
    assert_eq!((ds.len(), ds.snapshot().generation()), (50, 1));

    // One flipped byte in the manifest on the store: a typed error naming its URL.
    let key = "colls/c2/_collection/00000000000000000001.json";
    let file = server.object_file(key);
    let mut bytes = std::fs::read(&file).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    std::fs::write(&file, &bytes).unwrap();
    match open(&server, &url, &cache) {
        Err(Error::MetaCorrupt { path, .. }) => {
            assert_eq!(path, Path::new(&format!("s3://{}/{key}", s3::BUCKET)));
        }
        other => panic!("{other:?}"),
    }
}

// Two local directories of the same name holding equal records are two parts: the record of
// where a pushed part came from (`parts/<id>/_source`) tells them apart, where the bytes alone
// cannot tell the second from a retry of the first (which must add nothing).
#[test]
fn parts_with_equal_bytes_are_separate_parts_on_a_store() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let url = server.url("colls/equal");
    let t = TransferOptions::default().store(server.options());
    // Two tasks wrote equal records into directories of the same name.
    let (d1, d2) = (tmp.path().join("d1/p"), tmp.path().join("d2/p"));
    let mut model = make(&d1, 1, 6, DType::U32);
    model.extend(make(&d2, 1, 6, DType::U32));
    let text = |d: &Path| d.display().to_string();
    commit_url(&url, &[text(&d1)], CommitOptions::default(), &t).unwrap();
    let r = commit_url(&url, &[text(&d2)], CommitOptions::default(), &t).unwrap();
    assert_eq!((r.parts, r.len), (2, 12), "{r:?}");
    check(
        &open(&server, &url, &tmp.path().join("cache")).unwrap(),
        &model,
    );
}

// A commit cut short after pushing a part under a suffixed id (its name was taken) and run
// again takes that push: the suffix comes from the part's provenance record, so the retry tries
// the same id and finds its own record there; nothing is pushed twice. `gc` removes a part's
// record with it, never a named part's.
#[test]
fn a_retry_takes_its_push_under_the_suffixed_id() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let url = server.url("colls/suffixed");
    let t = TransferOptions::default().store(server.options());
    let (d1, d2) = (tmp.path().join("d1/p"), tmp.path().join("d2/p"));
    let mut model = make(&d1, 1, 5, DType::U32);
    model.extend(make(&d2, 2, 7, DType::U32));
    let text = |d: &Path| d.display().to_string();
    commit_url(&url, &[text(&d1)], CommitOptions::default(), &t).unwrap();
    let cut = CommitOptions::new().on_step(|s| {
        if matches!(s, zrecord::collection::CommitStep::PartPlaced { .. }) {
            panic!("cut short");
        }
    });
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        commit_url(&url, &[text(&d2)], cut, &t)
    }));
    assert!(r.is_err(), "not cut short: {r:?}");
    let parts_dir = server.object_file("colls/suffixed/parts");
    let prefixes = || {
        let mut v: Vec<String> = std::fs::read_dir(&parts_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| !n.starts_with('.'))
            // s3s-fs keeps a folder whose objects were all deleted.
            .filter(|n| std::fs::read_dir(parts_dir.join(n)).unwrap().count() > 0)
            .collect();
        v.sort();
        v
    };
    assert_eq!(prefixes().len(), 2, "{:?}", prefixes());
    let r = commit_url(&url, &[text(&d2)], CommitOptions::default(), &t).unwrap();
    assert_eq!((r.number, r.parts, r.len), (2, 2, 12), "{r:?}");
    assert!(r.ids[0].starts_with("p-"), "{r:?}");
    assert_eq!(prefixes().len(), 2, "pushed twice: {:?}", prefixes());
    for p in prefixes() {
        assert!(parts_dir.join(&p).join("_source").is_file(), "{p}");
    }
    check(
        &open(&server, &url, &tmp.path().join("cache")).unwrap(),
        &model,
    );

    // A claim whose push never came (a committer killed between the two) is garbage with its
    // part's id; named parts keep their records.
    let orphan = parts_dir.join("orphan");
    std::fs::create_dir_all(&orphan).unwrap();
    std::fs::copy(parts_dir.join("p/_source"), orphan.join("_source")).unwrap();
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
    let report = zrecord::collection::gc(
        &url,
        std::time::Duration::from_secs(60),
        &zrecord::collection::GcOptions::new()
            .now(later)
            .store(server.options()),
    )
    .unwrap();
    assert_eq!(report.removed, ["orphan"], "{report:?}");
    assert_eq!(prefixes().len(), 2, "{:?}", prefixes());
    for p in prefixes() {
        assert!(parts_dir.join(&p).join("_source").is_file(), "{p}");
    }
}
