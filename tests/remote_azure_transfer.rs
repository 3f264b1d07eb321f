//! A dataset pushed to Azurite and pulled back, by the library and by the CLI (credentials and
//! endpoint from the usual `AZURE_*` variables), is the original: the same files, byte for
//! byte, and the CLI reads the `az://` URL as it reads the directory.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/azurite.rs"]
mod azurite;
mod cli_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cli_support::zrecord_env;
use serde_json::Value;
use zrecord::remote::{pull, push, TransferOptions};
use zrecord::{Codec, DType, Field, Schema, Writer, WriterConfig};

fn write(dir: &Path) {
    let schema = Schema::new()
        .field(Field::new("x", DType::U8).codec(Codec::Deflate))
        .field(Field::new("tokens", DType::U16))
        .chunk_size_bytes(64 << 10);
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    for i in 0..1500u64 {
        let x = vec![(i % 251) as u8; (i * 13 % 300) as usize];
        let t: Vec<u8> = (0..(i % 40) as u16)
            .flat_map(|k| (k ^ i as u16).to_le_bytes())
            .collect();
        w.append(&[x, t]).unwrap();
    }
    w.commit().unwrap();
}

/// The files of a dataset directory that a pull writes (the commit's), with their bytes.
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                stack.push(p);
            } else if !name.starts_with('.') && !name.ends_with(".lock") {
                out.insert(
                    p.strip_prefix(dir).unwrap().to_path_buf(),
                    std::fs::read(&p).unwrap(),
                );
            }
        }
    }
    out
}

#[test]
fn push_then_pull_by_library_and_by_cli() {
    let server = azurite::Azurite::start();
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("ds");
    write(&local);

    // The library.
    let url = server.url("lib/ds");
    let opts = TransferOptions::default().store(server.options());
    let pushed = push(&local, &url, &opts).unwrap();
    assert_eq!((pushed.slot, pushed.already_done), (1, false));
    assert!(push(&local, &url, &opts).unwrap().already_done);
    let pulled = tmp.path().join("pulled");
    let got = pull(&url, &pulled, &opts).unwrap();
    assert_eq!(got.slot, 1);
    let want = files(&local);
    let have = files(&pulled);
    for (name, bytes) in &have {
        assert_eq!(want.get(name), Some(bytes), "{}", name.display());
    }
    assert!(have.keys().any(|n| n.starts_with("chunk")), "{have:?}");

    // The CLI, configured by the environment only.
    let endpoint = format!("{}/{}", server.endpoint, azurite::ACCOUNT);
    let cache = tmp.path().join("cache");
    let env = [
        ("AZURE_STORAGE_ACCOUNT_NAME", azurite::ACCOUNT),
        ("AZURE_STORAGE_ACCOUNT_KEY", azurite::ACCOUNT_KEY),
        ("AZURE_STORAGE_ENDPOINT", endpoint.as_str()),
        ("AZURE_ALLOW_HTTP", "true"),
        ("ZRECORD_CACHE_DIR", cache.to_str().unwrap()),
    ];
    let ok = |args: &[&str]| {
        let r = zrecord_env(args, &env);
        assert!(r.ok, "zrecord {args:?} failed: {}", r.stderr);
        r
    };
    let cli_url = server.url("cli/ds");
    let pushed: Value =
        serde_json::from_slice(&ok(&["push", local.to_str().unwrap(), &cli_url, "--json"]).stdout)
            .unwrap();
    assert_eq!(pushed["slot"], 1);
    let remote: Value = serde_json::from_slice(&ok(&["info", &cli_url, "--json"]).stdout).unwrap();
    let mine: Value =
        serde_json::from_slice(&ok(&["info", local.to_str().unwrap(), "--json"]).stdout).unwrap();
    assert_eq!(remote["len"], mine["len"]);
    assert_eq!(remote["fields"], mine["fields"]);
    assert_eq!(
        ok(&["cat", &cli_url, "--index", "777"]).stdout,
        ok(&["cat", local.to_str().unwrap(), "--index", "777"]).stdout
    );
    let cli_pulled = tmp.path().join("cli-pulled");
    ok(&["pull", &cli_url, cli_pulled.to_str().unwrap()]);
    assert_eq!(files(&cli_pulled), have);
}
