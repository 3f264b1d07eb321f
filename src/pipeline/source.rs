//! The random-access source the pipeline reads from: the [`Source`] trait, its implementations
//! for a zrecord [`Dataset`] (and a pinned, field-selecting [`DatasetSource`]), and an in-memory
//! [`MemorySource`] for tests.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::store::dataset::Reader;
use crate::{Dataset, Error, Result, Snapshot};

/// What [`Source::gather_async`] returns: a boxed future of the batch, `Send + 'static`.
pub type SourceFuture<B> = Pin<Box<dyn Future<Output = Result<B>> + Send + 'static>>;

/// A random-access collection of `len()` records that the pipeline gathers batches from.
///
/// The index-side stages only call [`Source::len`] and [`Source::item_len`] (cheap, no data
/// read); the prefetch workers call [`Source::gather`] on their own threads, never on an async
/// runtime worker.
pub trait Source: Send + Sync + 'static {
    /// What one [`Source::gather`] call returns.
    type Batch: Send + 'static;

    /// Number of records.
    fn len(&self) -> u64;

    /// True if the source holds no record.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The length key of record `index`, used for length bucketing. Must not read record data
    /// (for a zrecord dataset it is the record length from the offset table).
    fn item_len(&self, index: u64) -> Result<u64>;

    /// [`Source::item_len`] of every index, appended to `out` in order: a bucket asks for its
    /// whole buffer's keys at once. The default calls `item_len` per index; a source that can
    /// overlap the lookups (a dataset prefetches its table entries) overrides it.
    ///
    /// # Errors
    /// As [`Source::item_len`] for the first index that fails.
    fn item_lens(&self, indices: &[u64], out: &mut Vec<u64>) -> Result<()> {
        out.reserve(indices.len());
        for &index in indices {
            out.push(self.item_len(index)?);
        }
        Ok(())
    }

    /// What [`Source::item_len`] computes (which data, and how), as the name of the default
    /// bucket key. A bucketed loader's checkpoint records it, and resuming a bucketed loader
    /// whose key is described otherwise is refused; so two sources whose keys differ must
    /// describe them differently. Defaults to `item_len`.
    ///
    /// The description goes into a `key=value` list: it should hold no `, ` or ` | ` outside
    /// brackets.
    fn key_description(&self) -> String {
        "item_len".to_string()
    }

    /// Reads the records at `indices`, in that order. Blocking; called on worker threads.
    fn gather(&self, indices: &[u64]) -> Result<Self::Batch>;

    /// Reads the records at `indices`, in that order, as a future: what a prefetch worker
    /// uses when it keeps several gathers in flight ([`super::PrefetchConfig::gathers_in_flight`]
    /// above 1), so a source with latency (a dataset on an object store) has many batches'
    /// reads running without a thread for each.
    ///
    /// The default runs [`Source::gather`] when first polled, blocking the thread that polls it
    /// (a prefetch worker's own thread, never a runtime worker): correct, but with nothing in
    /// flight at once (a worker's window then runs its gathers one after another, and its
    /// first batch waits for all of them). A zrecord [`Dataset`] or [`DatasetSource`] runs the gather on zrecord's
    /// read threads; a source with a truly asynchronous client returns its future.
    ///
    /// # Cancel safety
    /// The loader drops the future of a batch it no longer needs (a dropped or resumed loader);
    /// dropping must lose nothing but that batch.
    fn gather_async(self: Arc<Self>, indices: Vec<u64>) -> SourceFuture<Self::Batch> {
        Box::pin(async move { self.gather(&indices) })
    }

    /// The generation of the data this source serves (a dataset's commit generation). A
    /// checkpoint records it, and resuming against another generation is refused.
    /// Defaults to 0 for sources that never change.
    fn generation(&self) -> u64 {
        0
    }

    /// Announces that `indices` will be gathered soon, so a source with latency to hide (a
    /// dataset on an object store, or on a local disk with cold pages) can start reading them
    /// now. The loader's workers announce
    /// their next batches ([`super::PrefetchConfig::lookahead`]); `session` groups one
    /// loader's announcements. Must not block. Default: nothing.
    fn lookahead(&self, session: u64, indices: &[u64]) {
        let _ = (session, indices);
    }

    /// Drops whatever [`Source::lookahead`] started for `session` and nothing gathered (the
    /// loader was dropped, resumed or moved elsewhere). Default: nothing.
    fn end_lookahead(&self, session: u64) {
        let _ = session;
    }

    /// The lengths of the parts this source is made of, in index order: the parts a
    /// [`super::Mix`] weights (one weight per part) when the loader is built with
    /// [`super::LoaderBuilder::mix`]. They must sum to [`Source::len`]. Defaults to one part,
    /// the whole source; [`super::Concat`] reports its parts.
    fn part_lens(&self) -> Vec<u64> {
        vec![self.len()]
    }
}

/// An in-memory [`Source`] over one byte string per record.
#[derive(Debug, Clone, Default)]
pub struct MemorySource {
    records: Vec<Vec<u8>>,
    generation: u64,
}

impl MemorySource {
    /// A source serving `records`, generation 0.
    pub fn new(records: Vec<Vec<u8>>) -> Self {
        Self {
            records,
            generation: 0,
        }
    }

    /// The same records under another generation number (to test checkpoint validation).
    #[must_use]
    pub fn with_generation(mut self, generation: u64) -> Self {
        self.generation = generation;
        self
    }

    /// The records.
    pub fn records(&self) -> &[Vec<u8>] {
        &self.records
    }

    fn record(&self, index: u64) -> Result<&Vec<u8>> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.records.get(i))
            .ok_or(Error::IndexOutOfRange {
                index,
                len: self.len(),
            })
    }
}

impl Source for MemorySource {
    type Batch = Vec<Vec<u8>>;

    fn len(&self) -> u64 {
        self.records.len() as u64
    }

    fn item_len(&self, index: u64) -> Result<u64> {
        Ok(self.record(index)?.len() as u64)
    }

    fn gather(&self, indices: &[u64]) -> Result<Self::Batch> {
        indices.iter().map(|&i| self.record(i).cloned()).collect()
    }

    fn generation(&self) -> u64 {
        self.generation
    }
}

/// A dataset's current snapshot, all fields. [`Source::item_len`] is the sum of the record's
/// field lengths from the offset tables (no data read).
///
/// The snapshot is looked up on every call, so a [`Dataset::refresh`] while a loader runs
/// changes what it reads; use [`DatasetSource`] to pin one commit.
impl Source for Dataset {
    type Batch = crate::Batch;

    fn len(&self) -> u64 {
        Dataset::len(self)
    }

    fn item_len(&self, index: u64) -> Result<u64> {
        let snap = self.snapshot();
        (0..snap.meta().fields.len()).try_fold(0u64, |acc, f| {
            Ok(acc.saturating_add(snap.record_len(f, index)?))
        })
    }

    fn item_lens(&self, indices: &[u64], out: &mut Vec<u64>) -> Result<()> {
        let snap = self.snapshot();
        let mut lens = Vec::new();
        for f in 0..snap.meta().fields.len() {
            snap.add_record_lens(f, indices, &mut lens)?;
        }
        lens.resize(indices.len(), 0);
        out.extend(lens);
        Ok(())
    }

    /// `stored_len(all_fields)`: the sum of the record's stored field lengths.
    fn key_description(&self) -> String {
        "stored_len(all_fields)".to_string()
    }

    fn gather(&self, indices: &[u64]) -> Result<Self::Batch> {
        self.gather_blocking(indices)
    }

    fn gather_async(self: Arc<Self>, indices: Vec<u64>) -> SourceFuture<Self::Batch> {
        Box::pin(Dataset::gather(&self, &indices))
    }

    fn generation(&self) -> u64 {
        Dataset::generation(self)
    }

    fn lookahead(&self, session: u64, indices: &[u64]) {
        let _ = Dataset::lookahead(self, session, indices);
    }

    fn end_lookahead(&self, session: u64) {
        Dataset::end_lookahead(self, session);
    }
}

/// One commit of a dataset (a pinned [`Snapshot`]), optionally only some of its fields, with
/// the length key taken from one field.
#[derive(Debug, Clone)]
pub struct DatasetSource {
    snapshot: Arc<Snapshot>,
    fields: Option<Vec<String>>,
    key_field: usize,
    config: crate::ReadConfig,
    /// The snapshot's reader with `config`, made on first use.
    reader: std::sync::OnceLock<Reader>,
}

impl DatasetSource {
    /// The dataset's current snapshot, every field, read as the dataset reads; the key is the
    /// first field's record length.
    pub fn new(dataset: &Dataset) -> Self {
        let mut s = Self::from_snapshot(dataset.snapshot());
        s.config = dataset.read_config().clone();
        s.reader = std::sync::OnceLock::from(dataset.reader());
        s
    }

    /// Reads with `config` (backend, checksums, `O_DIRECT`, budgets).
    #[must_use]
    pub fn read_config(mut self, config: crate::ReadConfig) -> Self {
        self.config = config;
        self.reader = std::sync::OnceLock::new();
        self
    }

    /// The name of [`DatasetSource::read_config`] in 0.1.0.
    #[deprecated(
        note = "renamed to `read_config` (ReadOptions became ReadConfig); this alias \
                is kept for one release, see CHANGELOG.md"
    )]
    #[must_use]
    pub fn read_options(self, config: crate::ReadConfig) -> Self {
        self.read_config(config)
    }

    /// `snapshot`, every field; the key is the first field's record length.
    pub fn from_snapshot(snapshot: Arc<Snapshot>) -> Self {
        Self {
            snapshot,
            fields: None,
            key_field: 0,
            config: crate::ReadConfig::default(),
            reader: std::sync::OnceLock::new(),
        }
    }

    fn reader(&self) -> Result<&Reader> {
        if let Some(r) = self.reader.get() {
            return Ok(r);
        }
        let r = self.snapshot.reader(&self.config)?;
        Ok(self.reader.get_or_init(|| r))
    }

    /// Gathers only `fields`, in that order; the key becomes the first of them.
    ///
    /// # Errors
    /// [`Error::UnknownField`] for a name not in the schema.
    pub fn fields(mut self, fields: &[&str]) -> Result<Self> {
        let first = fields
            .first()
            .map(|f| self.snapshot.field_index(f))
            .transpose()?;
        for f in fields {
            self.snapshot.field_index(f)?;
        }
        self.fields = Some(fields.iter().map(|f| (*f).to_string()).collect());
        self.key_field = first.unwrap_or(0);
        Ok(self)
    }

    /// Takes the length key from `field`.
    ///
    /// # Errors
    /// [`Error::UnknownField`] for a name not in the schema.
    pub fn key_field(mut self, field: &str) -> Result<Self> {
        self.key_field = self.snapshot.field_index(field)?;
        Ok(self)
    }

    /// The pinned snapshot.
    pub fn snapshot(&self) -> &Arc<Snapshot> {
        &self.snapshot
    }

    /// The snapshot's numbers of the fields this source gathers.
    fn field_numbers(&self) -> Result<Vec<usize>> {
        match &self.fields {
            None => Ok((0..self.snapshot.meta().fields.len()).collect()),
            Some(fields) => fields
                .iter()
                .map(|f| self.snapshot.field_index(f))
                .collect(),
        }
    }
}

impl Source for DatasetSource {
    type Batch = crate::Batch;

    fn len(&self) -> u64 {
        self.snapshot.len()
    }

    fn item_len(&self, index: u64) -> Result<u64> {
        self.snapshot.record_len(self.key_field, index)
    }

    fn item_lens(&self, indices: &[u64], out: &mut Vec<u64>) -> Result<()> {
        let mut lens = Vec::new();
        self.snapshot
            .add_record_lens(self.key_field, indices, &mut lens)?;
        out.extend(lens);
        Ok(())
    }

    /// `stored_len(field=NAME)`: the stored length of the key field.
    fn key_description(&self) -> String {
        match self.snapshot.meta().fields.get(self.key_field) {
            Some(f) => format!("stored_len(field={})", f.name),
            None => format!("stored_len(field=#{})", self.key_field),
        }
    }

    fn gather(&self, indices: &[u64]) -> Result<Self::Batch> {
        let reader = self.reader()?;
        self.snapshot
            .gather_by(reader, indices, &self.field_numbers()?)
    }

    fn gather_async(self: Arc<Self>, indices: Vec<u64>) -> SourceFuture<Self::Batch> {
        let parts = self
            .reader()
            .and_then(|r| Ok((r.clone(), self.field_numbers()?)));
        let (reader, fields) = match parts {
            Ok(p) => p,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        // The task holds the snapshot and the engine, not the source: once the loader is shut
        // down, nothing holds the source.
        Box::pin(Arc::clone(&self.snapshot).gather_async_by(&reader, indices, fields))
    }

    fn generation(&self) -> u64 {
        self.snapshot.generation()
    }

    fn lookahead(&self, session: u64, indices: &[u64]) {
        let Ok(reader) = self.reader() else {
            return;
        };
        if !reader.wants_lookahead() {
            return;
        }
        let fields = match &self.fields {
            None => (0..self.snapshot.meta().fields.len()).collect::<Vec<_>>(),
            Some(fields) => match fields
                .iter()
                .map(|f| self.snapshot.field_index(f))
                .collect::<Result<Vec<_>>>()
            {
                Ok(f) => f,
                Err(_) => return,
            },
        };
        let _ = self
            .snapshot
            .lookahead_by(reader, session, indices, &fields);
    }

    fn end_lookahead(&self, session: u64) {
        if let Ok(reader) = self.reader() {
            reader.end_lookahead(session);
        }
    }
}

/// Sources shared behind an `Arc` are sources too, trait objects included
/// (`Arc<dyn Source<Batch = B>>`).
impl<S: Source + ?Sized> Source for Arc<S> {
    type Batch = S::Batch;

    fn len(&self) -> u64 {
        S::len(self)
    }

    fn item_len(&self, index: u64) -> Result<u64> {
        S::item_len(self, index)
    }

    fn key_description(&self) -> String {
        S::key_description(self)
    }

    fn item_lens(&self, indices: &[u64], out: &mut Vec<u64>) -> Result<()> {
        S::item_lens(self, indices, out)
    }

    fn gather(&self, indices: &[u64]) -> Result<Self::Batch> {
        S::gather(self, indices)
    }

    fn gather_async(self: Arc<Self>, indices: Vec<u64>) -> SourceFuture<Self::Batch> {
        S::gather_async(Arc::clone(&*self), indices)
    }

    fn generation(&self) -> u64 {
        S::generation(self)
    }

    fn lookahead(&self, session: u64, indices: &[u64]) {
        S::lookahead(self, session, indices)
    }

    fn end_lookahead(&self, session: u64) {
        S::end_lookahead(self, session)
    }

    fn part_lens(&self) -> Vec<u64> {
        S::part_lens(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gather_in_order_and_out_of_range() {
        let s = MemorySource::new(vec![vec![1], vec![2, 2], vec![]]);
        assert_eq!(s.len(), 3);
        assert_eq!(s.item_len(1).unwrap(), 2);
        assert_eq!(
            s.gather(&[2, 0, 1]).unwrap(),
            vec![vec![], vec![1], vec![2, 2]]
        );
        assert!(matches!(
            s.gather(&[3]),
            Err(Error::IndexOutOfRange { index: 3, len: 3 })
        ));
    }
}
