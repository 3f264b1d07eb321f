//! A dataset has one writer at a time: a second writer, in another thread or another process,
//! gets `WriterBusy`, and the lock is released when the holder exits, even by a kill.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use zrecord::{DType, Error, Field, Schema, Writer, WriterConfig};

const CHILD_ENV: &str = "ZRECORD_TEST_HOLD_WRITER";

const READY: &str = "ZRECORD_CHILD_HOLDS_THE_WRITER";

fn make(dir: &std::path::Path) {
    let schema = Schema::new().field(Field::new("x", DType::U8));
    Writer::create(dir, &schema, WriterConfig::default()).unwrap();
}

/// The child half: hold the writer until stdin closes. Run by `second_process_gets_writer_busy`
/// through this same test binary; when run without the variable it has nothing to hold and says so.
#[test]
fn child_holds_writer() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        println!("child_holds_writer: run only as the child of second_process_gets_writer_busy");
        return;
    };
    let mut w = Writer::open(&dir, WriterConfig::default()).unwrap();
    w.append(&[b"from child"]).unwrap();
    w.commit().unwrap();
    // libtest may print "test child_holds_writer ... " without a newline first: own line.
    println!("\n{READY}");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

#[test]
fn second_process_gets_writer_busy() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    make(&dir);
    for kill in [false, true] {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_holds_writer",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                out.read_line(&mut line).unwrap() > 0,
                "child exited before taking the lock"
            );
            if line.contains(READY) {
                break;
            }
        }
        let e = Writer::open(&dir, WriterConfig::default()).unwrap_err();
        assert!(matches!(e, Error::WriterBusy { .. }), "{e}");
        assert!(e.to_string().contains("writer.lock"));
        if kill {
            child.kill().unwrap();
        } else {
            drop(child.stdin.take());
        }
        child.wait().unwrap();
        // The holder is gone: the lock is free again, and its commit is there.
        let w = Writer::open(&dir, WriterConfig::default()).unwrap();
        assert_eq!(w.len(), if kill { 2 } else { 1 });
    }
}

#[test]
fn second_writer_in_the_same_process_gets_writer_busy() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    make(&dir);
    let w = Writer::open(&dir, WriterConfig::default()).unwrap();
    let d2 = dir.clone();
    let other = std::thread::spawn(move || Writer::open(&d2, WriterConfig::default()).map(drop));
    assert!(matches!(
        other.join().unwrap(),
        Err(Error::WriterBusy { .. })
    ));
    drop(w);
    Writer::open(&dir, WriterConfig::default()).unwrap();
}
