//! `Dataset`: a read handle on the latest commit it opened or refreshed to.

use crate::error::{Error, Result};
use crate::store::batch::{self, Batch};
use crate::store::schema::Schema;
use crate::store::snapshot::Snapshot;
use crate::store::writer::{Writer, WriterConfig};
use bytes::Bytes;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// A dataset opened for reading. Any number of them, in any number of processes, can read while
/// one [`Writer`] commits: each shows the commit it opened or last [refreshed](Dataset::refresh)
/// to, never a half-written one. `Send + Sync`; share it with an `Arc`.
#[derive(Debug)]
pub struct Dataset {
    dir: PathBuf,
    current: RwLock<Arc<Snapshot>>,
}

impl Dataset {
    /// Creates an empty dataset at `path` (which must not exist, or be an empty directory) and
    /// opens it for reading. Use [`Writer::create`] to create and write in one step.
    pub fn create(path: impl AsRef<Path>, schema: &Schema) -> Result<Dataset> {
        drop(Writer::create(
            path.as_ref(),
            schema,
            WriterConfig::default(),
        )?);
        Dataset::open(path)
    }

    /// Opens the dataset at `path` read-only, at its latest commit. Opening maps the offset
    /// tables and reads the patch logs; it reads no record data.
    pub fn open(path: impl AsRef<Path>) -> Result<Dataset> {
        let dir = path.as_ref().to_path_buf();
        let snap = Snapshot::load(&dir)?;
        Ok(Dataset {
            dir,
            current: RwLock::new(Arc::new(snap)),
        })
    }

    /// Moves this handle to the latest commit. Returns true if it changed. Snapshots already
    /// taken with [`Dataset::snapshot`] keep showing their commit.
    pub fn refresh(&self) -> Result<bool> {
        let old = self.snapshot().generation();
        let (_, meta) = crate::store::snapshot::read_meta(&self.dir)?;
        if meta.generation == old {
            return Ok(false);
        }
        let snap = Arc::new(Snapshot::load(&self.dir)?);
        let changed = snap.generation() != old;
        match self.current.write() {
            Ok(mut g) => *g = snap,
            Err(poisoned) => *poisoned.into_inner() = snap,
        }
        Ok(changed)
    }

    /// The current snapshot: an immutable view that stays valid whatever later commits do.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        match self.current.read() {
            Ok(g) => Arc::clone(&g),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Opens the dataset's single writer. Fails with [`Error::WriterBusy`] if another writer (in
    /// this process or another) holds it.
    pub fn writer(&self) -> Result<Writer> {
        Writer::open(&self.dir, WriterConfig::default())
    }

    /// The dataset directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Number of records in the current snapshot.
    pub fn len(&self) -> u64 {
        self.snapshot().len()
    }

    /// True if the current snapshot has no records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The commit generation of the current snapshot.
    pub fn generation(&self) -> u64 {
        self.snapshot().generation()
    }

    /// Reads every field of record `index` (blocking; checksums verified).
    pub fn get(&self, index: u64) -> Result<Vec<Bytes>> {
        self.snapshot().get(index)
    }

    /// Reads one field of record `index` (blocking; checksum verified).
    pub fn get_field(&self, index: u64, field: &str) -> Result<Bytes> {
        self.snapshot().get_field(index, field)
    }

    /// Reads every field of `indices`, in that order (blocking; checksums verified).
    pub fn gather_blocking(&self, indices: &[u64]) -> Result<Batch> {
        self.snapshot().gather_blocking(indices)
    }

    /// Reads the named fields of `indices`, in that order (blocking; checksums verified).
    pub fn gather_fields_blocking(&self, indices: &[u64], fields: &[&str]) -> Result<Batch> {
        self.snapshot().gather_fields_blocking(indices, fields)
    }
}

impl Snapshot {
    /// Reads every field of record `index`.
    pub fn get(&self, index: u64) -> Result<Vec<Bytes>> {
        let fields: Vec<usize> = (0..self.tables.len()).collect();
        let b = batch::gather(self, &[index], &fields)?;
        Ok(b.into_records().into_iter().next().unwrap_or_default())
    }

    /// Reads one field of record `index`.
    pub fn get_field(&self, index: u64, field: &str) -> Result<Bytes> {
        let f = self.field_index(field)?;
        let b = batch::gather(self, &[index], &[f])?;
        b.bytes(0, 0).ok_or(Error::IndexOutOfRange {
            index,
            len: self.len(),
        })
    }

    /// Reads every field of `indices`, in that order.
    pub fn gather_blocking(&self, indices: &[u64]) -> Result<Batch> {
        let fields: Vec<usize> = (0..self.tables.len()).collect();
        batch::gather(self, indices, &fields)
    }

    /// Reads the named fields of `indices`, in that order.
    pub fn gather_fields_blocking(&self, indices: &[u64], fields: &[&str]) -> Result<Batch> {
        let fields = fields
            .iter()
            .map(|f| self.field_index(f))
            .collect::<Result<Vec<_>>>()?;
        batch::gather(self, indices, &fields)
    }
}
