//! The CLI reads datasets by URL: `zrecord push` publishes, `info`, `verify`, `cat` and `bench
//! gather` read `s3://…` as they read a directory, and `pull` fetches a copy back, against a
//! real S3 server (s3s-fs, started by the test), configured through the usual environment.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod cli_support;
#[path = "support/s3.rs"]
mod s3;

use cli_support::{write_npy, zrecord_env};
use serde_json::Value;

#[test]
fn push_then_read_by_url_then_pull() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..300u32 * 16)
        .flat_map(|k| (k as u16).to_le_bytes())
        .collect();
    let input = tmp.path().join("tokens.npy");
    write_npy(&input, 1, "<u2", false, &[300, 16], &data);
    let dir = tmp.path().join("ds");
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
    ok(&[
        "convert",
        input.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
    ]);
    let url = server.url("cli/tokens");
    let pushed: Value =
        serde_json::from_slice(&ok(&["push", dir.to_str().unwrap(), &url, "--json"]).stdout)
            .unwrap();
    assert_eq!(pushed["slot"], 1);
    assert_eq!(pushed["already_done"], false);
    let again: Value =
        serde_json::from_slice(&ok(&["push", dir.to_str().unwrap(), &url, "--json"]).stdout)
            .unwrap();
    assert_eq!(again["already_done"], true);

    let local: Value =
        serde_json::from_slice(&ok(&["info", dir.to_str().unwrap(), "--json"]).stdout).unwrap();
    let remote: Value = serde_json::from_slice(&ok(&["info", &url, "--json"]).stdout).unwrap();
    assert_eq!(remote["len"], local["len"]);
    assert_eq!(remote["fields"], local["fields"]);
    assert!(ok(&["verify", &url])
        .stdout_str()
        .contains("every checksum and invariant verified"));
    assert_eq!(
        ok(&["cat", &url, "--index", "7"]).stdout,
        ok(&["cat", dir.to_str().unwrap(), "--index", "7"]).stdout
    );
    let bench: Value = serde_json::from_slice(
        &ok(&[
            "bench",
            "gather",
            &url,
            "--batch",
            "64",
            "--batches",
            "20",
            "--json",
        ])
        .stdout,
    )
    .unwrap();
    assert!(bench["records_per_s"].as_f64().unwrap() > 0.0, "{bench}");

    let pulled = tmp.path().join("pulled");
    ok(&["pull", &url, pulled.to_str().unwrap()]);
    assert_eq!(
        ok(&["cat", pulled.to_str().unwrap(), "--index", "299"]).stdout,
        ok(&["cat", dir.to_str().unwrap(), "--index", "299"]).stdout
    );

    // A URL with nothing published is not a dataset: exit 1, one line naming it.
    let r = zrecord_env(&["info", &server.url("nothing/here")], &env);
    assert_eq!(r.code, Some(1));
    assert!(
        r.stderr.contains("s3://zrecord-test/nothing/here"),
        "{}",
        r.stderr
    );
}
