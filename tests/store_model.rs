//! Any sequence of append / append_many / modify / delete / commit / reopen / get / gather, with any
//! number of append tasks and any job size, leaves the dataset equal, byte for byte, to a plain
//! `Vec<Vec<u8>>`-per-field model of its last commit.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod support;

use proptest::prelude::*;
use proptest::sample::Index;
use std::path::Path;
use zrecord::{
    Backend, Codec, DType, Dataset, Error, Field, ReadConfig, Schema, Writer, WriterConfig,
};

const CHUNK: u64 = 8192;
const MAX: usize = (1 << 24) - 1;

type Rec = Vec<Vec<u8>>;

/// A record size drawn from the interesting places: empty, tiny, around a page, around the chunk
/// size, and the largest record the format allows.
fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        20 => Just(0usize),
        20 => Just(1usize),
        30 => 2usize..300,
        20 => 4095usize..=4097,
        15 => (CHUNK as usize - 40)..=(CHUNK as usize + 40),
        1 => Just(MAX),
    ]
}

/// Bytes of `len`, compressible or not depending on `seed`.
fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    if seed.is_multiple_of(2) {
        return (0..len).map(|i| ((i as u64 % 17) ^ seed) as u8).collect();
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

#[derive(Clone, Debug)]
enum Op {
    Append(usize, u64, usize, u64),
    AppendMany(Vec<(usize, u64, usize, u64)>),
    Modify(Index, bool, usize, u64),
    ModifyRecord(Index, usize, u64),
    Delete(Index),
    Commit,
    Reopen,
    Get(Index),
    Gather(Vec<Index>),
    GetOutOfRange,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        30 => (size(), any::<u64>(), size(), any::<u64>()).prop_map(|(a, b, c, d)| Op::Append(a, b, c, d)),
        4 => prop::collection::vec((size(), any::<u64>(), size(), any::<u64>()), 0..12).prop_map(Op::AppendMany),
        8 => (any::<Index>(), any::<bool>(), size(), any::<u64>()).prop_map(|(i, f, s, x)| Op::Modify(i, f, s, x)),
        4 => (any::<Index>(), size(), any::<u64>()).prop_map(|(i, s, x)| Op::ModifyRecord(i, s, x)),
        10 => any::<Index>().prop_map(Op::Delete),
        10 => Just(Op::Commit),
        3 => Just(Op::Reopen),
        6 => any::<Index>().prop_map(Op::Get),
        6 => prop::collection::vec(any::<Index>(), 0..20).prop_map(Op::Gather),
        1 => Just(Op::GetOutOfRange),
    ]
}

fn schema() -> Schema {
    Schema::new()
        .field(Field::new("a", DType::Bytes).codec(Codec::Deflate))
        .field(Field::new("b", DType::U8))
        .chunk_size_bytes(CHUNK)
}

fn check_all(dir: &Path, model: &[Rec]) {
    let ds = Dataset::open(dir).unwrap();
    assert_eq!(ds.len(), model.len() as u64);
    for (i, rec) in model.iter().enumerate() {
        let got = ds.get(i as u64).unwrap();
        assert_eq!(got.len(), 2);
        for f in 0..2 {
            assert!(
                got[f][..] == rec[f][..],
                "record {i} field {f}: {} vs {} bytes",
                got[f].len(),
                rec[f].len()
            );
        }
    }
}

fn run(ops: Vec<Op>, backend: Backend, direct: bool, config: WriterConfig) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let mut w = Writer::create(&dir, &schema(), config.clone()).unwrap();
    let opts = ReadConfig::default()
        .with_backend(backend)
        .with_direct_io(direct);
    let ds = Dataset::open_with(&dir, opts).unwrap();
    // Slab-served values are 64-byte aligned; the mmap path hands out unaligned zero-copy slices.
    let aligned = matches!(ds.backend(), Some(Backend::Uring | Backend::Psync));
    let mut committed: Vec<Rec> = Vec::new();
    let mut working: Vec<Rec> = Vec::new();
    for op in ops {
        match op {
            Op::Append(s1, x1, s2, x2) => {
                let rec = vec![bytes(s1, x1), bytes(s2, x2)];
                assert_eq!(w.append(&rec).unwrap(), working.len() as u64);
                working.push(rec);
            }
            Op::AppendMany(recs) => {
                let recs: Vec<Rec> = recs
                    .into_iter()
                    .map(|(s1, x1, s2, x2)| vec![bytes(s1, x1), bytes(s2, x2)])
                    .collect();
                let n = working.len() as u64;
                assert_eq!(w.append_many(&recs).unwrap(), n..n + recs.len() as u64);
                working.extend(recs);
            }
            Op::Modify(i, f, s, x) => {
                if working.is_empty() {
                    assert!(matches!(
                        w.modify(0, "a", b"x"),
                        Err(Error::IndexOutOfRange { .. })
                    ));
                    continue;
                }
                let i = i.index(working.len());
                let data = bytes(s, x);
                w.modify(i as u64, if f { "a" } else { "b" }, &data)
                    .unwrap();
                working[i][usize::from(!f)] = data;
            }
            Op::ModifyRecord(i, s, x) => {
                if working.is_empty() {
                    continue;
                }
                let i = i.index(working.len());
                let rec = vec![bytes(s, x), bytes(s / 2, x ^ 1)];
                w.modify_record(i as u64, &rec).unwrap();
                working[i] = rec;
            }
            Op::Delete(i) => {
                if working.is_empty() {
                    assert!(matches!(w.delete(0), Err(Error::IndexOutOfRange { .. })));
                    continue;
                }
                let i = i.index(working.len());
                w.delete(i as u64).unwrap();
                working.swap_remove(i);
            }
            Op::Commit => {
                w.commit().unwrap();
                committed = working.clone();
                assert!(ds.refresh().unwrap());
                assert_eq!(ds.len(), committed.len() as u64);
            }
            Op::Reopen => {
                drop(w);
                check_all(&dir, &committed);
                w = Writer::open(&dir, config.clone()).unwrap();
                working = committed.clone();
            }
            Op::Get(i) => {
                if committed.is_empty() {
                    continue;
                }
                let i = i.index(committed.len());
                let got = ds.get(i as u64).unwrap();
                assert!(
                    got[0][..] == committed[i][0][..] && got[1][..] == committed[i][1][..],
                    "get {i}"
                );
            }
            Op::Gather(idx) => {
                if committed.is_empty() {
                    continue;
                }
                let idx: Vec<u64> = idx
                    .iter()
                    .map(|i| i.index(committed.len()) as u64)
                    .collect();
                let b = ds.gather_blocking(&idx).unwrap();
                assert_eq!(b.len(), idx.len());
                for (r, &i) in idx.iter().enumerate() {
                    for (f, want) in committed[i as usize].iter().enumerate() {
                        let got = b.get(r, f).unwrap();
                        assert!(got == &want[..], "gather slot {r} index {i} field {f}");
                        if aligned && !got.is_empty() {
                            assert_eq!(got.as_ptr() as usize % 64, 0);
                        }
                    }
                }
            }
            Op::GetOutOfRange => {
                let n = committed.len() as u64;
                assert!(
                    matches!(ds.get(n), Err(Error::IndexOutOfRange { index, len }) if index == n && len == n)
                );
                assert!(matches!(
                    ds.gather_blocking(&[0, n]),
                    Err(Error::IndexOutOfRange { .. })
                ));
            }
        }
    }
    w.commit().unwrap();
    drop(w);
    check_all(&dir, &working);
}

fn cases() -> u32 {
    support::count("ZRECORD_MODEL_CASES", 120, 1000) as u32
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_model(
        ops in prop::collection::vec(op(), 1..200),
        backend in prop::sample::select(vec![Backend::Auto, Backend::Uring, Backend::Psync, Backend::Mmap]),
        direct in prop::bool::weighted(0.2),
        num_writers in 1usize..=4,
        write_buffer_bytes in prop::sample::select(vec![1usize, 300, 5000, 4 << 20]),
        queue_depth in 1usize..=3,
    ) {
        let config = WriterConfig::default()
            .deflate_level(1)
            .write_buffer_bytes(write_buffer_bytes)
            .num_writers(num_writers)
            .queue_depth(queue_depth);
        run(ops, backend, direct, config);
    }
}
