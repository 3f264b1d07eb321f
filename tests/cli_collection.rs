//! `zrecord collection commit ROOT PART...` commits parts (moving them under ROOT/parts/, or
//! pushing them under URL/parts/ on an object store) and `zrecord collection info ROOT`
//! reports the manifest number, each part's id, records and generation, and the total; `info`,
//! `verify` and `cat` work on the collection (a directory or a URL) as on a dataset;
//! `zrecord gc ROOT --older-than D` removes only the parts no manifest names older than D; and
//! `bench make --seed` makes parts whose bytes differ by seed; `push` and `pull` copy a whole
//! collection to a store and back, and `bench gather` and `bench loader` run on one.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod cli_support;
#[path = "support/s3.rs"]
mod s3;

use cli_support::{zrecord, zrecord_env, zrecord_ok};

#[test]
fn commit_info_verify_and_cat_on_a_collection() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |name: &str| tmp.path().join(name).display().to_string();
    for (name, seed, records) in [("a", "1", "5"), ("b", "2", "7"), ("c", "2", "3")] {
        zrecord_ok(&[
            "bench",
            "make",
            &p(name),
            "--records",
            records,
            "--record-bytes",
            "64",
            "--seed",
            seed,
        ]);
    }
    // Different seeds, different bytes; the same seed, the same first records.
    let first = |dir: &str| zrecord_ok(&["cat", &p(dir), "--index", "0", "--format", "raw"]).stdout;
    assert_ne!(first("a"), first("b"));
    assert_eq!(first("b"), first("c"));
    let (a0, b0) = (first("a"), first("b"));

    let root = p("coll");
    let r = zrecord_ok(&["collection", "commit", &root, &p("a"), &p("b"), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["manifest"], 1);
    assert_eq!(v["len"], 12);
    assert_eq!(v["added"], serde_json::json!(["a", "b"]));
    assert!(
        !tmp.path().join("a").exists(),
        "a part is moved under the root"
    );
    let r = zrecord_ok(&["collection", "commit", &root, &p("c")]);
    assert!(r.stdout_str().contains("manifest 2"), "{}", r.stdout_str());
    // Committing a part that is already in the collection adds nothing.
    let again = tmp.path().join("coll/parts/c").display().to_string();
    let r = zrecord_ok(&["collection", "commit", &root, &again]);
    assert!(
        r.stdout_str().contains("already committed"),
        "{}",
        r.stdout_str()
    );

    let r = zrecord_ok(&["collection", "info", &root, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["manifest"], 2);
    assert_eq!(v["len"], 15);
    let parts = v["parts"].as_array().unwrap();
    let ids: Vec<&str> = parts.iter().map(|p| p["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["a", "b", "c"]);
    let lens: Vec<u64> = parts.iter().map(|p| p["len"].as_u64().unwrap()).collect();
    assert_eq!(lens, [5, 7, 3]);
    assert!(parts.iter().all(|p| p["generation"].as_u64().unwrap() >= 1));
    let text = zrecord_ok(&["collection", "info", &root]).stdout_str();
    assert!(
        text.contains("manifest    2") && text.contains("records     15"),
        "{text}"
    );

    let v: serde_json::Value =
        serde_json::from_slice(&zrecord_ok(&["info", &root, "--json"]).stdout).unwrap();
    assert_eq!(
        (v["len"].as_u64(), v["parts"].as_u64()),
        (Some(15), Some(3))
    );
    assert_eq!(v["generation"], 2);
    assert_eq!(v["fields"][0]["present"], 15);
    let r = zrecord_ok(&["verify", &root]);
    assert!(r.stdout_str().contains("15 records"), "{}", r.stdout_str());

    // Global indices: record 0 is a's first, record 5 is b's first.
    let cat = |i: &str| zrecord_ok(&["cat", &root, "--index", i, "--format", "raw"]).stdout;
    assert_eq!(cat("0"), a0);
    assert_eq!(cat("5"), b0);
    assert_eq!(cat("12"), b0, "c (seed 2) starts at 12");
    let r = zrecord(&["cat", &root, "--index", "15"]);
    assert!(!r.ok && r.stderr.contains("out of range"), "{}", r.stderr);

    // A damaged record in a part: verify names it and fails.
    let chunk = std::fs::read_dir(tmp.path().join("coll/parts/b/chunk"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut bytes = std::fs::read(&chunk).unwrap();
    bytes[10] ^= 0xff;
    std::fs::write(&chunk, bytes).unwrap();
    let r = zrecord(&["verify", &root]);
    assert!(!r.ok, "verify passed a damaged part");
    assert!(r.stderr.contains("parts/b/chunk"), "{}", r.stderr);
}

#[test]
fn a_bad_commit_is_one_line_naming_the_part() {
    let tmp = tempfile::tempdir().unwrap();
    let junk = tmp.path().join("junk");
    std::fs::create_dir(&junk).unwrap();
    let root = tmp.path().join("coll");
    let r = zrecord(&[
        "collection".as_ref(),
        "commit".as_ref(),
        root.as_os_str(),
        junk.as_os_str(),
    ]);
    assert_eq!(r.code, Some(1));
    assert!(
        r.stderr.contains("junk") && r.stderr.contains("not a zrecord dataset"),
        "{}",
        r.stderr
    );
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
}

#[test]
fn commit_to_a_file_url_commits_to_its_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |name: &str| tmp.path().join(name).display().to_string();
    zrecord_ok(&[
        "bench",
        "make",
        &p("a"),
        "--records",
        "3",
        "--record-bytes",
        "8",
    ]);
    let url = format!("file://{}", p("coll"));
    zrecord_ok(&["collection", "commit", &url, &p("a")]);
    assert!(tmp.path().join("coll/_collection").is_dir());
    assert!(tmp.path().join("coll/parts/a/meta.json").exists());
    zrecord_ok(&["gc", &url, "--older-than", "1h"]);
}

/// Sets the modification time of `path` and everything under it to `t`.
fn set_times(path: &std::path::Path, t: std::time::SystemTime) {
    if path.is_dir() {
        for e in std::fs::read_dir(path).unwrap() {
            set_times(&e.unwrap().path(), t);
        }
    }
    std::fs::File::open(path).unwrap().set_modified(t).unwrap();
}

#[test]
fn gc_removes_old_parts_no_manifest_names() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |name: &str| tmp.path().join(name).display().to_string();
    let make = |dir: &str| {
        zrecord_ok(&[
            "bench",
            "make",
            dir,
            "--records",
            "4",
            "--record-bytes",
            "32",
        ]);
    };
    make(&p("a"));
    let root = p("coll");
    zrecord_ok(&["collection", "commit", &root, &p("a")]);
    // Two parts placed under parts/ and never committed: one ten days old, one fresh.
    make(&p("coll/parts/stale"));
    make(&p("coll/parts/fresh"));
    let ten_days = std::time::Duration::from_secs(10 * 86_400);
    set_times(
        &tmp.path().join("coll/parts/stale"),
        std::time::SystemTime::now() - ten_days,
    );
    // The committed part is as old: a manifest names it, so it stays.
    set_times(
        &tmp.path().join("coll/parts/a"),
        std::time::SystemTime::now() - ten_days,
    );

    // The limit is required, and checked.
    let r = zrecord(&["gc", &root]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    let r = zrecord(&["gc", &root, "--older-than", "7 days"]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);

    let r = zrecord_ok(&["gc", &root, "--older-than", "7d", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["removed"], serde_json::json!(["stale"]));
    assert_eq!(v["kept"], serde_json::json!(["a", "fresh"]));
    assert!(v["bytes_freed"].as_u64().unwrap() > 0);
    assert!(!tmp.path().join("coll/parts/stale").exists());
    let r = zrecord_ok(&["gc", &root, "--older-than", "30s"]);
    assert!(
        r.stdout_str().contains("removed 0 part(s)"),
        "{}",
        r.stdout_str()
    );
    let r = zrecord_ok(&["verify", &root]);
    assert!(r.stdout_str().contains("4 records"), "{}", r.stdout_str());
}

#[test]
fn commit_info_verify_cat_and_gc_on_a_collection_url() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let env = [
        ("AWS_ENDPOINT", server.endpoint.as_str()),
        ("AWS_ACCESS_KEY_ID", "zrecord"),
        ("AWS_SECRET_ACCESS_KEY", "zrecord-secret"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ALLOW_HTTP", "true"),
        ("ZRECORD_CACHE_DIR", cache.to_str().unwrap()),
    ];
    let ok = |args: &[&str]| {
        let r = zrecord_env(args, &env);
        assert!(r.ok, "zrecord {args:?} failed: {}", r.stderr);
        r
    };
    let p = |name: &str| tmp.path().join(name).display().to_string();
    for (name, seed, records) in [("a", "1", "5"), ("b", "2", "7")] {
        ok(&[
            "bench",
            "make",
            &p(name),
            "--records",
            records,
            "--record-bytes",
            "64",
            "--seed",
            seed,
        ]);
    }
    let first = |dir: &str| ok(&["cat", dir, "--index", "0", "--format", "raw"]).stdout;
    let (a0, b0) = (first(&p("a")), first(&p("b")));
    let url = server.url("cli/coll");
    // b is pushed under parts/ by its writer, a is pushed by the commit.
    ok(&["push", &p("b"), &format!("{url}/parts/b")]);
    let r = ok(&[
        "collection",
        "commit",
        &url,
        &p("a"),
        &format!("{url}/parts/b"),
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(
        (v["manifest"].as_u64(), v["len"].as_u64()),
        (Some(1), Some(12))
    );
    assert_eq!(v["added"], serde_json::json!(["a", "b"]));
    let r = ok(&["collection", "commit", &url, &p("a")]);
    assert!(
        r.stdout_str().contains("already committed"),
        "{}",
        r.stdout_str()
    );

    let v: serde_json::Value =
        serde_json::from_slice(&ok(&["collection", "info", &url, "--json"]).stdout).unwrap();
    assert_eq!(v["manifest"], 1);
    let ids: Vec<&str> = v["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a", "b"]);
    let v: serde_json::Value =
        serde_json::from_slice(&ok(&["info", &url, "--json"]).stdout).unwrap();
    assert_eq!(
        (v["len"].as_u64(), v["parts"].as_u64()),
        (Some(12), Some(2))
    );
    let r = ok(&["verify", &url]);
    assert!(r.stdout_str().contains("12 records"), "{}", r.stdout_str());
    let cat = |i: &str| ok(&["cat", &url, "--index", i, "--format", "raw"]).stdout;
    assert_eq!(cat("0"), a0);
    assert_eq!(cat("5"), b0);

    // Nothing unnamed, nothing removed.
    let v: serde_json::Value =
        serde_json::from_slice(&ok(&["gc", &url, "--older-than", "1s", "--json"]).stdout).unwrap();
    assert_eq!(v["removed"], serde_json::json!([]));
    assert_eq!(v["kept"], serde_json::json!(["a", "b"]));
    // A store that ignores conditional creates is refused without --single-writer; s3s-fs
    // checks them, so here the flag only skips the probe.
    let r = ok(&["collection", "commit", &url, &p("a"), "--single-writer"]);
    assert!(
        r.stdout_str().contains("already committed"),
        "{}",
        r.stdout_str()
    );
}

/// `zrecord bench gather|loader DIR_OR_URL --json` over a small collection: the JSON parses and
/// counts the records asked for.
fn bench_on(target: &str, env: &[(&str, &str)]) {
    let ok = |args: &[&str]| {
        let r = zrecord_env(args, env);
        assert!(r.ok, "zrecord {args:?} failed: {}", r.stderr);
        serde_json::from_slice::<serde_json::Value>(&r.stdout)
            .unwrap_or_else(|e| panic!("zrecord {args:?}: {e}: {}", r.stdout_str()))
    };
    let g = ok(&[
        "bench",
        "gather",
        target,
        "--batch",
        "4",
        "--batches",
        "5",
        "--json",
    ]);
    assert_eq!(
        (g["records"].as_u64(), g["batches"].as_u64()),
        (Some(20), Some(5)),
        "{g}"
    );
    assert!(g["bytes"].as_u64().unwrap() > 0, "{g}");
    let l = ok(&[
        "bench",
        "loader",
        target,
        "--batch",
        "4",
        "--batches",
        "6",
        "--workers",
        "2",
        "--rounds",
        "1",
        "--json",
    ]);
    assert_eq!(
        (l["batch"].as_u64(), l["batches"].as_u64()),
        (Some(4), Some(6)),
        "{l}"
    );
    assert!(l["records_per_s"].as_f64().unwrap() > 0.0, "{l}");
    assert!(l["gather_records_per_s"].as_f64().unwrap() > 0.0, "{l}");
}

#[test]
fn push_pull_and_bench_of_a_collection() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let env = [
        ("AWS_ENDPOINT", server.endpoint.as_str()),
        ("AWS_ACCESS_KEY_ID", "zrecord"),
        ("AWS_SECRET_ACCESS_KEY", "zrecord-secret"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ALLOW_HTTP", "true"),
        ("ZRECORD_CACHE_DIR", cache.to_str().unwrap()),
    ];
    let ok = |args: &[&str]| {
        let r = zrecord_env(args, &env);
        assert!(r.ok, "zrecord {args:?} failed: {}", r.stderr);
        r
    };
    let json =
        |args: &[&str]| -> serde_json::Value { serde_json::from_slice(&ok(args).stdout).unwrap() };
    let p = |name: &str| tmp.path().join(name).display().to_string();
    for (name, seed, records) in [("a", "1", "9"), ("b", "2", "14")] {
        ok(&[
            "bench",
            "make",
            &p(name),
            "--records",
            records,
            "--record-bytes",
            "64",
            "--seed",
            seed,
        ]);
    }
    let root = p("coll");
    ok(&["collection", "commit", &root, &p("a")]);
    ok(&["collection", "commit", &root, &p("b")]);
    let url = server.url("cli/pushed");

    let r = json(&["push", &root, &url, "--json"]);
    assert_eq!(
        (
            r["generation"].as_u64(),
            r["slot"].as_u64(),
            r["parts"].as_u64()
        ),
        (Some(2), Some(1), Some(2)),
        "{r}"
    );
    assert_eq!(r["already_done"], false, "{r}");
    let text = ok(&["push", &root, &url]).stdout_str();
    assert!(
        text.contains("collection of 2 part(s)") && text.contains("(already done)"),
        "{text}"
    );
    let v = json(&["info", &url, "--json"]);
    assert_eq!(
        (v["len"].as_u64(), v["parts"].as_u64()),
        (Some(23), Some(2))
    );

    let back = p("back");
    let r = json(&["pull", &url, &back, "--json"]);
    assert_eq!(
        (r["parts"].as_u64(), r["already_done"].as_bool()),
        (Some(2), Some(false))
    );
    let r = json(&["pull", &url, &back, "--json"]);
    assert_eq!(r["already_done"], true, "{r}");
    let v = json(&["collection", "info", &back, "--json"]);
    assert_eq!(
        (v["manifest"].as_u64(), v["len"].as_u64()),
        (Some(1), Some(23))
    );
    let cat = |at: &str, i: &str| ok(&["cat", at, "--index", i, "--format", "raw"]).stdout;
    for i in ["0", "8", "9", "22"] {
        assert_eq!(cat(&back, i), cat(&root, i), "record {i}");
    }
    ok(&["verify", &back]);

    // bench gather and loader on the collection, locally and on the store.
    bench_on(&root, &env);
    bench_on(&url, &env);
}
