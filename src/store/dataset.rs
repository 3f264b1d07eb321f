//! `Dataset`: a read handle on the latest commit it opened or refreshed to.

use crate::error::{Error, Result};
use crate::store::gather::{self, gather};
use crate::store::location::{LocalDir, Location};
use crate::store::read::batch::Batch;
use crate::store::read::{self, Engine, ReadConfig};
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
    /// Where the commits come from: a local directory, an object store's prefix, ….
    location: Arc<dyn Location>,
    current: RwLock<Arc<Snapshot>>,
    config: ReadConfig,
    engine: Arc<Engine>,
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
    ///
    /// `path` may be a URL (`scheme://…`): the location of that scheme opens it with default
    /// options. With the `remote` feature, `s3://bucket/prefix` is a dataset on an object
    /// store (published with `zrecord::remote::push`; options: `zrecord::remote::open`): its
    /// offset tables are fetched into the local cache directory and its records read with
    /// range requests, checked as on local disk. `file://` URLs are local paths. Which names
    /// are URLs is one rule for every call of zrecord: `zrecord::remote::local_path` states it
    /// (`SCHEME://…` with a well-formed scheme; `./a://b` is a path).
    ///
    /// A directory holding `_collection/` is a collection (`zrecord::collection`): its latest
    /// manifest's parts, read as one dataset with global indices (part after part).
    pub fn open(path: impl AsRef<Path>) -> Result<Dataset> {
        Dataset::open_with(path, ReadConfig::default())
    }

    /// Opens the dataset at `path` (a directory, or a URL as for [`Dataset::open`]) read-only
    /// with the given read configuration (backend, checksum verification, `O_DIRECT`,
    /// budgets).
    ///
    /// # Errors
    ///
    /// [`Error::NotADataset`] if `path` does not exist, is not a directory or holds no
    /// `meta.json`, or is a URL of a scheme this build does not open; [`Error::InvalidConfig`]
    /// for an invalid `ZRECORD_IO`; the corruption and I/O errors of the files the commit
    /// names.
    pub fn open_with(path: impl AsRef<Path>, config: ReadConfig) -> Result<Dataset> {
        let text = path.as_ref().to_str();
        let dir = match text.map(|t| (t, crate::store::location::local_path(t))) {
            Some((url, None)) => {
                let location = crate::store::location::open_url(url, crate::url_schemes())?;
                return Dataset::from_location(location, config);
            }
            Some((_, Some(local))) => PathBuf::from(local),
            // Not UTF-8: no URL.
            None => path.as_ref().to_path_buf(),
        };
        if crate::store::collection::is_collection(&dir) {
            let location = Arc::new(crate::store::collection::CollectionDir::new(dir));
            return Dataset::from_location(location, config);
        }
        let engine = Arc::new(Engine::new(&config)?);
        let snap = Snapshot::load(&dir).map_err(|e| not_a_dataset(&dir, e))?;
        Ok(Dataset {
            location: Arc::new(LocalDir::new(dir)),
            current: RwLock::new(Arc::new(snap)),
            config,
            engine,
        })
    }

    /// Opens the dataset at `location` (a local directory, an object store's prefix, or a
    /// location of yours) read-only at its latest commit, with `config`. Chunks are read
    /// through the location's [`read_backend`](Location::read_backend) where it has one, else
    /// through the backend `config` names.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for an invalid `ZRECORD_IO`; the errors of
    /// [`Location::snapshot`].
    pub fn from_location(location: Arc<dyn Location>, config: ReadConfig) -> Result<Dataset> {
        let engine_config = match location.read_backend() {
            Some(backend) => config.clone().with_custom_backend(backend),
            None => config.clone(),
        };
        let engine = Arc::new(Engine::new(&engine_config)?);
        let snap = location.snapshot()?;
        Ok(Dataset {
            location,
            current: RwLock::new(Arc::new(snap)),
            config,
            engine,
        })
    }

    /// Where this dataset's commits come from.
    pub fn location(&self) -> &Arc<dyn Location> {
        &self.location
    }

    /// The read configuration this handle uses.
    pub fn read_config(&self) -> &ReadConfig {
        &self.config
    }

    /// A copy of the read configuration: the name of [`Dataset::read_config`] in 0.1.0.
    #[deprecated(
        note = "renamed to `read_config`, which returns a reference (ReadOptions \
                became ReadConfig); this alias is kept for one release, see \
                CHANGELOG.md"
    )]
    pub fn read_options(&self) -> ReadConfig {
        self.config.clone()
    }

    /// The backend reads really use: the configured one after `ZRECORD_IO`, with `Uring`
    /// replaced by `Psync` where io_uring cannot be set up; `None` for a custom backend.
    pub fn backend(&self) -> Option<read::Backend> {
        self.engine.effective
    }

    /// The name of the backend reads go through (`uring`, `psync`, `mmap`, `auto`, or a
    /// custom backend's).
    pub fn backend_name(&self) -> &str {
        self.engine.backend.name()
    }

    #[cfg_attr(
        not(feature = "testing"),
        allow(dead_code, reason = "`zrecord::testing`'s read-window probes use it")
    )]
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Moves this handle to the latest commit. Returns true if it changed (a new commit, or a
    /// dataset removed and created again at this path, whatever its generation). Snapshots
    /// already taken with [`Dataset::snapshot`] keep showing their commit.
    pub fn refresh(&self) -> Result<bool> {
        let current = self.snapshot();
        if self.location.is_latest(&current)? {
            return Ok(false);
        }
        let snap = Arc::new(self.location.snapshot()?);
        let changed = !snap.same_commit(&current);
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

    /// Opens the dataset's single writer, through its [`Location::writer`]. Fails with
    /// [`Error::WriterBusy`] if another writer (in this process or another) holds it, and with
    /// [`Error::InvalidConfig`] where the location is read-only (an object store).
    pub fn writer(&self) -> Result<Writer> {
        self.location.writer()
    }

    /// The schema of the commit this handle shows: its fields (name, dtype, fixed shape,
    /// codec) and chunk size.
    pub fn schema(&self) -> Schema {
        self.snapshot().schema()
    }

    /// The user attributes of the current snapshot ([`Snapshot::attributes`]), e.g. the class
    /// names `zrecord convert images` stores as `"classes"`.
    pub fn attributes(&self) -> crate::Attributes {
        self.snapshot().attributes().clone()
    }

    /// The dataset directory (its URL for a dataset opened by URL): its location's
    /// [`path`](Location::path).
    pub fn path(&self) -> &Path {
        self.location.path()
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
        let snap = self.snapshot();
        let fields: Vec<usize> = (0..snap.field_count()).collect();
        let b = gather(&snap, &[index], &fields, &self.engine)?;
        Ok(b.into_records().into_iter().next().unwrap_or_default())
    }

    /// Reads one field of record `index` (blocking; checksum verified).
    pub fn get_field(&self, index: u64, field: &str) -> Result<Bytes> {
        let snap = self.snapshot();
        let f = snap.field_index(field)?;
        let b = gather(&snap, &[index], &[f], &self.engine)?;
        b.bytes(0, 0).ok_or(Error::IndexOutOfRange {
            index,
            len: snap.len(),
        })
    }

    /// Reads every field of `indices`, in that order, blocking the calling thread (do not call
    /// it on an async runtime's worker thread; use [`Dataset::gather`] there).
    pub fn gather_blocking(&self, indices: &[u64]) -> Result<Batch> {
        let snap = self.snapshot();
        let fields: Vec<usize> = (0..snap.field_count()).collect();
        gather(&snap, indices, &fields, &self.engine)
    }

    /// Reads the named fields of `indices`, in that order, blocking the calling thread.
    pub fn gather_fields_blocking(&self, indices: &[u64], fields: &[&str]) -> Result<Batch> {
        let snap = self.snapshot();
        let fields = fields
            .iter()
            .map(|f| snap.field_index(f))
            .collect::<Result<Vec<_>>>()?;
        gather(&snap, indices, &fields, &self.engine)
    }

    /// Reads every field of `indices`, in that order, without blocking the caller: the reads,
    /// checksums and decompression run on zrecord's worker and ring threads. Works on any
    /// executor (tokio current-thread or multi-thread, or none: it is a plain future).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the result, never the memory: reads already submitted
    /// complete into buffers the I/O thread owns, which are freed after their completions are
    /// reaped. Nothing else is affected; the same indices can be gathered again.
    pub fn gather(&self, indices: &[u64]) -> GatherFuture {
        let snap = self.snapshot();
        let fields: Vec<usize> = (0..snap.field_count()).collect();
        GatherFuture::spawn(snap, indices.to_vec(), Ok(fields), Arc::clone(&self.engine))
    }

    /// Reads the named fields of `indices`, in that order, without blocking the caller.
    ///
    /// # Cancel safety
    ///
    /// As for [`Dataset::gather`]: dropping the future loses nothing but the result.
    pub fn gather_fields(&self, indices: &[u64], fields: &[&str]) -> GatherFuture {
        let snap = self.snapshot();
        let fields = fields
            .iter()
            .map(|f| snap.field_index(f))
            .collect::<Result<Vec<_>>>();
        GatherFuture::spawn(snap, indices.to_vec(), fields, Arc::clone(&self.engine))
    }
}

/// The result of [`Dataset::gather`]: resolves to the batch once the worker thread is done.
/// `Send + 'static`: it can be moved into spawned tasks.
#[derive(Debug)]
#[must_use = "futures do nothing unless polled; the gather runs either way, but its result is lost"]
pub struct GatherFuture {
    rx: futures::channel::oneshot::Receiver<Result<Batch>>,
}

impl GatherFuture {
    /// Runs `gather` on `engine`'s read workers; the future resolves to what it returns.
    fn run_on(
        engine: &Engine,
        gather: impl FnOnce() -> Result<Batch> + Send + 'static,
    ) -> GatherFuture {
        let (tx, rx) = futures::channel::oneshot::channel();
        engine.pools().workers.spawn(move || {
            if tx.is_canceled() {
                return;
            }
            // A panic is the batch's error, not the pool thread's end.
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(gather))
                .unwrap_or_else(|panic| {
                    Err(Error::from_panic("an asynchronous gather", panic.as_ref()))
                });
            let _ = tx.send(result);
        });
        GatherFuture { rx }
    }

    fn spawn(
        snap: Arc<Snapshot>,
        indices: Vec<u64>,
        fields: Result<Vec<usize>>,
        engine: Arc<Engine>,
    ) -> GatherFuture {
        let (tx, rx) = futures::channel::oneshot::channel();
        match fields {
            Err(e) => {
                let _ = tx.send(Err(e));
            }
            Ok(fields) => {
                let pools = Arc::clone(engine.pools());
                pools.workers.spawn(move || {
                    if tx.is_canceled() {
                        return;
                    }
                    let _ = tx.send(gather(&snap, &indices, &fields, &engine));
                })
            }
        }
        GatherFuture { rx }
    }
}

impl std::future::Future for GatherFuture {
    type Output = Result<Batch>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<Batch>> {
        std::pin::Pin::new(&mut self.rx).poll(cx).map(|r| {
            r.unwrap_or_else(|_| {
                Err(Error::WorkerGone {
                    what: "the gather worker",
                })
            })
        })
    }
}

impl Snapshot {
    /// Reads every field of record `index` (default read configuration).
    pub fn get(&self, index: u64) -> Result<Vec<Bytes>> {
        let fields: Vec<usize> = (0..self.field_count()).collect();
        let engine = Engine::new(&ReadConfig::default())?;
        let b = gather(self, &[index], &fields, &engine)?;
        Ok(b.into_records().into_iter().next().unwrap_or_default())
    }

    /// Reads every field of `indices`, in that order, with `config`, blocking the calling
    /// thread.
    pub fn gather_with(&self, indices: &[u64], config: &ReadConfig) -> Result<Batch> {
        let fields: Vec<usize> = (0..self.field_count()).collect();
        gather(self, indices, &fields, &self.engine(config)?)
    }

    /// Reads the named fields of `indices`, in that order, with `config`, blocking the calling
    /// thread.
    pub fn gather_fields_with(
        &self,
        indices: &[u64],
        fields: &[&str],
        config: &ReadConfig,
    ) -> Result<Batch> {
        let fields = fields
            .iter()
            .map(|f| self.field_index(f))
            .collect::<Result<Vec<_>>>()?;
        gather(self, indices, &fields, &self.engine(config)?)
    }

    /// The reader of this snapshot with `config`: its engine, or (for a snapshot whose chunks
    /// need their location's backend) one with that backend unless `config` names its own.
    pub(crate) fn reader(&self, config: &ReadConfig) -> Result<Reader> {
        Ok(Reader {
            engine: Arc::new(self.engine(config)?),
        })
    }

    /// Reads `fields` (snapshot field numbers) of `indices` through `reader`, blocking.
    pub(crate) fn gather_by(
        &self,
        reader: &Reader,
        indices: &[u64],
        fields: &[usize],
    ) -> Result<Batch> {
        gather(self, indices, fields, &reader.engine)
    }

    /// Reads `fields` of `indices` through `reader` on its worker threads. The task holds the
    /// snapshot and the engine, nothing of the caller's.
    pub(crate) fn gather_async_by(
        self: Arc<Self>,
        reader: &Reader,
        indices: Vec<u64>,
        fields: Vec<usize>,
    ) -> GatherFuture {
        let engine = Arc::clone(&reader.engine);
        GatherFuture::run_on(&reader.engine, move || {
            gather(&self, &indices, &fields, &engine)
        })
    }

    /// Announces to `reader`'s backend the reads a gather of `indices` × `fields` will make
    /// (lookahead: nothing unless the backend wants it). `session` groups one loader's. A batch
    /// whose table pages are not all in memory (tables read on demand) is handed to the
    /// engine's workers: they load its pages, then announce its reads; the caller never waits.
    pub(crate) fn lookahead_by(
        self: &Arc<Self>,
        reader: &Reader,
        session: u64,
        indices: &[u64],
        fields: &[usize],
    ) -> Result<()> {
        if !reader.wants_lookahead() {
            return Ok(());
        }
        if !self.pages_resident(indices, fields) {
            let (snap, engine) = (Arc::clone(self), Arc::clone(&reader.engine));
            let (indices, fields) = (indices.to_vec(), fields.to_vec());
            reader.engine.pools().workers.spawn(move || {
                // Lookahead is an optimisation: a failure here is the gather's to report.
                if snap.load_pages(&indices, &fields).is_ok() {
                    let _ = gather::lookahead(&snap, &indices, &fields, &engine, session);
                }
            });
            return Ok(());
        }
        gather::lookahead(self, indices, fields, &reader.engine, session)
    }
}

/// A snapshot's read engine, as a source that pins a snapshot holds it
/// (`pipeline::DatasetSource`): gathers and lookahead go through [`Snapshot::gather_by`],
/// [`Snapshot::gather_async_by`] and [`Snapshot::lookahead_by`]; what it holds is the store's.
#[derive(Clone, Debug)]
pub(crate) struct Reader {
    engine: Arc<Engine>,
}

impl Reader {
    /// Whether the backend does anything with lookahead.
    pub(crate) fn wants_lookahead(&self) -> bool {
        self.engine.backend.wants_lookahead()
    }

    /// Drops whatever lookahead started for `session` that no gather took.
    pub(crate) fn end_lookahead(&self, session: u64) {
        self.engine.backend.end_lookahead(session);
    }
}

impl Dataset {
    /// The reader of this handle (its engine), shared.
    pub(crate) fn reader(&self) -> Reader {
        Reader {
            engine: Arc::clone(&self.engine),
        }
    }

    /// Announces the reads a gather of every field of `indices` will make (see
    /// [`Snapshot::lookahead_by`]).
    pub(crate) fn lookahead(&self, session: u64, indices: &[u64]) -> Result<()> {
        let snap = self.snapshot();
        let fields: Vec<usize> = (0..snap.field_count()).collect();
        snap.lookahead_by(&self.reader(), session, indices, &fields)
    }

    /// Drops whatever lookahead started for `session` that no gather took.
    pub(crate) fn end_lookahead(&self, session: u64) {
        self.engine.backend.end_lookahead(session);
    }
}

/// Turns the error of opening something that is not a dataset at all (no such path, not a
/// directory, no `meta.json`) into [`Error::NotADataset`]; other errors pass unchanged.
fn not_a_dataset(dir: &Path, e: Error) -> Error {
    let Error::Io { path, source, .. } = &e else {
        return e;
    };
    if path != &crate::format::layout::meta(dir) {
        return e;
    }
    let reason = match std::fs::metadata(dir) {
        Err(m) if m.kind() == std::io::ErrorKind::NotFound => "no such file or directory",
        Ok(m) if !m.is_dir() => "not a directory",
        _ if source.kind() == std::io::ErrorKind::NotFound => "it holds no meta.json",
        _ => return e,
    };
    Error::NotADataset {
        path: dir.to_path_buf(),
        reason: reason.to_string(),
    }
}
