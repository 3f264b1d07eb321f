//! A writer process killed with SIGKILL at random moments never loses an acknowledged commit: on
//! reopen the dataset equals the model at the last acknowledged commit or at the one that was
//! being committed, byte for byte, on the real filesystem.
//!
//! The child (this test binary, re-run with `ZRECORD_TEST_KILL_CHILD`) opens the writer, and
//! commits transactions forever, printing `COMMIT` before and `ACK <generation>` after each
//! `commit()`. The parent kills it at a random moment, often inside a commit. A
//! transaction is a pure function of the generation it starts from, so the parent replays it on a
//! `Vec<Vec<u8>>`-per-field model. `ZRECORD_KILLS` sets the number of kills (default 1,000).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod support;

use support::Rng;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use zrecord::{Codec, DType, Dataset, Field, Schema, Writer, WriterConfig};

const CHILD_ENV: &str = "ZRECORD_TEST_KILL_CHILD";
const READY: &str = "ZRECORD_KILL_CHILD_READY";
const SEED: u64 = 0x5eed_0fc0_ffee;

type Rec = Vec<Vec<u8>>;

enum Op {
    Append(Rec),
    Modify(u64, usize, Vec<u8>),
    Delete(u64),
}

/// Bytes of `len`: compressible for even `x`, noise for odd.
fn bytes(len: usize, x: u64) -> Vec<u8> {
    if x.is_multiple_of(2) {
        return (0..len).map(|i| ((i as u64 % 23) ^ x) as u8).collect();
    }
    let mut r = Rng(x);
    (0..len).map(|_| r.next() as u8).collect()
}

fn value(r: &mut Rng) -> Vec<u8> {
    let len = match r.below(10) {
        0 => 0,
        1..=6 => r.below(600),
        7 | 8 => 1000 + r.below(5000),
        _ => 20_000 + r.below(20_000), // more than the chunk size: a chunk of its own
    };
    bytes(len as usize, r.next())
}

/// The transaction committed on top of generation `generation` of a dataset of `len` records.
fn txn(generation: u64, mut len: u64) -> Vec<Op> {
    let mut r = Rng(SEED ^ generation.wrapping_mul(0x2545_f491_4f6c_dd1d));
    let n = 1 + r.below(12);
    let mut ops = Vec::new();
    for _ in 0..n {
        // Keep the dataset around a few hundred records so every check reads all of it.
        let delete_weight = if len > 300 { 6 } else { 2 };
        let pick = r.below(10);
        if len == 0 || pick < 5 {
            ops.push(Op::Append(vec![value(&mut r), value(&mut r)]));
            len += 1;
        } else if pick < 10 - delete_weight {
            ops.push(Op::Modify(r.below(len), r.below(2) as usize, value(&mut r)));
        } else {
            ops.push(Op::Delete(r.below(len)));
            len -= 1;
        }
    }
    ops
}

fn apply(model: &mut Vec<Rec>, ops: &[Op]) {
    for op in ops {
        match op {
            Op::Append(rec) => model.push(rec.clone()),
            Op::Modify(i, f, v) => model[*i as usize][*f] = v.clone(),
            Op::Delete(i) => {
                model.swap_remove(*i as usize);
            }
        }
    }
}

fn schema() -> Schema {
    Schema::new()
        .field(Field::new("a", DType::Bytes).codec(Codec::Deflate))
        .field(Field::new("b", DType::U8))
        .chunk_size_bytes(32 << 10)
}

fn config() -> WriterConfig {
    WriterConfig::default()
        .deflate_level(1)
        .write_buffer_bytes(16 << 10)
}

/// The child half: commit transactions until killed. Run by `sigkill_never_loses_a_commit`
/// through this same test binary; without the variable it has nothing to do and says so.
#[test]
fn child_commits_until_killed() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        println!(
            "child_commits_until_killed: run only as the child of sigkill_never_loses_a_commit"
        );
        return;
    };
    let mut w = Writer::open(&dir, config()).unwrap();
    let mut out = std::io::stdout().lock();
    // libtest may have printed "test child_commits_until_killed ... " without a newline.
    writeln!(out, "\n{READY}").unwrap();
    out.flush().unwrap();
    for _ in 0..100_000 {
        for op in txn(w.generation(), w.len()) {
            match op {
                Op::Append(rec) => {
                    w.append(&rec).unwrap();
                }
                Op::Modify(i, f, v) => w.modify(i, ["a", "b"][f], &v).unwrap(),
                Op::Delete(i) => w.delete(i).unwrap(),
            }
        }
        writeln!(out, "COMMIT").unwrap();
        out.flush().unwrap();
        let generation = w.commit().unwrap();
        writeln!(out, "ACK {generation}").unwrap();
        out.flush().unwrap();
    }
}

fn check(dir: &Path, model: &[Rec], context: &str) {
    let ds = Dataset::open(dir).unwrap_or_else(|e| panic!("{context}: reopen failed: {e}"));
    assert_eq!(ds.len(), model.len() as u64, "{context}: length");
    let all: Vec<u64> = (0..model.len() as u64).collect();
    let batch = ds
        .gather_blocking(&all)
        .unwrap_or_else(|e| panic!("{context}: read failed: {e}"));
    for (i, rec) in model.iter().enumerate() {
        for (f, want) in rec.iter().enumerate() {
            assert!(
                batch.get(i, f).unwrap() == &want[..],
                "{context}: record {i} field {f} differs"
            );
        }
    }
}

fn kills() -> u64 {
    support::count("ZRECORD_KILLS", 200, 1000)
}

#[test]
fn sigkill_never_loses_a_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    drop(Writer::create(&dir, &schema(), config()).unwrap());
    let exe = std::env::current_exe().unwrap();
    let mut model: Vec<Rec> = Vec::new();
    let mut generation = 0u64;
    let mut rng = Rng(SEED);
    let (mut acks_total, mut mid_commit) = (0u64, 0u64);
    let n = kills();
    for kill in 0..n {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "child_commits_until_killed",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        let mut acked = generation;
        // One kill in eight lands while the child starts or recovers (in `Writer::open`); the
        // others after 0-2 acknowledged commits, half of them right after a commit has begun.
        let early = rng.below(8) == 0;
        let mut wait_for_acks = rng.below(3);
        let in_commit = rng.below(2) == 0;
        let mut ready = early;
        while !early && out.read_line(&mut line).unwrap() > 0 {
            let l = line.trim();
            if l.contains(READY) {
                ready = true;
            } else if let Some(g) = l.strip_prefix("ACK ") {
                acked = g.parse().unwrap();
                wait_for_acks = wait_for_acks.saturating_sub(1);
            } else if l == "COMMIT" && in_commit && wait_for_acks == 0 {
                break;
            }
            line.clear();
            if ready && wait_for_acks == 0 && !in_commit {
                break;
            }
        }
        assert!(
            ready,
            "kill {kill}: the child exited before opening the writer"
        );
        // A commit takes a few fsyncs: up to 15 ms reaches its end, rename included.
        let pause = if in_commit { 15_000 } else { 3000 };
        std::thread::sleep(Duration::from_micros(rng.below(pause)));
        child.kill().unwrap();
        // Every acknowledgement the child printed before dying is still in the pipe.
        line.clear();
        while out.read_line(&mut line).unwrap() > 0 {
            if let Some(g) = line.trim().strip_prefix("ACK ") {
                acked = g.parse().unwrap();
            }
            line.clear();
        }
        child.wait().unwrap();
        acks_total += acked - generation;

        // Replay the model up to the last acknowledged commit.
        while generation < acked {
            let ops = txn(generation, model.len() as u64);
            apply(&mut model, &ops);
            generation += 1;
        }
        let on_disk = Dataset::open(&dir)
            .unwrap_or_else(|e| panic!("kill {kill}: reopen failed: {e}"))
            .generation();
        assert!(
            on_disk == acked || on_disk == acked + 1,
            "kill {kill}: generation {on_disk} on disk, {acked} acknowledged"
        );
        if on_disk == acked + 1 {
            // Killed after the rename, before the acknowledgement reached us.
            let ops = txn(generation, model.len() as u64);
            apply(&mut model, &ops);
            generation += 1;
            mid_commit += 1;
        }
        check(
            &dir,
            &model,
            &format!("kill {kill} at generation {generation}"),
        );
    }
    println!(
        "{n} kills, {acks_total} acknowledged commits, {mid_commit} kills between rename and \
         acknowledgement, final length {}, 0 violations",
        model.len()
    );
}
