//! A writer whose append tasks cannot write holds back its caller: appends wait once the bounded queues are full (memory stays bounded), a dropped `append_async` or `commit_async` future takes nothing and loses nothing, and once the disk answers again every acknowledged record lands, in index order.
//!
//! The disk is `FaultFs::hold_writes` over the real file system: while held, every file write
//! and sync blocks, so the queues fill deterministically (no timing involved).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use futures::FutureExt;
use std::sync::Arc;
use zrecord::testing::StdFs;
use zrecord::{DType, Dataset, Field, Schema, Writer, WriterConfig};
use zrecord_testing::FaultFs;

const RECORD: usize = 1000;

fn record(i: u64) -> Vec<u8> {
    (0..RECORD).map(|j| (i as usize * 31 + j) as u8).collect()
}

fn config(num_writers: usize, queue_depth: usize) -> WriterConfig {
    WriterConfig::default()
        .deflate_level(1)
        // One record per job: queue room is counted in records.
        .write_buffer_bytes(RECORD)
        .num_writers(num_writers)
        .queue_depth(queue_depth)
}

/// Lets the disk answer again when dropped, so a failed assertion cannot leave the writer's
/// drop waiting on a held write.
struct Release(FaultFs);

impl Drop for Release {
    fn drop(&mut self) {
        self.0.hold_writes(false);
    }
}

/// Polls `append_async` once per record with a no-op waker until one is pending; returns how
/// many were taken before.
fn fill(w: &mut Writer, from: u64) -> u64 {
    let mut taken = 0;
    loop {
        let rec = record(from + taken);
        let r = w.append_async(&[&rec[..]]).now_or_never();
        match r {
            Some(index) => {
                assert_eq!(index.unwrap(), from + taken);
                taken += 1;
                assert!(taken < 1000, "the writer never pushed back");
            }
            None => return taken,
        }
    }
}

#[test]
fn full_queues_hold_appends_and_dropped_futures_take_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    for (num_writers, queue_depth) in [(1, 1), (2, 1), (4, 3)] {
        let _ = std::fs::remove_dir_all(&dir);
        let fault = FaultFs::new(StdFs::shared());
        let schema = Schema::new().field(Field::new("x", DType::U8));
        let mut w = Writer::create_with_vfs(
            Arc::new(fault.clone()),
            &dir,
            &schema,
            config(num_writers, queue_depth),
        )
        .unwrap();
        fault.hold_writes(true);
        let _release = Release(fault.clone());
        // Fill until every task is stuck in a write: from then on nothing frees queue room.
        let mut taken = fill(&mut w, 0);
        while fault.held_waiters() < num_writers {
            std::thread::yield_now();
            taken += fill(&mut w, taken);
        }
        // Each task holds one job in its write and `queue_depth` queued; the writer holds one
        // full job waiting to be handed over and one being filled.
        let bound = (num_writers * (queue_depth + 1) + 2) as u64;
        assert!(
            taken <= bound,
            "{num_writers} tasks, depth {queue_depth}: took {taken} records, bound {bound}"
        );
        assert!(taken >= 1);
        assert_eq!(w.len(), taken, "a dropped append_async must take nothing");
        // Dropping more pending futures changes nothing either.
        for _ in 0..100 {
            assert!(w
                .append_async(&[&record(taken)[..]])
                .now_or_never()
                .is_none());
        }
        assert_eq!(w.len(), taken);
        // A commit cannot finish while the disk is held; dropping its future loses nothing.
        assert!(w.commit_async().now_or_never().is_none());
        fault.hold_writes(false);
        let more = 50;
        for i in taken..taken + more {
            assert_eq!(w.append(&[&record(i)[..]]).unwrap(), i);
        }
        let generation = w.commit().unwrap();
        assert!(generation >= 1);
        drop(w);
        let ds = Dataset::open(&dir).unwrap();
        assert_eq!(ds.len(), taken + more);
        let idx: Vec<u64> = (0..ds.len()).collect();
        let b = ds.gather_blocking(&idx).unwrap();
        for i in idx {
            assert_eq!(b.get(i as usize, 0).unwrap(), &record(i)[..], "record {i}");
        }
    }
}

#[test]
fn a_commit_dropped_while_finishing_completes_and_is_taken_by_the_next_call() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let fault = FaultFs::new(StdFs::shared());
    let schema = Schema::new().field(Field::new("x", DType::U8));
    let mut w =
        Writer::create_with_vfs(Arc::new(fault.clone()), &dir, &schema, config(2, 2)).unwrap();
    for i in 0..10 {
        w.append(&[&record(i)[..]]).unwrap();
    }
    fault.hold_writes(true);
    let _release = Release(fault.clone());
    // Poll the commit a few times: it gets as far as the held disk lets it.
    let mut fut = Box::pin(w.commit_async());
    for _ in 0..3 {
        assert!((&mut fut).now_or_never().is_none());
    }
    drop(fut);
    fault.hold_writes(false);
    // The next call finishes (or redoes) that commit first; nothing appended is lost.
    w.append(&[&record(10)[..]]).unwrap();
    assert_eq!(w.len(), 11);
    w.commit().unwrap();
    drop(w);
    let ds = Dataset::open(&dir).unwrap();
    assert_eq!(ds.len(), 11);
    for i in 0..11 {
        assert_eq!(&ds.get(i).unwrap()[0][..], &record(i)[..]);
    }
}

#[test]
fn a_commit_dropped_on_its_own_thread_still_lands_and_the_next_call_reports_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let fault = FaultFs::new(StdFs::shared());
    let vfs: Arc<dyn zrecord::testing::Vfs> = Arc::new(fault.clone());
    let schema = Schema::new().field(Field::new("x", DType::U8));
    let mut w = Writer::create_with_vfs(vfs.clone(), &dir, &schema, config(2, 2)).unwrap();
    for i in 0..10 {
        w.append(&[&record(i)[..]]).unwrap();
    }
    assert_eq!(w.commit().unwrap(), 1);
    drop(w);
    // A reopened writer's tasks hold no open chunk: the commit gets past them at once, and
    // its last part (tables, meta.json) blocks on the held disk on the commit's own thread.
    let mut w = Writer::open_with_vfs(vfs, &dir, config(2, 2)).unwrap();
    // A delete writes no record bytes: only the patch log and meta.json.
    w.delete(3).unwrap();
    fault.hold_writes(true);
    let _release = Release(fault.clone());
    let mut fut = Box::pin(w.commit_async());
    // Poll until the commit's own thread waits on the held disk (the tasks answer first).
    while fault.held_waiters() == 0 {
        assert!((&mut fut).now_or_never().is_none());
        std::thread::yield_now();
    }
    drop(fut);
    fault.hold_writes(false);
    // The next call waits for that commit and takes its generation.
    assert_eq!(w.append(&[&record(10)[..]]).unwrap(), 9);
    assert_eq!(w.generation(), 2);
    assert_eq!(w.commit().unwrap(), 3);
    drop(w);
    let ds = Dataset::open(&dir).unwrap();
    assert_eq!(ds.len(), 10);
    for i in 0..10 {
        let want = match i {
            3 => record(9),
            9 => record(10),
            _ => record(i),
        };
        assert_eq!(&ds.get(i).unwrap()[0][..], &want[..], "record {i}");
    }
}
