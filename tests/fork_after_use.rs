//! After `fork()`, a child reads a dataset its parent already read from (every backend, local and `s3://`, while a parent thread is mid-gather): its gathers, async gathers, snapshot reads, new opens and loaders return the right bytes and never hang, and the parent's own reads keep working.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[cfg(feature = "remote")]
#[path = "support/s3.rs"]
mod s3;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zrecord::pipeline::{DatasetSource, Loader, PrefetchConfig};
use zrecord::{Backend, Codec, DType, Dataset, Field, ReadConfig, Schema, Writer, WriterConfig};

const N: u64 = 3000;

/// Field 0 is raw, field 1 deflate and field 2 zstd with a dictionary (both compressible);
/// sizes from empty to a few pages.
fn value(i: u64, field: usize) -> Vec<u8> {
    let len = ((i * 37 + field as u64 * 11) % 2900) as usize;
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (field as u64 + 1);
    (0..len)
        .map(|j| {
            if field >= 1 && j % 5 != 0 {
                return (j % 11) as u8;
            }
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A dataset of [`N`] records in chunks of 256 KiB (some 30 chunk files).
fn build(dir: &Path) {
    let schema = Schema::new()
        .field(Field::new("raw", DType::U8))
        .field(Field::new("packed", DType::U8).codec(Codec::Deflate))
        .field(Field::new("zstd", DType::U8).codec(Codec::zstd_dict()))
        .chunk_size_bytes(256 << 10);
    // A small dictionary sample: most records name the trained dictionary.
    let config = WriterConfig::default()
        .dictionary_sample_bytes(256 << 10)
        .write_buffer_bytes(64 << 10);
    let mut w = Writer::create(dir, &schema, config).unwrap();
    for i in 0..N {
        w.append(&[value(i, 0), value(i, 1), value(i, 2)]).unwrap();
    }
    w.commit().unwrap();
}

/// `len` indices in `range`, from `seed`.
fn indices(seed: u64, len: usize, range: std::ops::Range<u64>) -> Vec<u64> {
    let mut x = seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            range.start + x % (range.end - range.start)
        })
        .collect()
}

/// Checks a batch of all fields (or of `fields`) of `idx` against the model.
fn check(batch: &zrecord::Batch, idx: &[u64], fields: &[usize]) -> Result<(), String> {
    if batch.indices() != idx {
        return Err(format!("indices {:?} for {:?}", batch.indices(), idx));
    }
    for (r, &i) in idx.iter().enumerate() {
        for (k, &f) in fields.iter().enumerate() {
            let got = batch.get(r, k).ok_or(format!("record {i}: no field {f}"))?;
            if got != value(i, f).as_slice() {
                return Err(format!("record {i} field {f}: wrong bytes"));
            }
        }
    }
    Ok(())
}

fn gathered(r: zrecord::Result<zrecord::Batch>, what: &str) -> Result<zrecord::Batch, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

/// One epoch of a loader built here over `ds`: every record once, with its bytes.
fn loader_epoch(ds: &Dataset) -> Result<(), String> {
    let src = Arc::new(DatasetSource::new(ds));
    let mut loader = Loader::builder(src)
        .seed(11)
        .batch_size(97)
        .prefetch(PrefetchConfig::default().num_workers(2).lookahead(2))
        .build()
        .map_err(|e| format!("loader: {e}"))?;
    let mut seen = vec![0u32; N as usize];
    while let Some(b) = futures::executor::block_on(loader.next()) {
        let b = b.map_err(|e| format!("loader batch: {e}"))?;
        let idx = b.data.indices().to_vec();
        check(&b.data, &idx, &[0, 1, 2])?;
        for i in idx {
            seen[i as usize] += 1;
        }
    }
    match seen.iter().position(|&n| n != 1) {
        Some(i) => Err(format!("the loader gave record {i} {} times", seen[i])),
        None => Ok(()),
    }
}

/// Opens the dataset again, as the parent opened it.
type Reopen<'a> = dyn Fn() -> zrecord::Result<Dataset> + 'a;

/// What a child does with a dataset its parent used: blocking and async gathers of records
/// the parent read and never read, a snapshot read, a fresh open (`reopen`) and a loader.
fn child_reads(ds: &Dataset, reopen: &Reopen<'_>, cfg: &ReadConfig) -> Result<(), String> {
    for k in 0..40 {
        let idx = indices(1000 + k, 64, 0..N);
        check(
            &gathered(ds.gather_blocking(&idx), "gather")?,
            &idx,
            &[0, 1, 2],
        )?;
    }
    for k in 0..20 {
        let idx = indices(2000 + k, 64, 0..N);
        let b = gathered(futures::executor::block_on(ds.gather(&idx)), "async gather")?;
        check(&b, &idx, &[0, 1, 2])?;
        let b = gathered(
            futures::executor::block_on(ds.gather_fields(&idx, &["packed"])),
            "async gather_fields",
        )?;
        check(&b, &idx, &[1])?;
    }
    // One big batch: enough checksum work for the finishing pool's helpers.
    let all: Vec<u64> = (0..N).rev().collect();
    check(
        &gathered(ds.gather_blocking(&all), "big gather")?,
        &all,
        &[0, 1, 2],
    )?;
    let idx = indices(3000, 200, 0..N);
    let snap = ds.snapshot();
    check(
        &gathered(snap.gather_with(&idx, cfg), "snapshot gather")?,
        &idx,
        &[0, 1, 2],
    )?;
    let fresh = reopen().map_err(|e| format!("open: {e}"))?;
    check(
        &gathered(fresh.gather_blocking(&idx), "gather on a new open")?,
        &idx,
        &[0, 1, 2],
    )?;
    loader_epoch(ds)
}

/// Forks; the child runs `work` and exits with its outcome (its message in `report`); the
/// parent waits for it, killing it if it has not exited after a minute (a hang).
fn in_child(report: &Path, work: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    let _ = std::fs::remove_file(report);
    // SAFETY: the child only runs `work` and then `_exit`s; it never returns into the test
    // harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
        let (code, message) = match outcome {
            Ok(Ok(())) => (0, String::new()),
            Ok(Err(m)) => (1, m),
            Err(p) => (
                2,
                zrecord::Error::from_panic("the child", p.as_ref()).to_string(),
            ),
        };
        let _ = std::fs::write(report, message);
        // SAFETY: ends the child at once, without running the parent's exit handlers.
        unsafe { libc::_exit(code) };
    }
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: plain system call on our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        assert!(r >= 0, "waitpid: {}", std::io::Error::last_os_error());
        if r == pid {
            if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
                return Ok(());
            }
            return Err(format!(
                "the child failed (status {status:#x}): {}",
                std::fs::read_to_string(report).unwrap_or_default()
            ));
        }
        if start.elapsed() > Duration::from_secs(60) {
            // SAFETY: plain system calls on our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return Err("the child hung: killed after 60 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A parent thread gathering in a loop (blocking and async, checked) until stopped: the child
/// is forked while it is mid-gather, holding whatever it holds.
struct Busy {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<Result<(), String>>>,
}

impl Busy {
    fn start(ds: &Arc<Dataset>) -> Busy {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let (ds, s, d) = (Arc::clone(ds), Arc::clone(&stop), Arc::clone(&done));
        let thread = std::thread::spawn(move || {
            let mut k = 0u64;
            while !s.load(Ordering::Acquire) {
                k += 1;
                let idx = indices(k, 48, 0..N / 2);
                let b = match k % 2 {
                    0 => ds.gather_blocking(&idx),
                    _ => futures::executor::block_on(ds.gather(&idx)),
                };
                check(&gathered(b, "the parent's busy gather")?, &idx, &[0, 1, 2])?;
                d.fetch_add(1, Ordering::AcqRel);
            }
            Ok(())
        });
        while done.load(Ordering::Acquire) < 2 {
            std::thread::sleep(Duration::from_millis(1));
        }
        Busy {
            stop,
            done,
            thread: Some(thread),
        }
    }

    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.join().unwrap().unwrap();
        }
        self.done.load(Ordering::Acquire)
    }
}

/// The parent reads through `ds` (every thread started), forks three times while a thread of
/// it gathers, each child reads, and the parent reads on.
fn fork_after_use(ds: Arc<Dataset>, reopen: &Reopen<'_>, cfg: &ReadConfig, report: PathBuf) {
    // The parent's own use: blocking, async and a loader with lookahead over half the records.
    for k in 0..10 {
        let idx = indices(k, 64, 0..N / 2);
        check(&ds.gather_blocking(&idx).unwrap(), &idx, &[0, 1, 2]).unwrap();
        let b = futures::executor::block_on(ds.gather(&idx)).unwrap();
        check(&b, &idx, &[0, 1, 2]).unwrap();
    }
    let half: Vec<u64> = (0..N / 2).collect();
    check(&ds.gather_blocking(&half).unwrap(), &half, &[0, 1, 2]).unwrap();
    let src = Arc::new(DatasetSource::new(&ds));
    let mut parent_loader = Loader::builder(src)
        .seed(5)
        .batch_size(50)
        .prefetch(PrefetchConfig::default().num_workers(2).lookahead(4))
        .build()
        .unwrap();
    for _ in 0..3 {
        let b = futures::executor::block_on(parent_loader.next())
            .unwrap()
            .unwrap();
        let idx = b.data.indices().to_vec();
        check(&b.data, &idx, &[0, 1, 2]).unwrap();
    }

    let busy = Busy::start(&ds);
    for round in 0..3 {
        let outcome = in_child(&report, || child_reads(&ds, reopen, cfg));
        if let Err(e) = outcome {
            let _ = busy.stop();
            panic!("{} child {round}: {e}", ds.backend_name());
        }
    }
    assert!(busy.stop() >= 2);

    // The parent's threads and rings still serve it.
    for k in 0..10 {
        let idx = indices(500 + k, 64, 0..N);
        check(&ds.gather_blocking(&idx).unwrap(), &idx, &[0, 1, 2]).unwrap();
        let b = futures::executor::block_on(ds.gather(&idx)).unwrap();
        check(&b, &idx, &[0, 1, 2]).unwrap();
    }
    while let Some(b) = futures::executor::block_on(parent_loader.next()) {
        let b = b.unwrap();
        let idx = b.data.indices().to_vec();
        check(&b.data, &idx, &[0, 1, 2]).unwrap();
    }
    loader_epoch(&ds).unwrap();
}

fn local(backend: Backend) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    build(&dir);
    let cfg = ReadConfig::default().with_backend(backend);
    let ds = Arc::new(Dataset::open_with(&dir, cfg.clone()).unwrap());
    let reopen = || Dataset::open_with(&dir, cfg.clone());
    fork_after_use(ds, &reopen, &cfg, tmp.path().join("child.txt"));
}

#[test]
fn uring() {
    local(Backend::Uring);
}

#[test]
fn psync() {
    local(Backend::Psync);
}

#[test]
fn mmap() {
    local(Backend::Mmap);
}

#[test]
fn auto() {
    local(Backend::Auto);
}

/// A dataset published to a fresh s3s-fs, read with a chunk cache of `cache_bytes`.
#[cfg(feature = "remote")]
fn remote(cache_bytes: u64) {
    use zrecord::diagnostics::pending_fills;
    use zrecord::remote::{push, RemoteConfig, TransferOptions};
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    build(&dir);
    let url = server.url("sets/fork");
    push(
        &dir,
        &url,
        &TransferOptions::default().store(server.options()),
    )
    .unwrap();
    let cfg = ReadConfig::default();
    let remote = RemoteConfig::default()
        .store(server.options())
        .cache_dir(tmp.path().join("cache"))
        .cache_bytes(cache_bytes);
    let reopen = || zrecord::remote::open(&url, cfg.clone(), remote.clone());
    if cache_bytes > 0 {
        // Every chunk cached first: the dataset below reads them as local chunks.
        let warm = reopen().unwrap();
        let all: Vec<u64> = (0..N).collect();
        check(&warm.gather_blocking(&all).unwrap(), &all, &[0, 1, 2]).unwrap();
        while pending_fills() > 0 {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let ds = Arc::new(reopen().unwrap());
    assert_eq!(ds.backend_name(), "remote");
    fork_after_use(ds, &reopen, &cfg, tmp.path().join("child.txt"));
}

/// No chunk cache: every read of the child is a range request of its own.
#[cfg(feature = "remote")]
#[test]
fn remote_uncached() {
    remote(0);
}

/// Every chunk in the cache: the child reads them as local chunks (through zrecord's local
/// backend and their mappings).
#[cfg(feature = "remote")]
#[test]
fn remote_cached() {
    remote(1 << 30);
}
