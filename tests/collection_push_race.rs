//! Two `zrecord push` processes of one local collection to one URL at once, on a store whose
//! conditional create is atomic (moto's server), both succeed: one creates the manifest, the
//! other reports that identical result as already done; the store ends with one manifest
//! listing each part exactly once, in the local order, and reads as the local collection. A
//! store that ignores conditional creates (Garage) is refused unless the push declares it is
//! the single writer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
#![allow(
    clippy::duplicate_mod,
    reason = "support/moto.rs and support/garage.rs each include support/s3.rs"
)]

#[path = "support/garage.rs"]
mod garage;
#[path = "support/moto.rs"]
mod moto;
#[path = "support/parts.rs"]
mod parts;

use std::path::Path;
use std::process::{Command, Stdio};

use zrecord::collection::{commit, CommitOptions};
use zrecord::remote::{push, RemoteConfig, TransferOptions};
use zrecord::{DType, Dataset, Error, ReadConfig};

/// A part of `n` records at `dir`, whose bytes follow from `seed`.
use parts::records;

fn make(dir: &Path, seed: u8, n: u32) {
    parts::write(dir, DType::Bytes, Some(8 << 10), n, |i| {
        vec![seed.wrapping_add(i as u8); 100 + (i as usize * 7) % 400]
    });
}

#[test]
fn two_pushes_of_one_collection_at_once_both_succeed_with_one_result() {
    let server = moto::Moto::start();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("coll");
    let names = ["p0", "p1", "p2", "p3"];
    for (k, name) in names.iter().enumerate() {
        make(&tmp.path().join(name), k as u8 * 50, 300 + k as u32 * 40);
    }
    let dirs: Vec<_> = names.iter().map(|n| tmp.path().join(n)).collect();
    commit(&root, &dirs[..2], CommitOptions::default()).unwrap();
    commit(&root, &dirs[2..], CommitOptions::default()).unwrap();
    let local = records(&Dataset::open(&root).unwrap());

    for round in 0..3 {
        let url = server.url(&format!("raced/{round}"));
        let push = || {
            Command::new(env!("CARGO_BIN_EXE_zrecord"))
                .args(["push", root.to_str().unwrap(), &url, "--json"])
                .args(["--concurrency", "2"])
                .env("AWS_ENDPOINT", &server.endpoint)
                .env("AWS_ACCESS_KEY_ID", "zrecord")
                .env("AWS_SECRET_ACCESS_KEY", "zrecord-secret")
                .env("AWS_REGION", "us-east-1")
                .env("AWS_ALLOW_HTTP", "true")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (a, b) = (push(), push());
        let mut done = 0;
        for child in [a, b] {
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(
                (r["slot"].as_u64(), r["parts"].as_u64()),
                (Some(1), Some(4))
            );
            if r["already_done"] == true {
                done += 1;
            }
        }
        // Exactly one created the manifest; the other found it listing its parts.
        assert_eq!(
            done, 1,
            "round {round}: {done} pushes report the manifest as there"
        );

        let ds = zrecord::remote::open(
            &url,
            ReadConfig::default(),
            RemoteConfig::default()
                .store(server.options())
                .cache_dir(tmp.path().join(format!("cache{round}"))),
        )
        .unwrap();
        assert_eq!(ds.snapshot().generation(), 1, "round {round}: one manifest");
        assert_eq!(ds.snapshot().part_ids(), names);
        assert!(records(&ds) == local, "round {round}: the records differ");
    }
}

#[test]
fn a_store_that_ignores_conditional_creates_is_refused_without_single_writer() {
    let cluster = garage::Garage::start();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("coll");
    make(&tmp.path().join("p0"), 3, 20);
    commit(&root, &[tmp.path().join("p0")], CommitOptions::default()).unwrap();
    let url = cluster.url("colls/pushed");
    let t = TransferOptions::default().store(cluster.options(0));
    let open = |cache: &str| {
        zrecord::remote::open(
            &url,
            ReadConfig::default(),
            RemoteConfig::default()
                .store(cluster.options(0))
                .cache_dir(tmp.path().join(cache)),
        )
    };
    match push(&root, &url, &t) {
        Err(Error::ConditionalCreateIgnored { url: u, reason }) => {
            assert_eq!(u, url);
            assert!(reason.contains("single-writer"), "{reason}");
            assert!(
                matches!(open("cache0"), Err(Error::NotADataset { .. })),
                "nothing was pushed"
            );
        }
        Ok(r) => eprintln!("this garage honours conditional creates: {r:?}"),
        Err(e) => panic!("refused otherwise: {e}"),
    }
    let r = push(&root, &url, &t.clone().single_writer(true)).unwrap();
    assert_eq!((r.slot, r.parts), (1, Some(1)));
    let ds = open("cache1").unwrap();
    assert!(records(&ds) == records(&Dataset::open(&root).unwrap()));
}
