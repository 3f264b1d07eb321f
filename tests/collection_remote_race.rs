//! Committer processes racing on one collection on a store whose conditional create is atomic
//! (moto's server) all land: every part exactly once in the final manifest, manifests numbered
//! 1..=M without a gap (one per commit), each extending the one before (no commit lost on a
//! rebase); and a store that ignores conditional creates (Garage) is refused unless the
//! committer declares it is the single writer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
#![allow(
    clippy::duplicate_mod,
    reason = "support/moto.rs and support/garage.rs each include support/s3.rs, as this file does"
)]

#[path = "support/garage.rs"]
mod garage;
#[path = "support/moto.rs"]
mod moto;
#[path = "support/s3.rs"]
mod s3;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::{ObjectStore, ObjectStoreExt};
use zrecord::collection::{commit_url, CommitOptions};
use zrecord::remote::{push, RemoteConfig, TransferOptions};
use zrecord::{DType, Error, Field, ReadConfig, Schema, Writer, WriterConfig};

const CHILD_ENV: &str = "ZRECORD_TEST_REMOTE_COLLECTION_RACE_CHILD";
const COMMITTERS: usize = 4;
const COMMITS: usize = 3;

/// The parts of commit `c` of committer `k`: one or two (their names say whose).
fn names(k: usize, c: usize) -> Vec<String> {
    (0..1 + (k + c) % 2)
        .map(|j| format!("w{k}-c{c}-p{j}"))
        .collect()
}

fn make(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let schema = Schema::new().field(Field::new("x", DType::Bytes));
    let mut w = Writer::create(&path, &schema, WriterConfig::default()).unwrap();
    for i in 0..3u8 {
        w.append(&[format!("{name}/{i}").into_bytes()]).unwrap();
    }
    w.commit().unwrap();
    path
}

/// The child half: committer `k` makes its parts, waits for the start signal, then commits;
/// the first part of each odd commit it pushes under parts/ itself and gives by URL.
#[test]
fn child_commits_its_parts() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        println!("child_commits_its_parts: run only as a child of racing_committers_all_land");
        return;
    };
    let f: Vec<&str> = spec.split('|').collect();
    let (url, endpoint, k, scratch, go) = (f[0], f[1], f[2], Path::new(f[3]), Path::new(f[4]));
    let k: usize = k.parse().unwrap();
    let t = TransferOptions::default().store(s3::options_for(endpoint));
    let parts: Vec<Vec<PathBuf>> = (0..COMMITS)
        .map(|c| names(k, c).iter().map(|n| make(scratch, n)).collect())
        .collect();
    while !go.exists() {
        std::thread::sleep(Duration::from_millis(1));
    }
    for (c, p) in parts.iter().enumerate() {
        let mut given: Vec<String> = p.iter().map(|d| d.display().to_string()).collect();
        if c % 2 == 1 {
            let name = p[0].file_name().unwrap().to_str().unwrap();
            let part_url = format!("{url}/parts/{name}");
            push(&p[0], &part_url, &t).unwrap();
            given[0] = part_url;
        }
        let r = commit_url(url, &given, CommitOptions::default(), &t).unwrap();
        assert_eq!(r.ids, names(k, c));
    }
}

/// The manifests of the collection at `prefix` on moto, by number, as JSON.
fn manifests(server: &moto::Moto, prefix: &str) -> Vec<(u64, serde_json::Value)> {
    let store = AmazonS3Builder::new()
        .with_endpoint(&server.endpoint)
        .with_bucket_name(moto::BUCKET)
        .with_access_key_id("zrecord")
        .with_secret_access_key("zrecord-secret")
        .with_region("us-east-1")
        .with_allow_http(true)
        .with_virtual_hosted_style_request(false)
        .build()
        .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        use futures::TryStreamExt;
        let dir = object_store::path::Path::from(format!("{prefix}/_collection"));
        let listed: Vec<_> = store.list(Some(&dir)).try_collect().await.unwrap();
        let mut out = Vec::new();
        for meta in listed {
            let name = meta.location.filename().unwrap().to_string();
            let n: u64 = name.strip_suffix(".json").unwrap().parse().unwrap();
            let bytes = store
                .get(&meta.location)
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            out.push((n, serde_json::from_slice(&bytes).unwrap()));
        }
        out.sort_by_key(|(n, _)| *n);
        out
    })
}

fn ids(v: &serde_json::Value) -> Vec<String> {
    v["collection"]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn racing_committers_all_land() {
    let server = moto::Moto::start();
    let tmp = tempfile::tempdir().unwrap();
    let prefix = "raced/coll";
    let url = server.url(prefix);
    let go = tmp.path().join("go");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..COMMITTERS)
        .map(|k| {
            let scratch = tmp.path().join(format!("scratch-{k}"));
            std::fs::create_dir(&scratch).unwrap();
            Command::new(&exe)
                .args([
                    "--exact",
                    "child_commits_its_parts",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(
                    CHILD_ENV,
                    format!(
                        "{url}|{}|{k}|{}|{}",
                        server.endpoint,
                        scratch.display(),
                        go.display()
                    ),
                )
                .stdin(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    // Let every child make its parts, then start them together.
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(&go, b"").unwrap();
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a committer failed");
    }

    let all = manifests(&server, prefix);
    let numbers: Vec<u64> = all.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        numbers,
        (1..=(COMMITTERS * COMMITS) as u64).collect::<Vec<_>>(),
        "one manifest per commit, numbered without a gap"
    );
    for w in all.windows(2) {
        let (before, after) = (ids(&w[0].1), ids(&w[1].1));
        assert!(
            after.len() > before.len() && after[..before.len()] == before[..],
            "manifest {} does not extend manifest {}",
            w[1].0,
            w[0].0
        );
    }
    let last = ids(&all.last().unwrap().1);
    let want: BTreeSet<String> = (0..COMMITTERS)
        .flat_map(|k| (0..COMMITS).flat_map(move |c| names(k, c)))
        .collect();
    assert_eq!(last.len(), want.len(), "a part is listed twice: {last:?}");
    assert_eq!(last.iter().cloned().collect::<BTreeSet<_>>(), want);
    for k in 0..COMMITTERS {
        let mine: Vec<&String> = last
            .iter()
            .filter(|id| id.starts_with(&format!("w{k}-")))
            .collect();
        let expect: Vec<String> = (0..COMMITS).flat_map(|c| names(k, c)).collect();
        assert_eq!(mine, expect.iter().collect::<Vec<_>>());
    }
    // And it reads: every part's records, in manifest order.
    let ds = zrecord::remote::open(
        &url,
        ReadConfig::default(),
        RemoteConfig::default()
            .store(server.options())
            .cache_dir(tmp.path().join("cache")),
    )
    .unwrap();
    assert_eq!(ds.len(), 3 * want.len() as u64);
    let batch = ds
        .gather_blocking(&(0..ds.len()).collect::<Vec<_>>())
        .unwrap();
    for (p, id) in last.iter().enumerate() {
        for i in 0..3 {
            assert_eq!(
                batch.get(p * 3 + i, 0).unwrap(),
                format!("{id}/{i}").as_bytes()
            );
        }
    }
}

#[test]
fn a_store_that_ignores_conditional_creates_is_refused_without_single_writer() {
    let cluster = garage::Garage::start();
    let tmp = tempfile::tempdir().unwrap();
    let part = make(tmp.path(), "p0");
    let part = part.display().to_string();
    let url = cluster.url("colls/g");
    let t = TransferOptions::default().store(cluster.options(0));
    match commit_url(&url, &[&part], CommitOptions::default(), &t) {
        Err(Error::ConditionalCreateIgnored { url: u, reason }) => {
            assert_eq!(u, url);
            assert!(
                reason.contains("ignores conditional creates") && reason.contains("single-writer"),
                "{reason}"
            );
            // Nothing was pushed or committed.
            let opened = zrecord::remote::open(
                &url,
                ReadConfig::default(),
                RemoteConfig::default()
                    .store(cluster.options(0))
                    .cache_dir(tmp.path().join("cache")),
            );
            assert!(
                matches!(opened, Err(Error::NotADataset { .. })),
                "{opened:?}"
            );
        }
        Ok(r) => {
            // A Garage release that honours If-None-Match: the probe lets it through.
            eprintln!("this garage honours conditional creates: {r:?}");
        }
        Err(e) => panic!("refused otherwise: {e}"),
    }
    // One committer that says so commits there.
    let r = commit_url(
        &url,
        &[&part],
        CommitOptions::default(),
        &t.clone().single_writer(true),
    )
    .unwrap();
    assert_eq!((r.number, r.len), (1, 3));
    let ds = zrecord::remote::open(
        &url,
        ReadConfig::default(),
        RemoteConfig::default()
            .store(cluster.options(0))
            .cache_dir(tmp.path().join("cache")),
    )
    .unwrap();
    assert_eq!(&ds.get(2).unwrap()[0][..], b"p0/2");
}
