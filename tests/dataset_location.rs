//! A location written outside the crate against the public `Location` trait (an in-memory store of a dataset's files, read through its own backend) plugs into `Dataset`: every record reads back as the model holds it, `refresh` moves to its next commit and finds nothing when nothing changed, and a chunk the location lost is a typed `ChunkGone` error naming that chunk, never other bytes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use zrecord::{
    ChunkAt, Codec, DType, Dataset, Error, Field, Location, ReadBackend, ReadConfig, ReadJob,
    Schema, Snapshot, TableAt, Writer, WriterConfig,
};

/// A dataset's committed files by name (`meta.json`, `<field>.<gen>.offsets`,
/// `chunk/<id>.zr`), and how many times they were loaded.
#[derive(Debug, Default)]
struct Files {
    version: u64,
    by_name: HashMap<String, Arc<Vec<u8>>>,
}

/// The location: its files, and the version its last snapshot showed.
#[derive(Debug)]
struct Memory {
    name: PathBuf,
    files: Arc<Mutex<Files>>,
    opened: AtomicU64,
}

/// Reads chunks out of a [`Memory`]'s files by object key.
#[derive(Debug)]
struct MemoryBackend {
    files: Arc<Mutex<Files>>,
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(root, &p, out);
        } else {
            let name = p.strip_prefix(root).unwrap().to_str().unwrap().to_string();
            out.push((name, p));
        }
    }
}

impl Memory {
    fn new(name: &str) -> Memory {
        Memory {
            name: PathBuf::from(name),
            files: Arc::default(),
            opened: AtomicU64::new(0),
        }
    }

    /// Takes the dataset at `dir` (no writer open) in as the next version.
    fn load(&self, dir: &Path) {
        let mut found = Vec::new();
        walk(dir, dir, &mut found);
        let by_name = found
            .into_iter()
            .filter(|(name, _)| name != "writer.lock")
            .map(|(name, p)| (name, Arc::new(std::fs::read(p).unwrap())))
            .collect();
        let mut files = self.files.lock().unwrap();
        files.version += 1;
        files.by_name = by_name;
    }

    /// Loses the file `name`.
    fn lose(&self, name: &str) {
        assert!(self.files.lock().unwrap().by_name.remove(name).is_some());
    }

    fn backend(&self) -> Arc<dyn ReadBackend> {
        Arc::new(MemoryBackend {
            files: Arc::clone(&self.files),
        })
    }
}

impl Location for Memory {
    fn path(&self) -> &Path {
        &self.name
    }

    fn snapshot(&self) -> zrecord::Result<Snapshot> {
        let files = self.files.lock().unwrap();
        let get = |name: &str| files.by_name.get(name).cloned();
        let meta = get("meta.json").ok_or_else(|| Error::NotADataset {
            path: self.name.clone(),
            reason: "no meta.json".into(),
        })?;
        let snap = Snapshot::assemble(
            self.name.clone(),
            &meta,
            |name| {
                Ok(TableAt::Bytes {
                    path: self.name.join(name),
                    bytes: get(name).map(|b| b.to_vec()).unwrap_or_default(),
                })
            },
            |name| {
                Ok(ChunkAt::Object {
                    path: self.name.join(name),
                    key: name.to_string(),
                })
            },
            Some(self.backend()),
        )?;
        self.opened.store(files.version, Ordering::SeqCst);
        Ok(snap)
    }

    fn is_latest(&self, _current: &Snapshot) -> zrecord::Result<bool> {
        Ok(self.files.lock().unwrap().version == self.opened.load(Ordering::SeqCst))
    }

    fn read_backend(&self) -> Option<Arc<dyn ReadBackend>> {
        Some(self.backend())
    }
}

impl ReadBackend for MemoryBackend {
    fn name(&self) -> &str {
        "memory"
    }

    fn read(&self, mut job: ReadJob) -> zrecord::Result<ReadJob> {
        for op in 0..job.len() {
            let r = job.range(op).unwrap();
            let (path, offset, len) = (r.path.to_path_buf(), r.offset, r.len);
            let key = r.object.expect("a memory chunk is an object").to_string();
            let Some(bytes) = self.files.lock().unwrap().by_name.get(&key).cloned() else {
                let id = key.trim_start_matches("chunk/").trim_end_matches(".zr");
                return Err(Error::ChunkGone {
                    path,
                    chunk: id.parse().unwrap(),
                    reason: "the memory location lost it".into(),
                });
            };
            let start = offset as usize;
            let end = (start + len).min(bytes.len());
            job.fill(op, &bytes[start..end])
                .map_err(|source| Error::ReadFailed {
                    path,
                    offset,
                    source,
                })?;
        }
        Ok(job)
    }
}

fn record(i: u64) -> Vec<Vec<u8>> {
    let tokens = (0..(i % 97 + 1)).map(|k| (k * 7 + i) as u8).collect();
    vec![tokens, i.to_le_bytes().to_vec()]
}

fn check_all(ds: &Dataset, model: &[Vec<Vec<u8>>]) {
    let all: Vec<u64> = (0..model.len() as u64).rev().collect();
    let b = ds.gather_blocking(&all).unwrap();
    for (r, &i) in all.iter().enumerate() {
        for (f, want) in model[i as usize].iter().enumerate() {
            assert_eq!(b.get(r, f).unwrap(), &want[..], "record {i}");
        }
    }
}

#[test]
fn a_location_of_ones_own_reads_refreshes_and_reports_a_lost_chunk() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let schema = Schema::new()
        .field(Field::new("tokens", DType::U8).codec(Codec::Deflate))
        .field(Field::new("label", DType::U64).shape(vec![]))
        .chunk_size_bytes(4096);
    let mut model: Vec<Vec<Vec<u8>>> = Vec::new();
    let mut w = Writer::create(&dir, &schema, WriterConfig::default().num_writers(1)).unwrap();
    for i in 0..300 {
        let rec = record(i);
        w.append(&[&rec[0][..], &rec[1][..]]).unwrap();
        model.push(rec);
    }
    w.commit().unwrap();

    let mem = Arc::new(Memory::new("mem://train"));
    mem.load(&dir);
    let ds = Dataset::from_location(Arc::clone(&mem) as Arc<dyn Location>, ReadConfig::default())
        .unwrap();
    assert_eq!(ds.path(), Path::new("mem://train"));
    assert_eq!(ds.backend_name(), "memory");
    assert!(ds.snapshot().meta().chunks.len() > 2, "want several chunks");
    check_all(&ds, &model);
    assert!(!ds.refresh().unwrap(), "nothing new: no refresh");
    assert!(matches!(ds.writer(), Err(Error::InvalidConfig { .. })));

    // The next commit: more records and one changed.
    for i in 300..400 {
        let rec = record(i);
        w.append(&[&rec[0][..], &rec[1][..]]).unwrap();
        model.push(rec);
    }
    w.modify(5, "label", &77u64.to_le_bytes()).unwrap();
    model[5][1] = 77u64.to_le_bytes().to_vec();
    w.commit().unwrap();
    drop(w);
    let before = ds.snapshot();
    mem.load(&dir);
    assert!(ds.refresh().unwrap(), "a new commit: refreshed");
    assert_eq!(ds.len(), 400);
    assert_eq!(before.len(), 300);
    check_all(&ds, &model);
    assert!(!ds.refresh().unwrap());

    // A lost chunk: its records are a typed error naming it; the others still read.
    let snap = ds.snapshot();
    let lost_at = snap.locate(0, 350).unwrap().chunk.unwrap();
    let lost_name = lost_at
        .strip_prefix("mem://train")
        .unwrap()
        .to_str()
        .unwrap();
    mem.lose(lost_name);
    let lost_id: u16 = lost_name[6..11].parse().unwrap();
    match ds.gather_blocking(&[350]) {
        Err(Error::ChunkGone { path, chunk, .. }) => {
            assert_eq!(chunk, lost_id);
            assert_eq!(path, lost_at);
        }
        other => panic!("expected ChunkGone for chunk {lost_id}, got {other:?}"),
    }
    let elsewhere = (0..400u64)
        .find(|&i| snap.locate(0, i).unwrap().chunk.as_ref() != Some(&lost_at))
        .unwrap();
    let b = ds.gather_blocking(&[elsewhere]).unwrap();
    assert_eq!(b.get(0, 0).unwrap(), &model[elsewhere as usize][0][..]);
}
