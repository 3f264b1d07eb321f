//! Committer processes racing on one local collection all land: with 4 processes each making
//! several commits of their own parts at once, the final manifest holds every part exactly
//! once, the manifests are numbered 1..=M without a gap (one per commit), and each manifest's
//! parts begin with the previous manifest's (no commit lost on a rebase).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use zrecord::{DType, Dataset, Field, Schema, Writer, WriterConfig};

const CHILD_ENV: &str = "ZRECORD_TEST_COLLECTION_RACE_CHILD";
const COMMITTERS: usize = 4;
const COMMITS: usize = 4;

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

/// The child half: committer `k` makes its parts, waits for the start signal, then commits.
#[test]
fn child_commits_its_parts() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        println!("child_commits_its_parts: run only as a child of racing_committers_all_land");
        return;
    };
    let (root, rest) = spec.split_once('|').unwrap();
    let (k, scratch) = rest.split_once('|').unwrap();
    let k: usize = k.parse().unwrap();
    let scratch = Path::new(scratch);
    let parts: Vec<Vec<PathBuf>> = (0..COMMITS)
        .map(|c| names(k, c).iter().map(|n| make(scratch, n)).collect())
        .collect();
    let go = Path::new(root).with_extension("go");
    while !go.exists() {
        std::thread::sleep(Duration::from_millis(1));
    }
    for p in parts {
        zrecord::collection::commit(root, &p, Default::default()).unwrap();
    }
}

/// The manifests of `root`, by number, as JSON.
fn manifests(root: &Path) -> Vec<(u64, serde_json::Value)> {
    let mut out: Vec<(u64, serde_json::Value)> = std::fs::read_dir(root.join("_collection"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter_map(|name| {
            let n: u64 = name.strip_suffix(".json")?.parse().ok()?;
            let bytes = std::fs::read(root.join("_collection").join(&name)).unwrap();
            let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            Some((n, v))
        })
        .collect();
    out.sort_by_key(|(n, _)| *n);
    out
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
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("c");
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
                    format!("{}|{k}|{}", root.display(), scratch.display()),
                )
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    // Let every child make its parts, then start them together.
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(root.with_extension("go"), b"").unwrap();
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a committer failed");
    }

    let all = manifests(&root);
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
    // Each committer's commits are in its order, and each commit's parts together, in order.
    for k in 0..COMMITTERS {
        let mine: Vec<&String> = last
            .iter()
            .filter(|id| id.starts_with(&format!("w{k}-")))
            .collect();
        let expect: Vec<String> = (0..COMMITS).flat_map(|c| names(k, c)).collect();
        assert_eq!(mine, expect.iter().collect::<Vec<_>>());
    }
    // And it reads: every part's records, in manifest order.
    let ds = Dataset::open(&root).unwrap();
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
