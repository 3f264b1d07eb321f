//! The product holds no test machinery: zrecord's `testing` feature exposes only the seams test machinery plugs into (the writer's file-system seam, the real file system, the read window's probes); the simulated and fault-injecting file systems and the fault proxy are the `zrecord-testing` crate's (issue #23, section 4).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::BTreeSet;
use std::path::Path;

/// Every name `zrecord::testing::` may hold.
const SEAM: &[&str] = &[
    // The writer's file-system seam and the real file system (src/io/vfs.rs).
    "Prefix",
    "StdFile",
    "StdFs",
    "Vfs",
    "VfsFile",
    "VfsLock",
    // Probes of the read engine's window, which only the library can see into.
    "read_window_announced",
    "read_window_files",
    "read_window_held",
];

/// The names under `zrecord::testing::` in `docs/public-api.txt`, the public surface CI checks
/// against the source (`.ci/public-api.py --check`).
fn testing_names() -> BTreeSet<String> {
    let list = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/public-api.txt");
    let text = std::fs::read_to_string(&list).unwrap();
    text.lines()
        .filter_map(|line| line.split_once("zrecord::testing::"))
        .map(|(_, rest)| {
            rest.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .collect()
}

#[test]
fn the_testing_feature_is_the_seam_and_nothing_else() {
    let names = testing_names();
    assert!(
        names.contains("Vfs") && names.contains("StdFs"),
        "the seam is missing from docs/public-api.txt: {names:?}"
    );
    let machinery: Vec<&String> = names
        .iter()
        .filter(|n| !SEAM.contains(&n.as_str()))
        .collect();
    assert!(
        machinery.is_empty(),
        "test machinery in the product (move it to the zrecord-testing crate): {machinery:?}"
    );
}
