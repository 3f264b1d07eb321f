//! Workloads, a `Vec<Vec<u8>>`-per-field model, and the check of a dataset on disk against it,
//! shared by the crash-point and I/O-error tests.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    dead_code
)]

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use zrecord::testing::Vfs;
use zrecord::{Codec, DType, Dataset, Error, Field, Schema, Writer, WriterConfig};

/// One record: one byte string per field.
pub type Rec = Vec<Vec<u8>>;

/// The dataset's path inside the simulated file system, under the durable directory [`ROOT`].
pub const ROOT: &str = "/sim";
/// The dataset's path inside the simulated file system.
pub const DS: &str = "/sim/ds";

/// Bytes of `len`, compressible or not depending on `seed`.
pub fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    if seed.is_multiple_of(2) {
        return (0..len).map(|i| ((i as u64 % 13) ^ seed) as u8).collect();
    }
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A small deterministic generator.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Two fields: `a` deflate bytes, `b` raw u8.
pub fn schema(chunk_size_bytes: u64) -> Schema {
    Schema::new()
        .field(Field::new("a", DType::Bytes).codec(Codec::Deflate))
        .field(Field::new("b", DType::U8))
        .chunk_size_bytes(chunk_size_bytes)
}

/// A record whose sizes and contents follow from `seed`, at most `max` bytes per field.
pub fn record(seed: u64, max: usize) -> Rec {
    let mut r = Rng(seed);
    let a = match r.below(5) {
        0 => 0,
        _ => r.below(max as u64 + 1) as usize,
    };
    let b = match r.below(4) {
        0 => 0,
        _ => r.below(max as u64 + 1) as usize,
    };
    vec![bytes(a, r.next()), bytes(b, r.next())]
}

/// One step of a workload.
#[derive(Clone, Debug)]
pub enum Step {
    Append(Rec),
    Modify(u64, usize, Vec<u8>),
    ModifyRecord(u64, Rec),
    Delete(u64),
    Commit,
    /// Commit, writing every table as a new generation.
    CompactCommit,
    /// Drop the writer and open it again (recovery runs on the simulated file system too).
    Reopen,
    /// Rebalance (commits pending changes first, then commits the rewrite).
    Rebalance,
    /// Rebalance retraining every `zstd_dict` field's dictionary.
    RebalanceRetraining,
}

/// A named sequence of steps on a dataset created first.
#[derive(Clone, Debug)]
pub struct Workload {
    pub name: &'static str,
    pub schema: Schema,
    pub config: WriterConfig,
    pub steps: Vec<Step>,
}

/// How far a workload got.
#[derive(Debug)]
pub struct Outcome {
    /// The model at the last acknowledged commit (`None`: the dataset's creation was not
    /// acknowledged).
    pub acked: Option<Vec<Rec>>,
    /// The model of the commit (or creation) that was running when the workload stopped.
    pub in_flight: Option<Vec<Rec>>,
    /// The error that stopped it, if any.
    pub error: Option<Error>,
    /// What the writer held when it stopped (uncommitted changes included).
    pub working: Vec<Rec>,
}

fn field_name(f: usize) -> &'static str {
    if f == 0 {
        "a"
    } else {
        "b"
    }
}

/// Runs `w` on `vfs` until it ends or a call fails. Indices in steps are taken modulo the
/// current length (steps on an empty dataset are skipped).
pub fn run(w: &Workload, vfs: Arc<dyn Vfs>, dir: &Path) -> Outcome {
    let mut out = Outcome {
        acked: None,
        in_flight: Some(Vec::new()),
        error: None,
        working: Vec::new(),
    };
    let mut writer = match Writer::create_with_vfs(vfs.clone(), dir, &w.schema, w.config.clone()) {
        Ok(wr) => wr,
        Err(e) => {
            out.error = Some(e);
            return out;
        }
    };
    out.acked = Some(Vec::new());
    out.in_flight = None;
    for step in &w.steps {
        let n = out.working.len() as u64;
        let r: Result<(), Error> = match step {
            Step::Append(rec) => writer.append(rec).map(|i| {
                assert_eq!(i, n);
                out.working.push(rec.clone());
            }),
            Step::Modify(i, f, data) if n > 0 => {
                let i = i % n;
                writer.modify(i, field_name(*f), data).map(|()| {
                    out.working[i as usize][*f] = data.clone();
                })
            }
            Step::ModifyRecord(i, rec) if n > 0 => {
                let i = i % n;
                writer.modify_record(i, rec).map(|()| {
                    out.working[i as usize] = rec.clone();
                })
            }
            Step::Delete(i) if n > 0 => {
                let i = i % n;
                writer.delete(i).map(|()| {
                    out.working.swap_remove(i as usize);
                })
            }
            Step::Modify(..) | Step::ModifyRecord(..) | Step::Delete(_) => Ok(()),
            Step::Commit | Step::CompactCommit => {
                if matches!(step, Step::CompactCommit) {
                    writer.force_compaction_at_next_commit();
                }
                out.in_flight = Some(out.working.clone());
                writer.commit().map(|_| {
                    out.acked = out.in_flight.take();
                })
            }
            Step::Rebalance | Step::RebalanceRetraining => {
                // Pending changes are committed first (a commit of their own), then the rewrite:
                // both hold the working records.
                out.in_flight = Some(out.working.clone());
                let options = zrecord::RebalanceOptions::default()
                    .retrain_dictionaries(matches!(step, Step::RebalanceRetraining));
                writer.rebalance_with(options).map(|rep| {
                    assert_eq!(rep.records, n);
                    assert_eq!(rep.chunk_bytes_after, rep.live_bytes);
                    out.acked = out.in_flight.take();
                })
            }
            Step::Reopen => {
                drop(writer);
                match Writer::open_with_vfs(vfs.clone(), dir, w.config.clone()) {
                    Ok(wr) => {
                        writer = wr;
                        out.working = out.acked.clone().unwrap_or_default();
                        Ok(())
                    }
                    Err(e) => {
                        out.error = Some(e);
                        return out;
                    }
                }
            }
        };
        if let Err(e) = r {
            // A failed writer must stay failed: every later call errors.
            assert!(
                matches!(writer.commit(), Err(Error::Poisoned { .. })),
                "{}: writer not poisoned after {e}",
                w.name
            );
            assert!(matches!(
                writer.append(&[&b"x"[..], &b""[..]]),
                Err(Error::Poisoned { .. })
            ));
            assert!(matches!(writer.rebalance(), Err(Error::Poisoned { .. })));
            out.error = Some(e);
            return out;
        }
    }
    out
}

/// A fingerprint of a model.
pub fn digest(model: &[Rec]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    model.hash(&mut h);
    h.finish()
}

/// What a dataset directory on the real file system holds after recovery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// There is no dataset directory.
    Absent,
    /// Recovery (writer open) or reading failed.
    Failed(String),
    /// Recovered and every record read back with its checksum verified: `len` records whose
    /// model has this digest.
    Data { len: usize, digest: u64 },
}

/// Reads every record of `ds` on the real file system with checksums verified, as a reader
/// would right after a crash; opens a writer (recovery) and reads again, which must give the
/// same records; then checks it is still writable: an append and a commit, read back.
pub fn evaluate(ds: &Path) -> Verdict {
    if !ds.exists() {
        return Verdict::Absent;
    }
    let fail = |what: &str, e: Error| Verdict::Failed(format!("{what}: {e}"));
    // Readers need no recovery: they see the committed state as the crash left it.
    let unrecovered = match read_all(ds) {
        Ok(m) => m,
        Err(e) => return fail("read before recovery", e),
    };
    let w = match Writer::open(ds, WriterConfig::default()) {
        Ok(w) => w,
        Err(e) => return fail("writer open", e),
    };
    drop(w);
    let model = match read_all(ds) {
        Ok(m) => m,
        Err(e) => return fail("read", e),
    };
    if model != unrecovered {
        return Verdict::Failed(format!(
            "recovery changed the records: {} before, {} after",
            unrecovered.len(),
            model.len()
        ));
    }
    let extra: Rec = vec![b"after recovery".to_vec(), vec![7u8; 3]];
    let again = Writer::open(ds, WriterConfig::default()).and_then(|mut w| {
        w.append(&extra)?;
        w.commit()
    });
    if let Err(e) = again {
        return fail("append after recovery", e);
    }
    match read_all(ds) {
        Ok(m) if m.len() == model.len() + 1 && m[..model.len()] == model[..] => {}
        Ok(m) => {
            return Verdict::Failed(format!(
                "after recovery, an append gave {} records, not {} + 1 with the old prefix",
                m.len(),
                model.len()
            ))
        }
        Err(e) => return fail("read after append", e),
    }
    Verdict::Data {
        len: model.len(),
        digest: digest(&model),
    }
}

/// Every record of the dataset at `ds`, read in one gather with checksums verified.
pub fn read_all(ds: &Path) -> Result<Vec<Rec>, Error> {
    let d = Dataset::open(ds)?;
    let idx: Vec<u64> = (0..d.len()).collect();
    let b = d.gather_blocking(&idx)?;
    Ok((0..idx.len())
        .map(|r| (0..2).map(|f| b.get(r, f).unwrap().to_vec()).collect())
        .collect())
}

/// A scratch directory, on `/dev/shm` when it exists (images are many and small).
pub fn scratch() -> tempfile::TempDir {
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        if let Ok(t) = tempfile::Builder::new()
            .prefix("zrecord-crash-")
            .tempdir_in(&shm)
        {
            return t;
        }
    }
    tempfile::tempdir().unwrap()
}

/// How many cases a heavy test runs: `var` if set, else `heavy` when `ZRECORD_HEAVY=1` (CI),
/// else `light` (the README's test command, which a newcomer waits for).
pub fn count(var: &str, light: u64, heavy: u64) -> u64 {
    if let Some(n) = std::env::var(var).ok().and_then(|s| s.parse().ok()) {
        return n;
    }
    match std::env::var("ZRECORD_HEAVY").as_deref() {
        Ok("1") => heavy,
        _ => light,
    }
}

/// Every file under `dir` with its contents.
pub fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}
