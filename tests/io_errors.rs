//! An I/O error (EIO, ENOSPC, a short write) at any file operation, once or from then on, gives a typed error — never a panic or wrong data — poisons the writer, leaks no file handle, and reopening recovers the last commit (or the one that failed after its commit point).
//!
//! The workload (create, appends over chunk rollovers, modify, delete, commits, a reopen, a
//! rebalance) runs once cleanly to count its file operations `N`; then for every operation index
//! `k < N`, every fault kind and both durations, it runs again with that fault injected by
//! `zrecord_testing::FaultFs`. On the simulated file system every fault is followed by a
//! restart check (the process dies: what it wrote stays) and a power-loss check (unsynced state
//! dropped); on the real file system (in `/dev/shm` when present) the check is the restart, and
//! the process's descriptor count (`/proc/self/fd`) must not grow.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod support;

use std::path::Path;
use std::sync::{Arc, Mutex};
use support::{digest, evaluate, record, run, scratch, Outcome, Step, Verdict, Workload, DS, ROOT};
use zrecord::testing::StdFs;
use zrecord::{Error, WriterConfig};
use zrecord_testing::{FaultFs, FaultKind, ImageSpec, SimFs};

/// Serialises the tests of this file: the descriptor count is per process.
static SERIAL: Mutex<()> = Mutex::new(());

const KINDS: [FaultKind; 3] = [FaultKind::Eio, FaultKind::Enospc, FaultKind::ShortWrite];

fn workload() -> Workload {
    let mut steps: Vec<Step> = (0..4).map(|i| Step::Append(record(100 + i, 700))).collect();
    steps.push(Step::Commit);
    steps.extend((0..3).map(|i| Step::Append(record(200 + i, 700))));
    steps.push(Step::Modify(1, 0, support::bytes(300, 7)));
    steps.push(Step::Delete(0));
    steps.push(Step::Commit);
    steps.push(Step::Reopen);
    steps.extend((0..2).map(|i| Step::Append(record(300 + i, 700))));
    steps.push(Step::Commit);
    steps.push(Step::Modify(2, 1, support::bytes(500, 8)));
    steps.push(Step::Rebalance);
    steps.push(Step::Append(record(400, 700)));
    steps.push(Step::Commit);
    Workload {
        name: "io-errors",
        schema: support::schema(1024),
        config: WriterConfig::default()
            .deflate_level(1)
            .write_buffer_bytes(600),
        steps,
    }
}

/// The error that stopped a run must be typed: an I/O error naming a path, or (for a call
/// after a failure) `Poisoned`.
fn check_error(out: &Outcome, what: &str) {
    if let Some(e) = &out.error {
        assert!(
            matches!(e, Error::Io { .. } | Error::Poisoned { .. }),
            "{what}: unexpected error type: {e:?}"
        );
    }
}

fn accept(v: &Verdict, out: &Outcome) -> bool {
    match v {
        Verdict::Absent => out.acked.is_none(),
        Verdict::Failed(_) => false,
        Verdict::Data { len, digest: d } => [&out.acked, &out.in_flight]
            .into_iter()
            .flatten()
            .any(|m| m.len() == *len && digest(m) == *d),
    }
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

#[test]
fn faults_on_the_simulated_file_system() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let w = workload();
    let clean = {
        let sim = SimFs::new();
        sim.mkdir_durable(Path::new(ROOT)).unwrap();
        let fault = FaultFs::new(Arc::new(sim));
        let out = run(&w, Arc::new(fault.clone()), Path::new(DS));
        assert!(out.error.is_none(), "{:?}", out.error);
        fault.ops()
    };
    let dir = scratch();
    let mut runs = 0u64;
    let mut failed = 0u64;
    for kind in KINDS {
        for permanent in [false, true] {
            for k in 0..clean {
                let sim = SimFs::new();
                sim.mkdir_durable(Path::new(ROOT)).unwrap();
                let fault = FaultFs::new(Arc::new(sim.clone()));
                fault.fail_at(k, kind, permanent);
                let what = format!("{kind:?} at op {k} (permanent: {permanent})");
                let out = run(&w, Arc::new(fault.clone()), Path::new(DS));
                runs += 1;
                check_error(&out, &what);
                if out.error.is_some() {
                    failed += 1;
                } else {
                    // No error: the run must be complete and right (a short write is retried).
                    assert_eq!(out.acked.as_ref(), Some(&out.working), "{what}");
                }
                assert_eq!(sim.open_handles(), 0, "{what}: handles leaked");
                // Restart (what the process wrote stays) and power loss (only synced state).
                fault.clear();
                for (view, spec) in [
                    ("restart", ImageSpec::all_applied()),
                    ("power loss", ImageSpec::all_dropped()),
                ] {
                    let img = sim.crash_state().image(&spec, Path::new(ROOT)).unwrap();
                    let at = dir.path().join(format!("{runs}-{view}"));
                    std::fs::create_dir(&at).unwrap();
                    img.materialise(&at).unwrap();
                    let v = evaluate(&at.join("ds"));
                    std::fs::remove_dir_all(&at).unwrap();
                    assert!(
                        accept(&v, &out),
                        "{what}, {view}: {v:?}; acked {:?}, in flight {:?}",
                        out.acked.as_ref().map(Vec::len),
                        out.in_flight.as_ref().map(Vec::len)
                    );
                }
                // Recovery on the simulated file system itself works too and leaks nothing.
                if out.acked.is_some() {
                    let wr = zrecord::Writer::open_with_vfs(
                        Arc::new(sim.clone()),
                        DS,
                        WriterConfig::default(),
                    );
                    assert!(
                        wr.is_ok(),
                        "{what}: reopen on the simulation: {:?}",
                        wr.err()
                    );
                    drop(wr);
                    assert_eq!(sim.open_handles(), 0, "{what}: handles leaked at reopen");
                }
            }
        }
    }
    println!("simulated: {clean} operations, {runs} faulty runs, {failed} ended in an error");
}

#[test]
fn faults_on_the_real_file_system_leak_no_descriptor() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let w = workload();
    let dir = scratch();
    // Warm up what stays open for the process's lifetime (the I/O backend, worker threads).
    let warm = dir.path().join("warm");
    let out = run(&w, StdFs::shared(), &warm);
    assert!(out.error.is_none());
    evaluate(&warm);
    let clean = {
        let fault = FaultFs::new(StdFs::shared());
        let out = run(&w, Arc::new(fault.clone()), &dir.path().join("clean"));
        assert!(out.error.is_none(), "{:?}", out.error);
        fault.ops()
    };
    let before = open_fds();
    let mut runs = 0u64;
    for kind in KINDS {
        for permanent in [false, true] {
            for k in 0..clean {
                runs += 1;
                let ds = dir.path().join(format!("r{runs}"));
                let fault = FaultFs::new(StdFs::shared());
                fault.fail_at(k, kind, permanent);
                let what = format!("{kind:?} at op {k} (permanent: {permanent})");
                let out = run(&w, Arc::new(fault.clone()), &ds);
                check_error(&out, &what);
                let v = evaluate(&ds);
                assert!(
                    accept(&v, &out),
                    "{what}: {v:?}; acked {:?}, in flight {:?}",
                    out.acked.as_ref().map(Vec::len),
                    out.in_flight.as_ref().map(Vec::len)
                );
                assert_eq!(open_fds(), before, "{what}: descriptors leaked");
                let _ = std::fs::remove_dir_all(&ds);
            }
        }
    }
    println!("real: {clean} operations, {runs} faulty runs, descriptors steady at {before}");
}
