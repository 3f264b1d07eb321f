//! The read window's kept `O_DIRECT` reads hold their chunk files open (that is what makes a
//! file's identity name it). Those descriptors must stay within the process's descriptor
//! budget: in a process limited to 64 descriptors, a loader announcing batches over many chunks
//! must not exhaust them (every later open failing with `EMFILE`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod support;

use std::path::Path;
use std::process::Command;
use support::{bytes, Rec, Rng};
use zrecord::pipeline::Source;
use zrecord::{Backend, Dataset, ReadConfig, Writer, WriterConfig};

const RECORDS: u64 = 600;
const LIMIT: &str = "64";
const CHILD: &str = "ZRECORD_WINDOW_FDS_DIR";

/// One record a 2 KiB chunk.
fn rec(i: u64) -> Rec {
    vec![bytes(100, 2 * i), bytes(1200, 2 * i + 1)]
}

fn build(dir: &Path) {
    let mut w = Writer::create(dir, &support::schema(2048), WriterConfig::default()).unwrap();
    for i in 0..RECORDS {
        w.append(&rec(i)).unwrap();
    }
    w.commit().unwrap();
}

#[test]
fn kept_reads_stay_within_the_descriptor_budget() {
    // A real disk: O_DIRECT is refused on tmpfs.
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir = tmp.path().join("ds");
    build(&dir);
    let me = std::env::current_exe().unwrap();
    let out = Command::new("prlimit")
        .arg(format!("--nofile={LIMIT}:{LIMIT}"))
        .arg(&me)
        .args([
            "--exact",
            "child_announces_many_chunks",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, &dir)
        .output()
        .unwrap();
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && log.contains("child: done"),
        "child under RLIMIT_NOFILE={LIMIT} failed:\n{log}"
    );
}

/// Descriptors open, or `None` if even that needs one too many.
fn open_fds() -> Option<usize> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count())
}

#[test]
fn child_announces_many_chunks() {
    let Some(dir) = std::env::var_os(CHILD) else {
        return;
    };
    for (b, backend) in [Backend::Uring, Backend::Psync].into_iter().enumerate() {
        let cfg = ReadConfig::default()
            .with_backend(backend)
            .with_direct_io(true);
        let ds = Dataset::open_with(&dir, cfg).unwrap();
        let mut r = Rng(5);
        for round in 0..4u64 {
            // A loader's next batches: 128 records over as many chunks.
            let next: Vec<u64> = (0..128).map(|_| r.below(RECORDS)).collect();
            // Sessions are unique in a process (an ended one is ignored for ever).
            let session = 100 * b as u64 + round;
            Source::lookahead(&ds, session, &next);
            let kept = zrecord::testing::read_window_files(&ds);
            let most = zrecord::diagnostics::descriptor_budget() / 2;
            assert!(
                kept > 0 && kept <= most,
                "{backend:?}: the window holds {kept} files (most {most})"
            );
            let now: Vec<u64> = (0..64).map(|_| r.below(RECORDS)).collect();
            let b = ds.gather_blocking(&now).unwrap_or_else(|e| {
                panic!("{backend:?} round {round}: {e} ({:?} fds open)", open_fds())
            });
            for (k, &i) in now.iter().enumerate() {
                assert!(b.get(k, 1).unwrap() == &rec(i)[1][..]);
            }
            let b = ds.gather_blocking(&next).unwrap_or_else(|e| {
                panic!("{backend:?} round {round}: {e} ({:?} fds open)", open_fds())
            });
            for (k, &i) in next.iter().enumerate() {
                assert!(b.get(k, 1).unwrap() == &rec(i)[1][..]);
            }
            Source::end_lookahead(&ds, session);
            // Everything announced was gathered or dropped: the window holds no file.
            assert_eq!(
                zrecord::testing::read_window_files(&ds),
                0,
                "{backend:?} round {round}"
            );
        }
        eprintln!("{backend:?}: {:?} fds open", open_fds());
    }
    println!("child: done");
}
