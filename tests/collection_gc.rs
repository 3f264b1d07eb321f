//! `gc` never removes a part that a manifest names, nor one younger than the limit, and removes
//! every other part (and every leftover temporary manifest) older than it: checked against a
//! plain model over random interleavings of commits, parts placed under `parts/` without a
//! commit, clock advances and collections, locally with a fake clock (file times set to it),
//! and once on an object store (s3s-fs).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/s3.rs"]
mod s3;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, SystemTime};

use proptest::prelude::*;
use zrecord::collection::{commit, commit_url, gc, CommitOptions, GcOptions};
use zrecord::remote::{push, RemoteConfig, TransferOptions};
use zrecord::{DType, Dataset, Field, ReadConfig, Schema, Writer, WriterConfig};

const HOUR: Duration = Duration::from_secs(3600);

/// A part named `name` at `dir/name` with 2 records naming it.
fn make(dir: &Path, name: &str) {
    let schema = Schema::new().field(Field::new("x", DType::Bytes));
    let mut w = Writer::create(dir.join(name), &schema, WriterConfig::default()).unwrap();
    for i in 0..2 {
        w.append(&[format!("{name}/{i}").into_bytes()]).unwrap();
    }
    w.commit().unwrap();
}

/// Sets the modification time of `path` and of everything under it to `t`.
fn set_times(path: &Path, t: SystemTime) {
    if path.is_dir() {
        for e in std::fs::read_dir(path).unwrap() {
            set_times(&e.unwrap().path(), t);
        }
    }
    std::fs::File::open(path).unwrap().set_modified(t).unwrap();
}

#[derive(Clone, Debug)]
enum Op {
    /// Commit `n` new parts (made outside, moved under parts/ by the commit).
    Commit(usize),
    /// Make a part under parts/ without committing it (a commit that died after placing it).
    Place,
    /// Commit the `k`-th placed, uncommitted part still there, by its path under parts/.
    CommitPlaced(usize),
    /// Leave a temporary manifest behind (a committer killed before removing it).
    Leftover,
    /// Advance the clock by `h` hours.
    Advance(u64),
    /// Collect with a limit of `h` hours.
    Gc(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1usize..3).prop_map(Op::Commit),
        Just(Op::Place),
        (0usize..4).prop_map(Op::CommitPlaced),
        Just(Op::Leftover),
        (0u64..5).prop_map(Op::Advance),
        (0u64..4).prop_map(Op::Gc),
    ]
}

/// The model: each part under parts/ with the (fake) time it was last written, whether a
/// manifest names it; leftovers with their times; the committed parts in order.
#[derive(Default)]
struct Model {
    parts: BTreeMap<String, (SystemTime, bool)>,
    leftovers: BTreeMap<String, SystemTime>,
    committed: Vec<String>,
}

fn run(ops: &[Op]) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("c");
    let outside = tmp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let mut now = SystemTime::now();
    let mut m = Model::default();
    let mut next = 0usize;
    // The first commit makes the collection.
    let ops: Vec<Op> = std::iter::once(Op::Commit(1))
        .chain(ops.iter().cloned())
        .collect();
    for op in &ops {
        match op {
            Op::Commit(n) => {
                let names: Vec<String> = (0..*n)
                    .map(|_| {
                        next += 1;
                        format!("p{next}")
                    })
                    .collect();
                let dirs: Vec<_> = names
                    .iter()
                    .map(|n| {
                        make(&outside, n);
                        outside.join(n)
                    })
                    .collect();
                let r = commit(&root, &dirs, CommitOptions::default()).unwrap();
                assert_eq!(r.ids, names);
                for n in names {
                    set_times(&root.join("parts").join(&n), now);
                    m.parts.insert(n.clone(), (now, true));
                    m.committed.push(n);
                }
            }
            Op::Place => {
                next += 1;
                let n = format!("p{next}");
                make(&root.join("parts"), &n);
                set_times(&root.join("parts").join(&n), now);
                m.parts.insert(n, (now, false));
            }
            Op::CommitPlaced(k) => {
                let placed: Vec<String> = m
                    .parts
                    .iter()
                    .filter(|(_, (_, named))| !named)
                    .map(|(n, _)| n.clone())
                    .collect();
                let Some(n) = placed.get(*k % placed.len().max(1)).cloned() else {
                    continue;
                };
                commit(
                    &root,
                    &[root.join("parts").join(&n)],
                    CommitOptions::default(),
                )
                .unwrap();
                if let Some(p) = m.parts.get_mut(&n) {
                    p.1 = true;
                }
                m.committed.push(n);
            }
            Op::Leftover => {
                next += 1;
                let name = format!(".00000000000000000099.json.1.{next}.tmp");
                let path = root.join("_collection").join(&name);
                std::fs::write(&path, b"partial").unwrap();
                set_times(&path, now);
                m.leftovers.insert(name, now);
            }
            Op::Advance(h) => now += HOUR * (*h as u32),
            Op::Gc(h) => {
                let limit = HOUR * (*h as u32);
                let r = gc(
                    root.to_str().unwrap(),
                    limit,
                    &GcOptions::default().now(now),
                )
                .unwrap();
                let old = |t: SystemTime| now.duration_since(t).is_ok_and(|age| age > limit);
                let gone: BTreeSet<String> = m
                    .parts
                    .iter()
                    .filter(|(_, (t, named))| !named && old(*t))
                    .map(|(n, _)| n.clone())
                    .collect();
                assert_eq!(r.removed.iter().cloned().collect::<BTreeSet<_>>(), gone);
                m.parts.retain(|n, _| !gone.contains(n));
                let kept: BTreeSet<String> = m.parts.keys().cloned().collect();
                assert_eq!(r.kept.iter().cloned().collect::<BTreeSet<_>>(), kept);
                let before = m.leftovers.len();
                m.leftovers.retain(|_, t| !old(*t));
                assert_eq!(r.leftovers, (before - m.leftovers.len()) as u64);
            }
        }
        // What is on disk is the model's, and the collection reads whole.
        let on_disk: BTreeSet<String> = std::fs::read_dir(root.join("parts"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(on_disk, m.parts.keys().cloned().collect::<BTreeSet<_>>());
        let temps: BTreeSet<String> = std::fs::read_dir(root.join("_collection"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert_eq!(temps, m.leftovers.keys().cloned().collect::<BTreeSet<_>>());
    }
    let ds = Dataset::open(&root).unwrap();
    assert_eq!(ds.snapshot().part_ids(), m.committed.as_slice());
    let batch = ds
        .gather_blocking(&(0..ds.len()).collect::<Vec<_>>())
        .unwrap();
    for (p, id) in m.committed.iter().enumerate() {
        for i in 0..2 {
            assert_eq!(
                batch.get(p * 2 + i, 0).unwrap(),
                format!("{id}/{i}").as_bytes()
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]
    #[test]
    fn gc_removes_exactly_the_old_unnamed_parts(ops in prop::collection::vec(op(), 1..14)) {
        run(&ops);
    }
}

#[test]
fn a_part_named_by_a_manifest_is_never_removed_however_old() {
    run(&[
        Op::Place,
        Op::Commit(2),
        Op::Advance(1000),
        Op::Gc(0),
        Op::CommitPlaced(0),
        Op::Gc(0),
    ]);
}

#[test]
fn gc_on_an_object_store_removes_old_unnamed_parts_only() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let url = server.url("colls/gc");
    let t = TransferOptions::default().store(server.options());
    for n in ["a", "b", "orphan"] {
        make(tmp.path(), n);
    }
    let dir = |n: &str| tmp.path().join(n).display().to_string();
    commit_url(&url, &[dir("a"), dir("b")], CommitOptions::default(), &t).unwrap();
    // A writer pushed a part under parts/ and never committed it.
    push(
        tmp.path().join("orphan"),
        &format!("{url}/parts/orphan"),
        &t,
    )
    .unwrap();
    let options = GcOptions::default().store(server.options());

    // Young: kept.
    let r = gc(&url, HOUR, &options).unwrap();
    assert!(r.removed.is_empty(), "{r:?}");
    assert_eq!(r.kept, ["a", "b", "orphan"]);
    // Old: removed, objects and all; the named parts stay however old.
    let later = options.clone().now(SystemTime::now() + 2 * HOUR);
    let r = gc(&url, HOUR, &later).unwrap();
    assert_eq!(r.removed, ["orphan"]);
    assert_eq!(r.kept, ["a", "b"]);
    assert!(r.bytes_freed > 0);
    assert!(
        !server.object_file("colls/gc/parts/orphan").exists()
            || std::fs::read_dir(server.object_file("colls/gc/parts/orphan"))
                .unwrap()
                .flatten()
                .all(|e| e.file_type().unwrap().is_dir())
    );
    let ds = zrecord::remote::open(
        &url,
        ReadConfig::default(),
        RemoteConfig::default()
            .store(server.options())
            .cache_dir(tmp.path().join("cache")),
    )
    .unwrap();
    assert_eq!(ds.len(), 4);
    assert_eq!(&ds.get(3).unwrap()[0][..], b"b/1");
    let r = gc(&url, HOUR, &later).unwrap();
    assert!(r.removed.is_empty(), "{r:?}");
}

/// A gc with a limit of a week started on another thread when a commit has placed its part,
/// and the commit's options that start it.
struct GcDuringCommit {
    options: CommitOptions,
    handle: GcHandle,
}

type GcHandle = std::sync::Arc<std::sync::Mutex<Option<std::thread::JoinHandle<Vec<String>>>>>;

impl GcDuringCommit {
    /// The ids the gc removed.
    fn join(handle: &GcHandle) -> Vec<String> {
        let h = handle.lock().unwrap().take().expect("a part was placed");
        h.join().unwrap()
    }
}

fn gc_during_commit(root: String) -> GcDuringCommit {
    let handle = std::sync::Arc::new(std::sync::Mutex::new(None));
    let slot = std::sync::Arc::clone(&handle);
    let options = CommitOptions::default().on_step(move |s| {
        if matches!(s, zrecord::collection::CommitStep::PartPlaced { .. }) {
            // Refused on the commit's own thread.
            let e = gc(&root, 168 * HOUR, &GcOptions::default()).unwrap_err();
            assert!(
                e.to_string().contains("wait for that commit forever"),
                "{e}"
            );
            let r = root.clone();
            let h = std::thread::spawn(move || {
                gc(&r, 168 * HOUR, &GcOptions::default()).unwrap().removed
            });
            std::thread::sleep(Duration::from_millis(200));
            *slot.lock().unwrap() = Some(h);
        }
    });
    GcDuringCommit { options, handle }
}

#[test]
fn a_part_written_long_ago_is_young_while_its_commit_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("c");
    make(tmp.path(), "first");
    commit(&root, &[tmp.path().join("first")], CommitOptions::default()).unwrap();
    // Written ten days ago, committed now: gc with a limit of a week runs between the part's
    // placement under parts/ and the manifest that names it.
    make(tmp.path(), "old");
    set_times(&tmp.path().join("old"), SystemTime::now() - 240 * HOUR);
    let root_text = root.display().to_string();
    // gc runs on another thread (on the commit's own it is refused: it would wait for the
    // commit forever) and waits for the commit's lock; it must remove nothing after it either.
    let gc_run = gc_during_commit(root_text);
    let r = commit(&root, &[tmp.path().join("old")], gc_run.options).unwrap();
    assert_eq!(r.added, ["old"]);
    let removed = GcDuringCommit::join(&gc_run.handle);
    assert!(
        removed.is_empty(),
        "gc removed a part being committed: {removed:?}"
    );
    let ds = Dataset::open(&root).unwrap();
    assert_eq!(&ds.get(3).unwrap()[0][..], b"old/1");
}

#[test]
fn a_part_written_under_parts_long_ago_is_kept_while_its_commit_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("c");
    make(tmp.path(), "first");
    commit(&root, &[tmp.path().join("first")], CommitOptions::default()).unwrap();
    // A task wrote its part straight under parts/ ten days ago; it is committed now, by its
    // path there (nothing is moved, so nothing sets its time), while gc with a limit of a week
    // runs between the commit's check of the part and the manifest that names it.
    make(&root.join("parts"), "task");
    set_times(&root.join("parts/task"), SystemTime::now() - 240 * HOUR);
    let root_text = root.display().to_string();
    // gc runs on another thread (on the commit's own it is refused: it would wait for the
    // commit forever) and waits for the commit's lock; it must remove nothing after it either.
    let gc_run = gc_during_commit(root_text);
    let r = commit(&root, &[root.join("parts/task")], gc_run.options).unwrap();
    assert_eq!(r.added, ["task"]);
    let removed = GcDuringCommit::join(&gc_run.handle);
    assert!(
        removed.is_empty(),
        "gc removed a part being committed: {removed:?}"
    );
    let ds = Dataset::open(&root).unwrap();
    assert_eq!(&ds.get(3).unwrap()[0][..], b"task/1");
}

#[test]
fn gc_removes_a_symlink_under_parts_never_what_it_points_to() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("c");
    make(tmp.path(), "first");
    commit(&root, &[tmp.path().join("first")], CommitOptions::default()).unwrap();
    // Someone linked a dataset of theirs under parts/ and never committed it.
    make(tmp.path(), "theirs");
    std::os::unix::fs::symlink(tmp.path().join("theirs"), root.join("parts/theirs")).unwrap();
    let later = GcOptions::default().now(SystemTime::now() + 2 * HOUR);
    let r = gc(&root.display().to_string(), HOUR, &later).unwrap();
    assert_eq!(r.removed, ["theirs"]);
    assert!(std::fs::symlink_metadata(root.join("parts/theirs")).is_err());
    let ds = Dataset::open(tmp.path().join("theirs")).unwrap();
    assert_eq!(&ds.get(1).unwrap()[0][..], b"theirs/1");
}
