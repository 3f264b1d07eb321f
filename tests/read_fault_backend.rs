//! A read backend written against the public `ReadBackend` trait plugs into the engine: passing
//! reads through it returns the model's bytes, and every fault it injects (an I/O error, a
//! flipped bit, a short read) reaches the caller as a typed error naming the file and offset
//! or the record, never as wrong bytes.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::needless_range_loop
)]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use support::{record, Rec, Rng};
use zrecord::{
    Backend, Dataset, Error, ReadBackend, ReadConfig, ReadJob, Writer, WriterConfig, ZeroCopy,
};

/// What the fault backend does to the read it targets.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    None,
    /// The read fails with EIO.
    Eio,
    /// One bit of the read's bytes flips after it lands.
    FlipBit,
    /// The read delivers fewer bytes than it needs.
    Short,
}

/// Wraps zrecord's pread backend; injects `fault` into the `target`-th read it sees.
#[derive(Debug)]
struct FaultBackend {
    inner: Arc<dyn ReadBackend>,
    fault: Mutex<Fault>,
    target: AtomicUsize,
    seen: AtomicUsize,
}

impl ReadBackend for FaultBackend {
    fn name(&self) -> &str {
        "fault"
    }

    fn read(&self, job: ReadJob) -> zrecord::Result<ReadJob> {
        let fault = *self.fault.lock().unwrap();
        let first = self.seen.fetch_add(job.len(), Ordering::SeqCst);
        let target = self.target.load(Ordering::SeqCst);
        let hit = (first..first + job.len())
            .contains(&target)
            .then(|| target - first);
        match (fault, hit) {
            (Fault::Eio, Some(op)) => {
                let r = job.range(op).unwrap();
                Err(Error::ReadFailed {
                    path: r.path.to_path_buf(),
                    offset: r.offset,
                    source: std::io::Error::from_raw_os_error(5),
                })
            }
            (Fault::Short, Some(op)) => {
                let mut job = self.inner.read(job)?;
                let data = job.read_back(op).unwrap();
                let need = job.range(op).unwrap().need;
                // The engine's contract refuses fewer bytes than a read needs.
                let err = job.fill(op, &data[..need - 1]).unwrap_err();
                let r = job.range(op).unwrap();
                Err(Error::ReadFailed {
                    path: r.path.to_path_buf(),
                    offset: r.offset,
                    source: err,
                })
            }
            (Fault::FlipBit, Some(op)) => {
                let mut job = self.inner.read(job)?;
                let mut data = job.read_back(op).unwrap();
                let at = data.len() / 2;
                data[at] ^= 0x10;
                job.fill(op, &data).unwrap();
                Ok(job)
            }
            _ => self.inner.read(job),
        }
    }

    fn zero_copy(&self) -> ZeroCopy {
        ZeroCopy::Never
    }
}

fn build(dir: &std::path::Path) -> Vec<Rec> {
    let mut w = Writer::create(dir, &support::schema(1 << 20), WriterConfig::default()).unwrap();
    let model: Vec<Rec> = (0..300).map(|i| record(i, 3000)).collect();
    for r in &model {
        w.append(r).unwrap();
    }
    w.commit().unwrap();
    model
}

fn fault_backend() -> Arc<FaultBackend> {
    let inner = zrecord::read_backend(&ReadConfig::default().with_backend(Backend::Psync)).unwrap();
    Arc::new(FaultBackend {
        inner,
        fault: Mutex::new(Fault::None),
        target: AtomicUsize::new(usize::MAX),
        seen: AtomicUsize::new(0),
    })
}

#[test]
fn a_custom_backend_returns_the_models_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let model = build(&dir);
    let fb = fault_backend();
    let ds =
        Dataset::open_with(&dir, ReadConfig::default().with_custom_backend(fb.clone())).unwrap();
    assert_eq!(ds.backend_name(), "fault");
    assert_eq!(ds.backend(), None);
    let mut r = Rng(3);
    for _ in 0..10 {
        let idx: Vec<u64> = (0..64).map(|_| r.below(model.len() as u64)).collect();
        let b = ds.gather_blocking(&idx).unwrap();
        for (k, &i) in idx.iter().enumerate() {
            for f in 0..2 {
                assert_eq!(b.get(k, f).unwrap(), &model[i as usize][f][..]);
            }
        }
    }
    assert!(
        fb.seen.load(Ordering::SeqCst) > 0,
        "the custom backend was not used"
    );
}

#[test]
fn every_injected_fault_is_a_typed_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let model = build(&dir);
    let chunk_dir = dir.join("chunk");
    for fault in [Fault::Eio, Fault::FlipBit, Fault::Short] {
        for target in [0usize, 1, 5] {
            let fb = fault_backend();
            *fb.fault.lock().unwrap() = fault;
            fb.target.store(target, Ordering::SeqCst);
            let ds =
                Dataset::open_with(&dir, ReadConfig::default().with_custom_backend(fb.clone()))
                    .unwrap();
            // Random indices, so the batch has several reads.
            let mut r = Rng(target as u64 + 11);
            let idx: Vec<u64> = (0..200).map(|_| r.below(model.len() as u64)).collect();
            let err = ds.gather_blocking(&idx).unwrap_err();
            match (fault, &err) {
                (Fault::Eio | Fault::Short, Error::ReadFailed { path, .. }) => {
                    assert!(path.starts_with(&chunk_dir), "{err}");
                }
                (Fault::FlipBit, Error::ChecksumMismatch { path, field, .. }) => {
                    assert!(path.starts_with(&chunk_dir), "{err}");
                    assert!(field == "a" || field == "b", "{err}");
                }
                // A flipped bit inside a deflate stream may break the stream before the
                // checksum is looked at: a decompression error names the record the same way.
                (Fault::FlipBit, Error::Decompress { path, .. }) => {
                    assert!(path.starts_with(&chunk_dir), "{err}");
                }
                _ => panic!("{fault:?} at read {target}: unexpected {err:?}"),
            }
            // The dataset is unharmed: the same batch reads clean once the fault is gone.
            *fb.fault.lock().unwrap() = Fault::None;
            let b = ds.gather_blocking(&idx).unwrap();
            for (k, &i) in idx.iter().enumerate() {
                assert_eq!(b.get(k, 1).unwrap(), &model[i as usize][1][..]);
            }
        }
    }
}
