//! A crash before or after any file operation — unsynced writes dropped, applied, torn at 512 bytes, persisted sector by sector out of order, or grown with zeros; directory operations durable or not — leaves a dataset that reopens and equals, byte for byte with every checksum verified, the model at the last acknowledged commit or at the commit being made.
//!
//! Each workload runs on the simulated file system (`zrecord_testing::SimFs`) behind the
//! fault-injecting wrapper, once cleanly to count its file operations `N`, then once per crash
//! point `k` in `0..=N` (operation `k` and every later one fail: the machine stopped before
//! operation `k`, i.e. after operation `k - 1`). From the frozen state the simulated file
//! system builds every post-crash image a disk could show ([`CrashState::specs`]); each image is
//! written to a scratch directory (on `/dev/shm`) and checked with the real `Dataset` (a full
//! read, checksums verified) before and after the real `Writer::open` (recovery), then appended
//! to and committed once more. Identical images are checked once (a 96-bit fingerprint of the tree), and every
//! image is compared with the models of its own crash point.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod support;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use support::{
    digest, evaluate, record, run, scratch, Rec, Rng, Step, Verdict, Workload, DS, ROOT,
};
use zrecord::WriterConfig;
use zrecord_testing::{CrashState, FaultFs, SimFs};

/// Torn variants per file with unsynced writes.
const MAX_TORN: usize = 6;
/// Images per crash point in which every file and directory picks its own random fate.
const RANDOM_IMAGES: usize = 8;

fn config(write_buffer_bytes: usize) -> WriterConfig {
    WriterConfig::default()
        .deflate_level(1)
        .write_buffer_bytes(write_buffer_bytes)
}

fn appends(seed: u64, n: u64, max: usize) -> Vec<Step> {
    (0..n)
        .map(|i| Step::Append(record(seed * 1000 + i, max)))
        .collect()
}

#[derive(Default, Debug)]
struct Stats {
    crash_points: u64,
    images: u64,
    distinct: u64,
}

fn accept(v: &Verdict, acked: &Option<Vec<Rec>>, in_flight: &Option<Vec<Rec>>) -> bool {
    match v {
        Verdict::Absent => acked.is_none(),
        Verdict::Failed(_) => false,
        Verdict::Data { len, digest: d } => [acked, in_flight]
            .into_iter()
            .flatten()
            .any(|m| m.len() == *len && digest(m) == *d),
    }
}

fn fresh() -> (SimFs, FaultFs) {
    let sim = SimFs::new();
    sim.mkdir_durable(Path::new(ROOT)).unwrap();
    let fault = FaultFs::new(Arc::new(sim.clone()));
    (sim, fault)
}

fn check(w: &Workload) -> Stats {
    let (sim, fault) = fresh();
    let clean = run(w, Arc::new(fault.clone()), Path::new(DS));
    assert!(clean.error.is_none(), "{}: {:?}", w.name, clean.error);
    assert_eq!(sim.open_handles(), 0, "{}: handles leaked", w.name);
    let total = fault.ops();
    let dir = scratch();
    let mut cache: HashMap<(u64, u32), Verdict> = HashMap::new();
    let mut stats = Stats::default();
    let mut violations = Vec::new();
    for k in 0..=total {
        let (sim, fault) = fresh();
        fault.crash_at(k);
        let out = run(w, Arc::new(fault.clone()), Path::new(DS));
        assert_eq!(fault.crashed(), k < total, "{}: crash at {k}", w.name);
        assert_eq!(sim.open_handles(), 0, "{}: handles leaked at {k}", w.name);
        stats.crash_points += 1;
        let state: CrashState = sim.crash_state();
        let mut specs = state.specs(MAX_TORN);
        specs.extend(state.random_specs(k.wrapping_mul(31) ^ total, RANDOM_IMAGES, MAX_TORN));
        for spec in specs {
            stats.images += 1;
            let img = state.image(&spec, Path::new(ROOT)).unwrap();
            let verdict = cache.entry(img.fingerprint()).or_insert_with(|| {
                stats.distinct += 1;
                let at = dir.path().join(format!("{}", stats.distinct));
                std::fs::create_dir(&at).unwrap();
                img.materialise(&at).unwrap();
                let v = evaluate(&at.join("ds"));
                std::fs::remove_dir_all(&at).unwrap();
                v
            });
            if !accept(verdict, &out.acked, &out.in_flight) {
                violations.push(format!(
                    "{} crash at op {k}/{total} image [{spec}]: {verdict:?}; acked {:?} records, in flight {:?}",
                    w.name,
                    out.acked.as_ref().map(Vec::len),
                    out.in_flight.as_ref().map(Vec::len),
                ));
            }
        }
    }
    println!(
        "{}: {} file operations, {} crash points, {} images ({} distinct, checked on disk), {} violations",
        w.name,
        total,
        stats.crash_points,
        stats.images,
        stats.distinct,
        violations.len()
    );
    assert!(
        violations.is_empty(),
        "{} violations, first ones:\n{}",
        violations.len(),
        violations[..violations.len().min(10)].join("\n")
    );
    stats
}

#[test]
fn crash_during_create_and_append() {
    let mut steps = appends(1, 4, 2000);
    steps.push(Step::Commit);
    steps.extend(appends(2, 3, 2000));
    steps.push(Step::Commit);
    check(&Workload {
        name: "append",
        schema: support::schema(64 << 10),
        config: config(1500),
        steps,
    });
}

#[test]
fn crash_during_modify() {
    let mut steps = appends(3, 4, 1200);
    steps.push(Step::Commit);
    steps.push(Step::Modify(1, 0, support::bytes(900, 31)));
    steps.push(Step::Modify(2, 1, support::bytes(700, 32)));
    steps.push(Step::ModifyRecord(0, record(33, 1200)));
    steps.push(Step::Commit);
    steps.push(Step::Modify(3, 0, Vec::new()));
    steps.push(Step::Commit);
    check(&Workload {
        name: "modify",
        schema: support::schema(64 << 10),
        config: config(1500),
        steps,
    });
}

#[test]
fn crash_during_delete() {
    let mut steps = appends(4, 5, 1000);
    steps.push(Step::Commit);
    steps.push(Step::Delete(1));
    steps.push(Step::Delete(3));
    steps.push(Step::Commit);
    steps.extend(appends(5, 1, 1000));
    steps.push(Step::Delete(0));
    steps.push(Step::Delete(0));
    steps.push(Step::Commit);
    check(&Workload {
        name: "delete",
        schema: support::schema(64 << 10),
        config: config(1500),
        steps,
    });
}

#[test]
fn crash_during_chunk_rollover() {
    let mut steps = appends(6, 4, 700);
    steps.push(Step::Commit);
    steps.extend(appends(7, 4, 700));
    steps.push(Step::Commit);
    steps.push(Step::Reopen);
    steps.extend(appends(8, 3, 700));
    steps.push(Step::Commit);
    check(&Workload {
        name: "rollover",
        schema: support::schema(1024),
        config: config(512),
        steps,
    });
}

#[test]
fn crash_during_compaction_commit() {
    let mut steps = appends(9, 3, 800);
    steps.push(Step::Commit);
    steps.push(Step::Modify(0, 0, support::bytes(600, 91)));
    steps.push(Step::CompactCommit);
    steps.push(Step::Delete(1));
    steps.push(Step::CompactCommit);
    steps.push(Step::Reopen);
    steps.extend(appends(10, 1, 800));
    steps.push(Step::Commit);
    check(&Workload {
        name: "compaction",
        schema: support::schema(64 << 10),
        config: config(1500),
        steps,
    });
}

#[test]
fn crash_during_rebalance() {
    let mut steps = appends(11, 6, 600);
    steps.push(Step::Commit);
    steps.push(Step::Modify(2, 0, support::bytes(500, 111)));
    steps.push(Step::Delete(0));
    steps.push(Step::Commit);
    steps.push(Step::Rebalance);
    steps.extend(appends(12, 2, 600));
    steps.push(Step::Delete(1));
    steps.push(Step::Rebalance);
    steps.push(Step::Reopen);
    steps.extend(appends(13, 1, 600));
    steps.push(Step::Commit);
    check(&Workload {
        name: "rebalance",
        schema: support::schema(1500),
        config: config(700),
        steps,
    });
}

/// Caption-like text (a dictionary helps), a different one per `seed`.
fn caption(seed: u64) -> Vec<u8> {
    const WORDS: [&str; 16] = [
        "a", "photo", "of", "the", "red", "dog", "on", "beach", "at", "sunset", "with", "blue",
        "sky", "small", "boat", "city",
    ];
    let mut r = Rng(seed);
    let n = 20 + r.below(40);
    let words: Vec<&str> = (0..n).map(|_| WORDS[r.below(16) as usize]).collect();
    words.join(" ").into_bytes()
}

#[test]
fn crash_during_a_retraining_rebalance() {
    let text = |seed: u64| vec![caption(seed), support::bytes(8, seed)];
    // The writer trains its own dictionary after 4 KiB of captions: the first records are
    // plain zstd, the later ones name dictionary 1; the rebalance writes dictionary 2, names
    // only it, and removes dictionary 1's file after its commit.
    let mut steps: Vec<Step> = (0..40).map(|i| Step::Append(text(i))).collect();
    steps.push(Step::Commit);
    steps.push(Step::Delete(3));
    steps.push(Step::RebalanceRetraining);
    steps.extend((40..43).map(|i| Step::Append(text(i))));
    steps.push(Step::Commit);
    steps.push(Step::Reopen);
    steps.push(Step::Append(text(43)));
    steps.push(Step::Commit);
    check(&Workload {
        name: "rebalance-retraining",
        schema: zrecord::Schema::new()
            .field(
                zrecord::Field::new("a", zrecord::DType::Bytes).codec(zrecord::Codec::zstd_dict()),
            )
            .field(zrecord::Field::new("b", zrecord::DType::U8))
            .chunk_size_bytes(4096),
        config: config(1500).dictionary_sample_bytes(4096),
        steps,
    });
}

/// A seeded mix of 50 operations, with 1 to 4 append tasks.
fn mix(seed: u64) -> Workload {
    let mut r = Rng(seed);
    let mut steps = Vec::new();
    while steps.len() < 50 {
        let step = match r.below(100) {
            0..35 => Step::Append(record(r.next(), 1500)),
            35..50 => Step::Modify(
                r.next(),
                r.below(2) as usize,
                support::bytes(r.below(1200) as usize, r.next()),
            ),
            50..55 => Step::ModifyRecord(r.next(), record(r.next(), 1500)),
            55..70 => Step::Delete(r.next()),
            70..90 => Step::Commit,
            90..93 => Step::CompactCommit,
            93..95 => Step::Rebalance,
            _ => Step::Reopen,
        };
        steps.push(step);
    }
    steps.push(Step::Commit);
    Workload {
        name: "mix",
        schema: support::schema(4096),
        // 1 to 4 append tasks: their writes interleave differently from run to run, and every
        // interleaving must recover to a commit.
        config: config(1000).num_writers(1 + (seed % 4) as usize),
        steps,
    }
}

#[test]
fn crash_during_seeded_mix() {
    let seeds = support::count("ZRECORD_CRASH_SEEDS", 6, 24);
    let mut total = Stats::default();
    for seed in 1..=seeds {
        let s = check(&mix(seed));
        total.crash_points += s.crash_points;
        total.images += s.images;
        total.distinct += s.distinct;
    }
    println!("mix, {seeds} seeds: {total:?}");
}
