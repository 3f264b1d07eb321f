//! A collection reads as the concatenation of its parts (empty parts included): `len`, `get`,
//! gathers (blocking and async, on every backend), record lengths and the loader (shuffled,
//! bucketed, resumed from a checkpoint) equal a plain model of the concatenated records, and a
//! gather over many parts is one batch through the engine (one backend job).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use futures::executor::block_on;
use proptest::prelude::*;
use zrecord::pipeline::{BucketConfig, Loader, PrefetchConfig, SamplerConfig, SamplerMode};
use zrecord::{
    Backend, Codec, DType, Dataset, Field, ReadBackend, ReadConfig, ReadJob, Schema, Writer,
    WriterConfig,
};

type Rec = Vec<Vec<u8>>;

fn schema() -> Schema {
    Schema::new()
        .field(Field::new("text", DType::U8).codec(Codec::Deflate))
        .field(Field::new("label", DType::I32).shape(vec![]))
        .chunk_size_bytes(4096)
}

/// Record `k` of part `p`: text of a length that varies (empty sometimes), compressible or
/// not, and the global position as a label.
fn record(p: usize, k: usize, global: usize) -> Rec {
    let len = (p * 37 + k * 11) % 300;
    let text: Vec<u8> = if k.is_multiple_of(3) {
        vec![b'a' + (p % 26) as u8; len]
    } else {
        (0..len).map(|j| (j * 7 + k * 13 + p * 101) as u8).collect()
    };
    vec![text, (global as i32).to_le_bytes().to_vec()]
}

/// Parts of `sizes` records under `dir`, committed to `dir/c` in two commits; the model.
fn build(dir: &Path, sizes: &[usize]) -> (PathBuf, Vec<Rec>) {
    let mut model = Vec::new();
    let mut parts = Vec::new();
    for (p, &n) in sizes.iter().enumerate() {
        let path = dir.join(format!("part-{p}"));
        let mut w = Writer::create(&path, &schema(), WriterConfig::default()).unwrap();
        for k in 0..n {
            let rec = record(p, k, model.len());
            w.append(&rec).unwrap();
            model.push(rec);
        }
        w.commit().unwrap();
        parts.push(path);
    }
    let root = dir.join("c");
    let half = parts.len() / 2;
    if half > 0 {
        zrecord::collection::commit(&root, &parts[..half], Default::default()).unwrap();
    }
    let r = zrecord::collection::commit(&root, &parts[half..], Default::default()).unwrap();
    assert_eq!(r.len, model.len() as u64);
    assert_eq!(r.parts, sizes.len());
    (root, model)
}

fn check_batch(batch: &zrecord::Batch, indices: &[u64], model: &[Rec]) {
    assert_eq!(batch.indices(), indices);
    for (r, &i) in indices.iter().enumerate() {
        for (f, want) in model[i as usize].iter().enumerate() {
            assert_eq!(batch.get(r, f).unwrap(), &want[..], "record {i} field {f}");
        }
        assert_eq!(batch.typed::<i32>(r, 1).unwrap(), &[i as i32]);
    }
}

fn check(root: &Path, model: &[Rec], seed: u64) {
    let n = model.len() as u64;
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for backend in [Backend::Psync, Backend::Mmap, Backend::Auto, Backend::Uring] {
        let ds = Dataset::open_with(root, ReadConfig::default().with_backend(backend)).unwrap();
        assert_eq!(ds.len(), n);
        let snap = ds.snapshot();
        assert!(snap.is_collection());
        for i in 0..n {
            assert_eq!(
                snap.record_len(0, i).unwrap(),
                model[i as usize][0].len() as u64
            );
        }
        let mut lens = Vec::new();
        let all: Vec<u64> = (0..n).collect();
        snap.add_record_lens(0, &all, &mut lens).unwrap();
        assert_eq!(
            lens,
            model.iter().map(|r| r[0].len() as u64).collect::<Vec<_>>()
        );
        if n == 0 {
            assert!(matches!(
                ds.get(0),
                Err(zrecord::Error::IndexOutOfRange { index: 0, len: 0 })
            ));
            continue;
        }
        let indices: Vec<u64> = (0..257).map(|_| next() % n).collect();
        check_batch(&ds.gather_blocking(&indices).unwrap(), &indices, model);
        check_batch(&block_on(ds.gather(&indices)).unwrap(), &indices, model);
        let one = next() % n;
        let got = ds.get(one).unwrap();
        assert_eq!(got[0][..], model[one as usize][0][..]);
        assert!(matches!(
            ds.get(n),
            Err(zrecord::Error::IndexOutOfRange { .. })
        ));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    #[test]
    fn a_collection_is_its_parts_concatenated(
        sizes in prop::collection::vec(prop_oneof![Just(0usize), 1usize..40, 100usize..160], 1..7),
        seed in any::<u64>(),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let (root, model) = build(tmp.path(), &sizes);
        check(&root, &model, seed);
    }
}

/// A backend that counts the jobs it reads and the files they name.
#[derive(Debug)]
struct Counting {
    inner: Arc<dyn ReadBackend>,
    jobs: AtomicUsize,
}

impl ReadBackend for Counting {
    fn name(&self) -> &str {
        "counting"
    }

    fn read(&self, job: ReadJob) -> zrecord::Result<ReadJob> {
        self.jobs.fetch_add(1, Ordering::SeqCst);
        self.inner.read(job)
    }
}

#[test]
fn a_gather_over_many_parts_is_one_job() {
    let tmp = tempfile::tempdir().unwrap();
    let sizes = vec![20; 12];
    let (root, model) = build(tmp.path(), &sizes);
    let counting = Arc::new(Counting {
        inner: zrecord::read_backend(&ReadConfig::default().with_backend(Backend::Psync)).unwrap(),
        jobs: AtomicUsize::new(0),
    });
    let ds = Dataset::open_with(
        &root,
        ReadConfig::default().with_custom_backend(Arc::clone(&counting) as Arc<dyn ReadBackend>),
    )
    .unwrap();
    // One record of every part, in reverse order.
    let indices: Vec<u64> = (0..12u64).rev().map(|p| p * 20 + p).collect();
    check_batch(&ds.gather_blocking(&indices).unwrap(), &indices, &model);
    assert_eq!(counting.jobs.load(Ordering::SeqCst), 1);
}

#[test]
fn the_loader_reads_a_collection_and_resumes_on_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, model) = build(tmp.path(), &[50, 0, 7, 120, 1, 60]);
    let ds = Arc::new(Dataset::open(&root).unwrap());
    let builder = || {
        Loader::builder(Arc::clone(&ds))
            .sampler(
                SamplerConfig::default()
                    .mode(SamplerMode::Shuffled)
                    .seed(5)
                    .epochs(Some(2)),
            )
            .bucket(BucketConfig::default().buffer_size(32).pack_size(4).seed(5))
            .batch_size(8)
            .prefetch(PrefetchConfig::default().num_workers(2))
    };
    let mut whole = Vec::new();
    let mut loader = builder().build().unwrap();
    let mut state = None;
    let mut per_epoch = vec![Vec::new(), Vec::new()];
    while let Some(b) = block_on(loader.next()) {
        let b = b.unwrap();
        let indices = b.indices();
        check_batch(&b.data, &indices, &model);
        per_epoch[b.epoch() as usize].extend_from_slice(&indices);
        whole.push(indices);
        if whole.len() == 9 {
            state = Some(loader.state());
        }
    }
    for mut e in per_epoch {
        e.sort_unstable();
        assert_eq!(e, (0..model.len() as u64).collect::<Vec<_>>());
    }
    // The resumed loader yields what the uninterrupted one yielded after the checkpoint.
    let mut resumed = builder().resume(&state.unwrap()).unwrap();
    let mut rest = Vec::new();
    while let Some(b) = block_on(resumed.next()) {
        rest.push(b.unwrap().indices());
    }
    assert_eq!(rest, whole[9..]);
}
