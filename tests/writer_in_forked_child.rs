//! A `Writer` used in a child of `fork()` refuses every call (`InvalidConfig` naming the
//! dataset), and dropping it there returns at once without touching what its parent holds: the
//! parent's writer goes on, its records committed whole, its lock released when it closes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::time::{Duration, Instant};

use zrecord::{DType, Dataset, Error, Field, RebalanceOptions, Schema, Writer, WriterConfig};

fn pipe() -> [i32; 2] {
    let mut fds = [0i32; 2];
    // SAFETY: a pipe into `fds`.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    fds
}

/// Whether `e` is the refusal of a forked writer, naming the dataset's directory.
fn refused<T>(r: zrecord::Result<T>, dir: &str) -> bool {
    matches!(r, Err(Error::InvalidConfig { reason }) if reason.contains("fork") && reason.contains(dir))
}

#[test]
fn a_writer_in_a_forked_child_refuses_every_call_and_drops_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let schema = Schema::new().field(Field::new("x", DType::Bytes));
    let mut w = Writer::create(&dir, &schema, WriterConfig::default()).unwrap();
    w.append(&[b"before".to_vec()]).unwrap();
    w.commit().unwrap();
    w.append(&[b"pending".to_vec()]).unwrap();
    let name = dir.to_str().unwrap().to_string();
    let [from_child, to_parent] = pipe();
    // SAFETY: the child uses the writer it inherited (which must refuse), drops it, writes one
    // byte and `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let mut ok = refused(w.append(&[b"child".to_vec()]), &name)
            && refused(w.append_many(&[[b"c".to_vec()]]), &name)
            && refused(w.modify(0, "x", b"child"), &name)
            && refused(w.modify_record(0, &[b"child".to_vec()]), &name)
            && refused(w.delete(0), &name)
            && refused(w.commit(), &name)
            && refused(w.rebalance_with(RebalanceOptions::default()), &name)
            && refused(
                futures::executor::block_on(w.append_async(&[b"child".to_vec()])),
                &name,
            )
            && refused(futures::executor::block_on(w.commit_async()), &name);
        // What it knew still reads as it was.
        ok &= w.len() == 2 && w.generation() == 1;
        drop(w);
        // SAFETY: writes one byte from a live buffer.
        ok &= unsafe { libc::write(to_parent, [u8::from(ok)].as_ptr().cast(), 1) } == 1;
        // SAFETY: ends the child without running the test harness's exit handlers.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    // SAFETY: the child's end, closed once in the parent.
    unsafe { libc::close(to_parent) };
    let mut byte = [0u8; 1];
    let mut poll = libc::pollfd {
        fd: from_child,
        events: libc::POLLIN,
        revents: 0,
    };
    let start = Instant::now();
    // SAFETY: polls one live descriptor.
    let ready = unsafe { libc::poll(&mut poll, 1, 20_000) };
    if ready != 1 {
        // SAFETY: kills our own child, which hangs.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    // SAFETY: reads one byte into `byte`.
    let got = unsafe { libc::read(from_child, byte.as_mut_ptr().cast(), 1) };
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert_eq!(
        (ready, got, byte[0]),
        (1, 1, 1),
        "the child hung or was not refused ({:?}, status {status:#x})",
        start.elapsed()
    );
    assert!(start.elapsed() < Duration::from_secs(20));
    // SAFETY: the parent's end, closed once.
    unsafe { libc::close(from_child) };
    // The parent's writer goes on: its pending record commits whole, and the child took
    // nothing.
    w.append(&[b"after".to_vec()]).unwrap();
    assert_eq!(w.commit().unwrap(), 2);
    drop(w);
    let ds = Dataset::open(&dir).unwrap();
    let got: Vec<Vec<u8>> = (0..ds.len())
        .map(|i| ds.get(i).unwrap()[0].to_vec())
        .collect();
    assert_eq!(
        got,
        [b"before".to_vec(), b"pending".to_vec(), b"after".to_vec()]
    );
    // And its lock is free.
    drop(Writer::open(&dir, WriterConfig::default()).unwrap());
}
