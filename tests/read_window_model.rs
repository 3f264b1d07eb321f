//! Any interleaving of announce (lookahead), gather, append, modify, delete, rebalance, refresh
//! and drop-and-recreate of the dataset at one path, on every backend, with and without
//! `O_DIRECT` and checksums, gives gathers that return exactly the bytes their snapshot
//! committed (a plain `Vec<Vec<u8>>` model per snapshot), or `ChunkGone` for a snapshot whose
//! files a later writer removed: never another file's bytes, never zeros, never a checksum
//! error on a healthy dataset.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use proptest::prelude::*;
use proptest::sample::Index;
use std::path::Path;
use zrecord::pipeline::Source;
use zrecord::{
    Backend, Codec, DType, Dataset, Error, Field, ReadConfig, Schema, Writer, WriterConfig,
};

/// Small chunks: rebalances and appends free and reuse chunk ids often.
const CHUNK: u64 = 12 << 10;

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        10 => Just(0usize),
        40 => 1usize..300,
        20 => 3000usize..5000,
        10 => 4090usize..4100,
    ]
}

/// Distinct bytes for each `(tag, len)`: every write of the run is told apart from every other.
fn value(tag: u64, len: usize) -> Vec<u8> {
    let mut x = tag.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[derive(Clone, Debug)]
enum Op {
    /// Announce some indices on the reader (its lookahead session).
    Announce(Vec<Index>),
    /// Gather some indices on the reader, and on the kept old reader if any.
    Gather(Vec<Index>),
    /// Gather the indices last announced (the window keeps reads for exactly those).
    GatherAnnounced,
    Append(Vec<usize>),
    Modify(Index, usize),
    /// Modify the last of the indices last announced (likely at the end of its chunk).
    ModifyAnnounced(usize),
    Delete(Index),
    Rebalance,
    Refresh,
    /// Keep the reader as the old one and open a new reader.
    Reopen,
    /// Remove the dataset and create another at the same path (same sizes, other bytes).
    Recreate,
}

fn op() -> impl Strategy<Value = Op> {
    let idx = || prop::collection::vec(any::<Index>(), 1..12);
    prop_oneof![
        20 => idx().prop_map(Op::Announce),
        15 => idx().prop_map(Op::Gather),
        15 => Just(Op::GatherAnnounced),
        10 => prop::collection::vec(size(), 1..6).prop_map(Op::Append),
        8 => (any::<Index>(), size()).prop_map(|(i, s)| Op::Modify(i, s)),
        8 => (1usize..200).prop_map(Op::ModifyAnnounced),
        6 => any::<Index>().prop_map(Op::Delete),
        4 => Just(Op::Rebalance),
        10 => Just(Op::Refresh),
        4 => Just(Op::Reopen),
        3 => Just(Op::Recreate),
    ]
}

fn config() -> impl Strategy<Value = ReadConfig> {
    (
        prop_oneof![
            Just(Backend::Uring),
            Just(Backend::Psync),
            Just(Backend::Auto),
            Just(Backend::Mmap)
        ],
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(b, direct, verify)| {
            ReadConfig::default()
                .with_backend(b)
                .with_direct_io(direct)
                .with_verify_checksums(verify)
        })
}

/// A lookahead session id never used before in this process (the window ignores the
/// announcements of a session that ended).
fn session() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1 << 40);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// A reader: a dataset handle, its lookahead session and the model of its snapshot.
struct Reader {
    ds: Dataset,
    session: u64,
    model: Vec<Vec<u8>>,
}

impl Drop for Reader {
    fn drop(&mut self) {
        Source::end_lookahead(&self.ds, self.session);
    }
}

struct World {
    dir: std::path::PathBuf,
    config: ReadConfig,
    /// The last commit.
    committed: Vec<Vec<u8>>,
    reader: Reader,
    old: Option<Reader>,
    tag: u64,
    /// The indices last announced on the reader.
    announced: Vec<u64>,
    /// Every change made so far: a re-created dataset replays them with other bytes, so its
    /// files have the same layout (the writer is deterministic) and the window's kept ranges
    /// of the removed files match its reads.
    log: Vec<Change>,
    codec: Codec,
}

/// A committed change.
#[derive(Clone, Debug)]
enum Change {
    Append(Vec<usize>),
    Modify(usize, usize),
    Delete(usize),
    Rebalance,
}

fn schema(codec: Codec) -> Schema {
    Schema::new()
        .field(Field::new("x", DType::U8).codec(codec))
        .chunk_size_bytes(CHUNK)
}

/// One append task: records, modified values and rebalanced chunks follow one another in
/// file order, so a modified value often lands in the block its old value shared.
fn writer_config() -> WriterConfig {
    WriterConfig::default().num_writers(1)
}

impl World {
    /// Makes `change` (from a new writer, committed), drawing values from `tag`.
    fn apply(dir: &Path, change: &Change, tag: &mut u64, committed: &mut Vec<Vec<u8>>) {
        let mut w = Writer::open(dir, writer_config()).unwrap();
        match change {
            Change::Append(sizes) => {
                for &s in sizes {
                    *tag += 1;
                    let v = value(*tag, s);
                    w.append(&[&v]).unwrap();
                    committed.push(v);
                }
            }
            Change::Modify(i, s) => {
                *tag += 1;
                let v = value(*tag, *s);
                w.modify(*i as u64, "x", &v).unwrap();
                committed[*i] = v;
            }
            Change::Delete(i) => {
                w.delete(*i as u64).unwrap();
                committed.swap_remove(*i);
            }
            Change::Rebalance => {
                w.rebalance().unwrap();
            }
        }
        w.commit().unwrap();
    }

    /// Makes `change` and logs it.
    fn change(&mut self, change: Change) {
        World::apply(&self.dir, &change, &mut self.tag, &mut self.committed);
        self.log.push(change);
    }

    /// Removes the dataset and creates it again by the same changes with other bytes.
    fn recreate(&mut self) {
        std::fs::remove_dir_all(&self.dir).unwrap();
        drop(Writer::create(&self.dir, &schema(self.codec), writer_config()).unwrap());
        self.committed.clear();
        for change in &self.log {
            World::apply(&self.dir, change, &mut self.tag, &mut self.committed);
        }
    }

    fn open(&mut self) -> Reader {
        Reader {
            ds: Dataset::open_with(&self.dir, self.config.clone()).unwrap(),
            session: session(),
            model: self.committed.clone(),
        }
    }
}

/// The indices `idx` picks in `r`'s snapshot.
fn pick(r: &Reader, idx: &[Index]) -> Vec<u64> {
    if r.model.is_empty() {
        return Vec::new();
    }
    idx.iter().map(|i| i.index(r.model.len()) as u64).collect()
}

/// Gathers `indices` from `r`: the snapshot's bytes, or `ChunkGone` if `may_be_gone`.
fn check_gather(r: &Reader, indices: &[u64], may_be_gone: bool, what: &str) -> Result<(), String> {
    if indices.is_empty() {
        return Ok(());
    }
    match r.ds.gather_blocking(indices) {
        Ok(b) => {
            for (k, &i) in indices.iter().enumerate() {
                let got = b.get(k, 0).unwrap();
                if got != &r.model[i as usize][..] {
                    return Err(format!(
                        "{what}: record {i} has {} bytes that are not its snapshot's ({} bytes)",
                        got.len(),
                        r.model[i as usize].len()
                    ));
                }
            }
            Ok(())
        }
        Err(Error::ChunkGone { .. }) if may_be_gone => Ok(()),
        Err(e) => Err(format!("{what}: gather of {indices:?} failed: {e}")),
    }
}

fn run(config: ReadConfig, codec: Codec, initial: Vec<usize>, ops: Vec<Op>) -> Result<(), String> {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    drop(Writer::create(&dir, &schema(codec), writer_config()).unwrap());
    let mut tag = 0;
    let mut committed = Vec::new();
    let first = Change::Append(initial);
    World::apply(&dir, &first, &mut tag, &mut committed);
    let reader = Reader {
        ds: Dataset::open_with(&dir, config.clone()).unwrap(),
        session: session(),
        model: committed.clone(),
    };
    let mut w = World {
        dir,
        config,
        committed,
        reader,
        old: None,
        tag,
        announced: Vec::new(),
        log: vec![first],
        codec,
    };
    // The reader's files are removed once a writer opens after a commit that stopped naming
    // them (a rebalance, or a modify or delete that emptied a chunk) or the dataset is
    // re-created; until its next refresh, its reads may find them gone.
    let mut reader_may_be_gone = false;
    for (step, op) in ops.into_iter().enumerate() {
        let what = format!("step {step} ({op:?})");
        match op {
            Op::Announce(idx) => {
                let indices = pick(&w.reader, &idx);
                if !indices.is_empty() {
                    Source::lookahead(&w.reader.ds, w.reader.session, &indices);
                }
                w.announced = indices;
            }
            Op::GatherAnnounced => {
                let n = w.reader.model.len() as u64;
                let indices: Vec<u64> = w.announced.iter().copied().filter(|&i| i < n).collect();
                check_gather(&w.reader, &indices, reader_may_be_gone, &what)?;
            }
            Op::Gather(idx) => {
                check_gather(&w.reader, &pick(&w.reader, &idx), reader_may_be_gone, &what)?;
                if let Some(old) = &w.old {
                    let what = format!("{what}, old reader");
                    check_gather(old, &pick(old, &idx), true, &what)?;
                }
            }
            Op::Append(sizes) => {
                w.change(Change::Append(sizes));
                reader_may_be_gone = true;
            }
            Op::Modify(i, s) => {
                if !w.committed.is_empty() {
                    let i = i.index(w.committed.len());
                    w.change(Change::Modify(i, s));
                    reader_may_be_gone = true;
                }
            }
            Op::ModifyAnnounced(s) => {
                let n = w.committed.len() as u64;
                if let Some(&i) = w.announced.iter().filter(|&&i| i < n).max() {
                    w.change(Change::Modify(i as usize, s));
                    reader_may_be_gone = true;
                }
            }
            Op::Delete(i) => {
                if !w.committed.is_empty() {
                    let i = i.index(w.committed.len());
                    w.change(Change::Delete(i));
                    reader_may_be_gone = true;
                }
            }
            Op::Rebalance => {
                w.change(Change::Rebalance);
                reader_may_be_gone = true;
            }
            Op::Refresh => {
                w.reader
                    .ds
                    .refresh()
                    .map_err(|e| format!("{what}: refresh failed: {e}"))?;
                w.reader.model = w.committed.clone();
                reader_may_be_gone = false;
            }
            Op::Reopen => {
                let new = w.open();
                w.old = Some(std::mem::replace(&mut w.reader, new));
                reader_may_be_gone = false;
            }
            Op::Recreate => {
                w.recreate();
                reader_may_be_gone = true;
            }
        }
    }
    // Every record of the last commit, through a fresh reader and through the refreshed one.
    let all: Vec<u64> = (0..w.committed.len() as u64).collect();
    w.reader
        .ds
        .refresh()
        .map_err(|e| format!("final refresh failed: {e}"))?;
    w.reader.model = w.committed.clone();
    check_gather(&w.reader, &all, false, "final, refreshed reader")?;
    let fresh = w.open();
    check_gather(&fresh, &all, false, "final, fresh reader")?;
    Ok(())
}

fn cases() -> u32 {
    std::env::var("ZRECORD_WINDOW_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        max_shrink_iters: 200,
        ..ProptestConfig::default()
    })]

    #[test]
    fn gathers_return_their_snapshots_bytes_whatever_the_window_kept(
        config in config(),
        codec in prop_oneof![3 => Just(Codec::Raw), 1 => Just(Codec::Deflate)],
        initial in prop::collection::vec(size(), 1..24),
        ops in prop::collection::vec(op(), 1..40),
    ) {
        if let Err(e) = run(config.clone(), codec, initial, ops) {
            return Err(TestCaseError::fail(format!("{config:?}, {codec:?}: {e}")));
        }
    }
}
