//! Two `Writer::create`s of one path racing in one process (each builds its dataset in a
//! directory beside the path, holds its lock from the start and renames it into place) leave
//! exactly one writer, which holds the path's lock: a third `Writer::open` is `WriterBusy`. The
//! renames are held at a gate so the first create renames while the second has built.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use zrecord::testing::{StdFs, Vfs, VfsFile, VfsLock};
use zrecord::{DType, Error, Field, Result, Schema, Writer, WriterConfig};

/// StdFs whose renames of `*.zrecord-create-*` wait at a gate, in arrival order.
#[derive(Debug)]
struct Gated {
    inner: Arc<dyn Vfs>,
    gate: Arc<(Mutex<(u32, u32)>, Condvar)>, // (arrived, released)
}

impl Vfs for Gated {
    fn open_read(&self, p: &Path) -> Result<Box<dyn VfsFile>> {
        self.inner.open_read(p)
    }
    fn open_rw(&self, p: &Path) -> Result<Box<dyn VfsFile>> {
        self.inner.open_rw(p)
    }
    fn create_new(&self, p: &Path) -> Result<Box<dyn VfsFile>> {
        self.inner.create_new(p)
    }
    fn create_truncate(&self, p: &Path) -> Result<Box<dyn VfsFile>> {
        self.inner.create_truncate(p)
    }
    fn read(&self, p: &Path) -> Result<Vec<u8>> {
        self.inner.read(p)
    }
    fn exists(&self, p: &Path) -> Result<bool> {
        self.inner.exists(p)
    }
    fn read_dir(&self, p: &Path) -> Result<Vec<String>> {
        self.inner.read_dir(p)
    }
    fn create_dir_all(&self, p: &Path) -> Result<()> {
        self.inner.create_dir_all(p)
    }
    fn remove_file(&self, p: &Path) -> Result<()> {
        self.inner.remove_file(p)
    }
    fn remove_dir_all(&self, p: &Path) -> Result<()> {
        self.inner.remove_dir_all(p)
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        if from
            .file_name()
            .is_some_and(|n| n.to_string_lossy().contains(".zrecord-create-"))
        {
            let (m, cv) = &*self.gate;
            let mut g = m.lock().unwrap();
            g.0 += 1;
            let me = g.0;
            cv.notify_all();
            while g.1 < me {
                g = cv.wait(g).unwrap();
            }
        }
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, p: &Path) -> Result<()> {
        self.inner.sync_dir(p)
    }
    fn lock(&self, p: &Path) -> Result<Box<dyn VfsLock>> {
        self.inner.lock(p)
    }
}

#[test]
fn two_creates_of_one_path_leave_one_writer_holding_its_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("ds");
    let gate = Arc::new((Mutex::new((0u32, 0u32)), Condvar::new()));
    let vfs: Arc<dyn Vfs> = Arc::new(Gated {
        inner: StdFs::shared(),
        gate: gate.clone(),
    });
    let schema = Schema::new().field(Field::new("x", DType::U8));
    let wait_arrived = |n: u32| {
        let (m, cv) = &*gate;
        let mut g = m.lock().unwrap();
        while g.0 < n {
            let (g2, t) = cv.wait_timeout(g, Duration::from_secs(30)).unwrap();
            g = g2;
            assert!(!t.timed_out(), "nobody arrived at rename #{n}");
        }
    };
    let release = |n: u32| {
        let (m, cv) = &*gate;
        m.lock().unwrap().1 = n;
        cv.notify_all();
    };
    let (v, p, s) = (vfs.clone(), path.clone(), schema.clone());
    let a = std::thread::spawn(move || Writer::create_with_vfs(v, &p, &s, WriterConfig::default()));
    wait_arrived(1); // A built its temp dir and waits to rename it
    let (v, p, s) = (vfs.clone(), path.clone(), schema.clone());
    let b = std::thread::spawn(move || Writer::create_with_vfs(v, &p, &s, WriterConfig::default()));
    wait_arrived(2); // B built its own directory beside the path and waits to rename it
    assert!(
        !b.is_finished(),
        "the second create did not wait at its rename"
    );
    release(1);
    let wa = a.join().unwrap();
    release(2);
    let wb = b.join().unwrap();
    // A renamed first: it has the writer; B's rename finds the path taken.
    let _wa = wa.expect("the first create has the writer");
    assert!(wb.is_err(), "two creates of one path both succeeded");
    // Nobody else may open a writer beside A's.
    let third = Writer::open(&path, WriterConfig::default());
    assert!(
        matches!(third, Err(Error::WriterBusy { .. })),
        "a second writer opened beside A's: {:?}",
        third.map(|_| ())
    );
}
