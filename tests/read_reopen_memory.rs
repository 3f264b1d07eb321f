//! Opening and dropping a dataset again and again does not grow the process's memory: the
//! descriptor budget's ring forgets the chunks of dropped snapshots.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod support;

use support::bytes;
use zrecord::{Dataset, Writer, WriterConfig};

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    s.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 4096
}

#[test]
fn reopening_a_dataset_does_not_grow_memory() {
    let tmp = support::scratch();
    let dir = tmp.path().join("ds");
    let mut w = Writer::create(&dir, &support::schema(2048), WriterConfig::default()).unwrap();
    for i in 0..1000u64 {
        w.append(&[bytes(100, 2 * i), bytes(1200, 2 * i + 1)])
            .unwrap();
    }
    w.commit().unwrap();
    drop(w);
    let chunks = std::fs::read_dir(dir.join("chunk")).unwrap().count();
    assert!(chunks >= 1000, "{chunks} chunks");
    // Every load opens every chunk: the budget must hold them all (RLIMIT_NOFILE >= 8192).
    let budget = zrecord::diagnostics::descriptor_budget();
    assert!(
        budget > 2 * chunks,
        "the descriptor budget {budget} is too small for this test: raise RLIMIT_NOFILE"
    );
    for _ in 0..30 {
        drop(Dataset::open(&dir).unwrap());
    }
    let before = rss_bytes();
    for _ in 0..300 {
        drop(Dataset::open(&dir).unwrap());
    }
    let grown = rss_bytes().saturating_sub(before);
    // Before the ring forgot dropped snapshots, this grew by about 48 MiB.
    assert!(
        grown < 8 << 20,
        "300 opens and drops of a {chunks}-chunk dataset grew RSS by {} MiB",
        grown >> 20
    );
}
