//! What is not there is named: `info`, `verify` and `cat` on a path that is not a dataset say
//! so and name the path; `cat --field` with an unknown field lists the dataset's fields; an
//! unknown `ZRECORD_IO` value is an error, not silently ignored.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod cli_support;

use cli_support::{zrecord, zrecord_env, zrecord_ok};

fn fails_with(args: &[&str], env: &[(&str, &str)], want: &[&str]) {
    let r = zrecord_env(args, env);
    assert_eq!(r.code, Some(1), "{args:?}: {}", r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "{args:?}: {}", r.stderr);
    for w in want {
        assert!(r.stderr.contains(w), "{args:?}: {:?} lacks {w:?}", r.stderr);
    }
}

#[test]
fn a_path_that_is_not_a_dataset_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nowhere");
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let file = tmp.path().join("file.npy");
    std::fs::write(&file, b"not a dataset").unwrap();
    for (path, why) in [
        (&missing, "no such file or directory"),
        (&empty, "no meta.json"),
        (&file, "not a directory"),
    ] {
        let p = path.to_str().unwrap();
        for args in [
            vec!["info", p],
            vec!["verify", p],
            vec!["cat", p, "--index", "0"],
        ] {
            fails_with(&args, &[], &[p, "is not a zrecord dataset", why]);
        }
    }
}

#[test]
fn an_unknown_field_lists_the_fields() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let d = dir.to_str().unwrap();
    zrecord_ok(&["bench", "make", d, "--records", "3", "--record-bytes", "8"]);
    fails_with(
        &["cat", d, "--index", "0", "--field", "nope"],
        &[],
        &["\"nope\"", "has fields data"],
    );
    assert!(zrecord(&["cat", d, "--index", "0", "--field", "data"]).ok);
}

#[test]
fn an_unknown_zrecord_io_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let d = dir.to_str().unwrap();
    zrecord_ok(&["bench", "make", d, "--records", "3", "--record-bytes", "8"]);
    for args in [
        vec!["info", d],
        vec!["verify", d],
        vec!["cat", d, "--index", "0"],
    ] {
        fails_with(
            &args,
            &[("ZRECORD_IO", "urnig")],
            &["ZRECORD_IO", "\"urnig\"", "psync"],
        );
    }
    for ok in ["psync", "mmap", "uring", "auto", ""] {
        let r = zrecord_env(&["cat", d, "--index", "2"], &[("ZRECORD_IO", ok)]);
        assert!(r.ok, "ZRECORD_IO={ok:?}: {}", r.stderr);
    }
}
