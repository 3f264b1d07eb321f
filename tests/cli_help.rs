//! Every `zrecord` subcommand answers `--help` with exit status 0 and a usage text.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod cli_support;

use cli_support::zrecord;

#[test]
fn every_subcommand_has_help() {
    for cmd in [
        &[][..],
        &["convert"][..],
        &["convert", "npy"][..],
        &["convert", "images"][..],
        &["convert", "webdataset"][..],
        &["info"][..],
        &["verify"][..],
        &["cat"][..],
        &["rebalance"][..],
        &["bench"][..],
        &["bench", "make"][..],
        &["bench", "gather"][..],
        &["bench", "loader"][..],
    ] {
        let mut args: Vec<&str> = cmd.to_vec();
        args.push("--help");
        let r = zrecord(&args);
        assert!(r.ok, "{cmd:?} --help: {}", r.stderr);
        let out = r.stdout_str();
        assert!(out.contains("Usage: zrecord"), "{cmd:?}: {out}");
    }
}

#[test]
fn an_unknown_subcommand_is_a_one_line_error() {
    let r = zrecord(&["frobnicate"]);
    assert_eq!(r.code, Some(2));
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
}
