//! A writer's lock is held by the process that took it, never by that process's children: a
//! process spawned by another thread while a writer is open (it holds copies of every
//! descriptor until its `exec`), and a child of `fork()` that lives on after the parent closed
//! its writer, never make the next writer of the dataset fail with `WriterBusy`. A forked child
//! still cannot take a lock its parent holds.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use zrecord::{DType, Error, Field, Schema, Writer, WriterConfig};

fn make(dir: &Path) {
    let schema = Schema::new().field(Field::new("x", DType::Bytes));
    Writer::create(dir, &schema, WriterConfig::default()).unwrap();
}

#[test]
fn processes_spawned_by_another_thread_never_keep_a_writer_busy() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    make(&dir);
    let stop = Arc::new(AtomicBool::new(false));
    let spawner = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                std::process::Command::new("true").status().unwrap();
                n += 1;
            }
            n
        })
    };
    let mut busy = Vec::new();
    for i in 0..300u64 {
        match Writer::open(&dir, WriterConfig::default()) {
            Ok(mut w) => {
                w.append(&[i.to_le_bytes().to_vec()]).unwrap();
                w.commit().unwrap();
            }
            Err(Error::WriterBusy { .. }) => busy.push(i),
            Err(e) => panic!("{e}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let spawned = spawner.join().unwrap();
    assert!(
        busy.is_empty(),
        "{} of 300 opens found the lock taken ({spawned} processes spawned meanwhile): {busy:?}",
        busy.len()
    );
    assert!(spawned > 0);
}

fn pipe() -> [i32; 2] {
    let mut fds = [0i32; 2];
    // SAFETY: a pipe into `fds`.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    fds
}

fn send(fd: i32) -> bool {
    // SAFETY: writes one byte from a live buffer.
    unsafe { libc::write(fd, [1u8].as_ptr().cast(), 1) == 1 }
}

fn receive(fd: i32) -> bool {
    let mut b = [0u8; 1];
    // SAFETY: reads one byte into `b`.
    unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) == 1 }
}

#[test]
fn a_forked_child_never_keeps_its_parents_writer_busy() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    make(&dir);
    let mut w = Writer::open(&dir, WriterConfig::default()).unwrap();
    w.append(&[b"parent".to_vec()]).unwrap();
    let [from_child, to_parent] = pipe();
    let [from_parent, to_child] = pipe();
    // SAFETY: the child opens a writer (refused), uses its pipes and `_exit`s; it never drops
    // the parent's writer.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let refused = matches!(
            Writer::open(&dir, WriterConfig::default()),
            Err(Error::WriterBusy { .. })
        );
        // Lives on, writer and all, until the parent has opened the dataset again.
        let ok = refused && send(to_parent) && receive(from_parent);
        std::mem::forget(w);
        // SAFETY: ends the child without running the test harness's exit handlers.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    // SAFETY: the child's ends, closed once in the parent (a dead child then reads as EOF).
    unsafe {
        libc::close(to_parent);
        libc::close(from_parent);
    }
    assert!(receive(from_child), "the child died");
    w.commit().unwrap();
    drop(w);
    // The child lives, with copies of the descriptors the parent had at the fork.
    let again = Writer::open(&dir, WriterConfig::default());
    let again_ok = again.is_ok();
    drop(again);
    assert!(send(to_child));
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        again_ok,
        "the forked child kept the parent's writer lock after the parent closed its writer"
    );
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child was not refused the parent's lock: {status:#x}"
    );
    for fd in [from_child, to_child] {
        // SAFETY: the parent's ends, each closed once.
        unsafe { libc::close(fd) };
    }
}
