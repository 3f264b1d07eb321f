//! The single writer of a dataset: append, modify, delete (swap-remove) and the crash-safe
//! commit, with record bytes written by concurrent chunk append tasks.
//!
//! Data path: `append` checks every limit, takes the record's index, and copies its bytes into
//! the job being filled for one append task (`store::append`); a job of about
//! `write_buffer_bytes` goes to its task through a bounded queue, and the next job to the next
//! task (round robin). Each task owns one open chunk and deflates, checksums and writes its jobs
//! on its own thread, answering with the offset entries. The writer applies entries, modifies
//! and deletes to its offset tables in call order (an op log), so record indices and tables never
//! depend on which task finishes first.
//!
//! Commit protocol (see `docs/FORMAT.md`):
//!
//! 1. Record bytes are appended past the committed chunk sizes (buffered, written with checked
//!    full-length `pwrite`s) by the append tasks.
//! 2. At commit: every queued job is finished, each task writes out its buffer and `fdatasync`s
//!    its open chunk (in parallel), every chunk sealed since the last commit is `fdatasync`ed,
//!    and the chunk directory is `fsync`ed if a chunk file was created.
//! 3. New offset entries are appended past the committed table length; replaced entries
//!    (modify, delete, appends below the table length) are appended to the patch log. Both are
//!    `fdatasync`ed. A table that has gathered too many patches is rewritten as a new table
//!    generation in new files instead; committed bytes are never overwritten.
//! 4. `meta.json.tmp` is written and `fsync`ed, renamed over `meta.json`, and the directory is
//!    `fsync`ed. Only then does `commit` return.
//! 5. Files the new meta no longer names are removed; open snapshots keep reading them through
//!    their descriptors and mappings.
//!
//! Any I/O failure while writing poisons the writer: every later call returns
//! [`Error::Poisoned`], and reopening recovers the last commit.
//!
//! Every file operation goes through the [`Vfs`] seam chosen at create/open ([`StdFs`] by
//! default), so tests can run the writer on a simulated file system that crashes or fails at
//! any operation (`tests/crash_points.rs`, `tests/io_errors.rs`). [`Writer::rebalance`]
//! rewrites live records into fresh chunks (`docs/FORMAT.md`, "Rebalance").

use crate::error::{Error, Result};
use crate::format::entry::{encode_patch, Entry, ENTRY_BYTES, PATCH_BYTES};
use crate::format::meta::{ChunkMeta, FieldMeta, Meta, TableMeta};
use crate::format::{FORMAT_VERSION, MAX_CHUNKS};
use crate::io::vfs::{self, StdFs, Vfs, VfsFile, VfsLock};
use crate::store::append::{
    fits, wait, Appender, Book, Done, Item, Job, Msg, Shared, Synced, TaskHandle,
};
use crate::store::layout;
use crate::store::schema::{check_record, Schema};
use crate::store::snapshot::{read_meta_with, FieldTable};
use futures::channel::{mpsc, oneshot};
use futures::StreamExt;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;

/// Options of a [`Writer`].
#[derive(Clone, Debug)]
pub struct WriterConfig {
    /// Deflate level for fields whose codec is `deflate`: 1 (fastest) to 12 (smallest).
    /// Default 6.
    pub deflate_level: i32,
    /// Records are handed to an append task in jobs of about this many bytes, and a task
    /// buffers deflated bytes up to this size per write. 1 to [`MAX_WRITE_BUFFER_BYTES`].
    /// Default 4 MiB.
    pub write_buffer_bytes: usize,
    /// Chunk append tasks: threads that each append only to their own open chunk, so records are
    /// deflated, checksummed and written on that many cores. 1 to [`MAX_WRITERS`]; the seed
    /// advises 1–4. Default 2.
    pub num_writers: usize,
    /// Jobs queued per append task before `append` waits (backpressure). 1 to
    /// [`MAX_QUEUE_DEPTH`]. Default 2.
    /// A writer holds at most about `num_writers × (queue_depth + 2) × write_buffer_bytes` of
    /// record bytes.
    pub queue_depth: usize,
}

/// The most append tasks a writer runs.
pub const MAX_WRITERS: usize = 16;
/// The deepest append-task queue, in jobs.
pub const MAX_QUEUE_DEPTH: usize = 64;
/// The largest job and write buffer: 1 GiB.
pub const MAX_WRITE_BUFFER_BYTES: usize = 1 << 30;

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            deflate_level: 6,
            write_buffer_bytes: 4 << 20,
            num_writers: 2,
            queue_depth: 2,
        }
    }
}

impl WriterConfig {
    fn validate(&self) -> Result<()> {
        if !(1..=MAX_WRITERS).contains(&self.num_writers) {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "num_writers is {}; it must be between 1 and {MAX_WRITERS}",
                    self.num_writers
                ),
            });
        }
        if !(1..=MAX_QUEUE_DEPTH).contains(&self.queue_depth) {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "queue_depth is {}; it must be between 1 and {MAX_QUEUE_DEPTH}",
                    self.queue_depth
                ),
            });
        }
        if !(1..=MAX_WRITE_BUFFER_BYTES).contains(&self.write_buffer_bytes) {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "write_buffer_bytes is {}; it must be between 1 and {MAX_WRITE_BUFFER_BYTES}",
                    self.write_buffer_bytes
                ),
            });
        }
        Ok(())
    }
}

/// Old chunks a rebalance keeps open at once.
const MAX_OPEN_READERS: usize = 64;

/// What [`Writer::rebalance`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RebalanceReport {
    /// The generation of the rebalanced commit.
    pub generation: u64,
    /// Records rewritten.
    pub records: u64,
    /// Stored bytes of every live record and field (what the chunks must hold at least).
    pub live_bytes: u64,
    /// Bytes held in chunk files before (their committed sizes).
    pub chunk_bytes_before: u64,
    /// Bytes held in chunk files after.
    pub chunk_bytes_after: u64,
    /// Chunk files before.
    pub chunks_before: usize,
    /// Chunk files after.
    pub chunks_after: usize,
    /// The dataset's chunk size (a chunk is sealed when the next record would pass it).
    pub chunk_size_bytes: u64,
}

impl RebalanceReport {
    /// Live stored bytes / bytes held in chunk files, before (1.0 when the chunks were empty).
    pub fn utilization_before(&self) -> f64 {
        ratio(self.live_bytes, self.chunk_bytes_before)
    }

    /// Live stored bytes / bytes held in chunk files, after: 1.0 (every byte is live).
    pub fn utilization_after(&self) -> f64 {
        ratio(self.live_bytes, self.chunk_bytes_after)
    }

    /// The seed's measure, before: live stored bytes / (`chunk_size_bytes` × chunks), which also
    /// counts the unused tail of every chunk.
    pub fn capacity_utilization_before(&self) -> f64 {
        ratio(
            self.live_bytes,
            self.chunk_size_bytes
                .saturating_mul(self.chunks_before as u64),
        )
    }

    /// The seed's measure, after: live stored bytes / (`chunk_size_bytes` × chunks).
    pub fn capacity_utilization_after(&self) -> f64 {
        ratio(
            self.live_bytes,
            self.chunk_size_bytes
                .saturating_mul(self.chunks_after as u64),
        )
    }
}

fn ratio(live: u64, held: u64) -> f64 {
    if held == 0 {
        1.0
    } else {
        live as f64 / held as f64
    }
}

/// A field's offset table as the writer sees it: the committed table plus pending changes.
#[derive(Debug)]
struct WriterField {
    /// Committed table; its `patches` also holds the pending patches.
    committed: FieldTable,
    table_file: Box<dyn VfsFile>,
    patch_file: Box<dyn VfsFile>,
    /// Entries for indices `table_len..`, not yet written to the table file.
    appended: Vec<Entry>,
    /// Patches not yet written to the patch log, in order.
    pending: Vec<(u64, Entry)>,
}

impl WriterField {
    fn table(&self) -> TableMeta {
        self.committed.meta.table
    }

    fn entry(&self, index: u64) -> Result<Entry> {
        let t = self.table();
        if index < t.table_len {
            return self.committed.entry(index);
        }
        usize::try_from(index - t.table_len)
            .ok()
            .and_then(|k| self.appended.get(k).copied())
            .ok_or_else(|| {
                self.committed
                    .corrupt(index, "no entry for this index".to_string())
            })
    }

    fn set(&mut self, index: u64, e: Entry) {
        let t = self.table();
        if index < t.table_len {
            self.committed.patches.insert(index, e);
            self.pending.push((index, e));
            return;
        }
        let k = usize::try_from(index - t.table_len).unwrap_or(usize::MAX);
        match self.appended.get_mut(k) {
            Some(slot) => *slot = e,
            None => self.appended.push(e),
        }
    }
}

/// What a commit needs: the offset tables, the last commit's meta, the lock. Behind a mutex so
/// [`Writer::commit_async`] can finish a commit on a thread of its own.
#[derive(Debug)]
struct Core {
    /// Every file operation goes through this seam (see [`crate::io::vfs`]).
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    _lock: Box<dyn VfsLock>,
    meta: Meta,
    fields: Vec<WriterField>,
    /// Compact every table at the next commit (tests).
    force_compaction: bool,
}

/// A change to the offset tables, applied in call order once its values are placed.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// Record `index` takes the next entries of job `ticket`: one per field (`field: None`) or
    /// one for `field`.
    Set {
        index: u64,
        field: Option<usize>,
        ticket: u64,
    },
    /// Swap-remove of `index` while the last record is `last`.
    Delete { index: u64, last: u64 },
}

/// The next-fit projection of one append task's open chunk, from logical lengths (an upper
/// bound of stored lengths), so `append` can refuse a record that could need a chunk id beyond
/// the format's 65,535 before any byte is written.
#[derive(Clone, Copy, Debug, Default)]
struct Projection {
    /// The projected size of the task's open chunk (`None`: no chunk open).
    size: Option<u64>,
}

impl Projection {
    /// Adds a value of `n` bytes; returns true if it opens a chunk.
    fn add(&mut self, n: u64, limit: u64) -> bool {
        if n == 0 {
            return false;
        }
        match self.size {
            Some(s) if fits(s, n, limit) => {
                self.size = Some(s + n);
                false
            }
            _ => {
                self.size = Some(n);
                true
            }
        }
    }
}

/// The one writer of a dataset. Holds an exclusive lock on `writer.lock` for its lifetime.
///
/// Changes are invisible to readers, and lost if the process dies, until [`Writer::commit`]
/// (or [`Writer::commit_async`]) returns. Record bytes are written by `num_writers` append
/// tasks (threads) that each own one open chunk ([`WriterConfig::num_writers`]); the writer
/// itself is driven by one caller at a time (`&mut self`). Dropping it waits for its append
/// tasks to stop (and for a commit whose future was dropped, if one is still running).
#[derive(Debug)]
pub struct Writer {
    core: Arc<Mutex<Core>>,
    shared: Arc<Shared>,
    config: WriterConfig,
    /// The fields' schema, for the checks `append` makes before taking an index.
    field_metas: Vec<FieldMeta>,
    /// Number of records, uncommitted changes included (what the caller sees).
    len: u64,
    generation: u64,
    poisoned: Option<String>,
    tasks: Vec<TaskHandle>,
    done_rx: mpsc::UnboundedReceiver<Done>,
    /// The job being filled, for task `open_task`.
    open: Job,
    open_task: usize,
    /// Full jobs not yet handed to their task (the task in the pair).
    outbox: VecDeque<(usize, Job)>,
    next_ticket: u64,
    /// Jobs handed to a task and not yet answered.
    in_flight: usize,
    /// Table changes not yet applied, in call order.
    ops: VecDeque<Op>,
    /// Entries of answered jobs, by ticket, not yet applied.
    answered: HashMap<u64, std::vec::IntoIter<Entry>>,
    /// Job buffers to reuse.
    spare: Vec<Vec<u8>>,
    projections: Vec<Projection>,
    /// Chunk ids the projections have opened since the last resync, and the ids free then.
    projected_new: u64,
    free_ids: u64,
    /// A commit finishing on its own thread ([`Writer::commit_async`]).
    committing: Option<oneshot::Receiver<Result<u64>>>,
}

impl Writer {
    /// Creates a dataset at `path` and opens its writer. `path` must not exist or must be an
    /// empty directory. The empty dataset is committed (generation 0) before this returns: it is
    /// built in a sibling directory and renamed into place, so a crash leaves either nothing or
    /// a complete empty dataset.
    pub fn create(path: impl AsRef<Path>, schema: &Schema, config: WriterConfig) -> Result<Writer> {
        Writer::create_with_vfs(StdFs::shared(), path, schema, config)
    }

    /// [`Writer::create`] on the file system `vfs` (the real one is [`StdFs`]; tests use the
    /// simulated and fault-injecting ones of `zrecord::io::fault`).
    pub fn create_with_vfs(
        vfs: Arc<dyn Vfs>,
        path: impl AsRef<Path>,
        schema: &Schema,
        config: WriterConfig,
    ) -> Result<Writer> {
        let path = path.as_ref();
        schema.validate()?;
        config.validate()?;
        let exists = || Error::AlreadyExists {
            path: path.to_path_buf(),
        };
        match vfs.read_dir(path) {
            Ok(names) if names.is_empty() => {}
            Ok(_) => return Err(exists()),
            Err(e) => {
                if vfs.exists(path)? {
                    // It exists but cannot be listed: not a directory, or an I/O failure.
                    return Err(match e {
                        Error::Io { ref source, .. }
                            if source.raw_os_error() == Some(libc::ENOTDIR) =>
                        {
                            exists()
                        }
                        e => e,
                    });
                }
            }
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let tmp = parent.join(format!(".{name}.zrecord-create-{}", std::process::id()));
        if vfs.exists(&tmp)? {
            vfs.remove_dir_all(&tmp)?;
        }
        let built = build_empty(&*vfs, &tmp, schema);
        if let Err(e) = built {
            let _ = vfs.remove_dir_all(&tmp);
            return Err(e);
        }
        // rename(2) replaces an empty directory atomically.
        if let Err(e) = vfs.rename(&tmp, path) {
            let _ = vfs.remove_dir_all(&tmp);
            return Err(e);
        }
        vfs.sync_dir(&parent)?;
        Writer::open_with_vfs(vfs, path, config)
    }

    /// Opens the writer of an existing dataset at its latest commit, cleaning what a crash left
    /// behind: a stale `meta.json.tmp`, files no commit names, and bytes past committed sizes.
    pub fn open(path: impl AsRef<Path>, config: WriterConfig) -> Result<Writer> {
        Writer::open_with_vfs(StdFs::shared(), path, config)
    }

    /// [`Writer::open`] on the file system `vfs`.
    pub fn open_with_vfs(
        vfs: Arc<dyn Vfs>,
        path: impl AsRef<Path>,
        config: WriterConfig,
    ) -> Result<Writer> {
        config.validate()?;
        let dir = path.as_ref().to_path_buf();
        let lock = vfs.lock(&dir.join(layout::LOCK))?;
        let (_, meta) = read_meta_with(&*vfs, &dir)?;
        clean_orphans(&*vfs, &dir, &meta)?;
        let mut fields = Vec::with_capacity(meta.fields.len());
        for f in &meta.fields {
            fields.push(open_field(&*vfs, &dir, f)?);
        }
        let sizes: BTreeMap<u16, u64> = meta.chunks.iter().map(|c| (c.id, c.size)).collect();
        for c in &meta.chunks {
            let p = layout::chunk(&dir, c.id);
            let have = vfs.open_read(&p)?.len()?;
            if have < c.size {
                return Err(Error::Truncated {
                    path: p,
                    expected: c.size,
                    actual: have,
                });
            }
        }
        // Committed chunks with room, newest ids first: each task continues one before it takes
        // a fresh id, so reopening does not leave a partly filled chunk per task every time.
        let limit = meta.chunk_size_bytes;
        let reusable: Vec<(u16, u64)> = sizes
            .iter()
            .rev()
            .filter(|&(_, &s)| s < limit)
            .map(|(&id, &s)| (id, s))
            .take(config.num_writers)
            .collect();
        let shared = Arc::new(Shared {
            vfs: vfs.clone(),
            dir: dir.clone(),
            chunk_size_bytes: limit,
            write_buffer_bytes: config.write_buffer_bytes,
            book: Mutex::new(Book::new(sizes)),
        });
        let (done_tx, done_rx) = mpsc::unbounded();
        let mut tasks = Vec::with_capacity(config.num_writers);
        let n = config.num_writers;
        let mut projections = vec![Projection::default(); n];
        for (k, p) in projections.iter_mut().enumerate() {
            let appender = match reusable.get(k) {
                Some(&(id, size)) => {
                    p.size = Some(size);
                    Appender::resuming(shared.clone(), k as u32, n as u32, id, size)
                }
                None => Appender::new(shared.clone(), k as u32, n as u32),
            };
            tasks.push(TaskHandle::spawn(
                k,
                appender,
                config.deflate_level,
                config.queue_depth,
                done_tx.clone(),
            )?);
        }
        let free_ids = u64::from(MAX_CHUNKS).saturating_sub(meta.chunks.len() as u64);
        Ok(Writer {
            len: meta.len,
            generation: meta.generation,
            field_metas: meta.fields.clone(),
            core: Arc::new(Mutex::new(Core {
                vfs,
                dir,
                _lock: lock,
                meta,
                fields,
                force_compaction: false,
            })),
            shared,
            config,
            poisoned: None,
            tasks,
            done_rx,
            open: Job::default(),
            open_task: 0,
            outbox: VecDeque::new(),
            next_ticket: 0,
            in_flight: 0,
            ops: VecDeque::new(),
            answered: HashMap::new(),
            spare: Vec::new(),
            projections,
            projected_new: 0,
            free_ids,
            committing: None,
        })
    }

    /// Number of records, including uncommitted changes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True if there are no records (including uncommitted changes).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The generation of the last commit this writer knows of.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The dataset directory.
    pub fn path(&self) -> &Path {
        &self.shared.dir
    }

    /// Makes the next commit write every field's table as a new generation (compaction), as if
    /// the patch thresholds were reached. For tests of the compaction path.
    #[doc(hidden)]
    pub fn force_compaction_at_next_commit(&mut self) {
        self.core().force_compaction = true;
    }

    fn core(&self) -> MutexGuard<'_, Core> {
        // A panic while holding the lock leaves the tables in an unknown state; the writer is
        // then poisoned by the error that follows, or was by the panic's caller.
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn check_poisoned(&self) -> Result<()> {
        match &self.poisoned {
            Some(cause) => Err(Error::Poisoned {
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Poisons the writer if `r` failed: its state on disk, or its tables, are then unknown.
    fn poison_on<T>(&mut self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            if self.poisoned.is_none() {
                self.poisoned = Some(e.to_string());
            }
        }
        r
    }

    fn field_position(&self, name: &str) -> Result<usize> {
        self.field_metas
            .iter()
            .position(|f| f.name == name)
            .ok_or_else(|| Error::UnknownField {
                field: name.to_string(),
            })
    }

    fn check_index(&self, index: u64) -> Result<()> {
        if index >= self.len {
            return Err(Error::IndexOutOfRange {
                index,
                len: self.len,
            });
        }
        Ok(())
    }

    // ---- Accepting values (no waiting, no I/O) ----

    /// Checks a record's values for `positions` (field numbers) against the schema and the
    /// chunk-id budget, on `proj` (the projections, updated on success), without taking it.
    fn check_values<B: AsRef<[u8]>>(
        &self,
        positions: impl Iterator<Item = usize> + Clone,
        values: &[B],
        p: &mut Projection,
        projected_new: &mut u64,
    ) -> Result<()> {
        for (f, v) in positions.clone().zip(values) {
            let meta = self.field_metas.get(f).ok_or_else(|| Error::UnknownField {
                field: format!("#{f}"),
            })?;
            check_record(meta, v.as_ref())?;
        }
        let limit = self.shared.chunk_size_bytes;
        for v in values {
            if p.add(v.as_ref().len() as u64, limit) {
                *projected_new += 1;
            }
        }
        if *projected_new > self.free_ids {
            return Err(Error::TooManyChunks { max: MAX_CHUNKS });
        }
        Ok(())
    }

    /// [`Writer::check_values`] for the open job's task; its projection is updated on success.
    fn check_for_open_job<B: AsRef<[u8]>>(
        &mut self,
        positions: impl Iterator<Item = usize> + Clone,
        values: &[B],
    ) -> Result<()> {
        let task = self.open_task;
        let mut p = self.projections.get(task).copied().ok_or_else(task_gone)?;
        let mut new = self.projected_new;
        self.check_values(positions, values, &mut p, &mut new)?;
        if let Some(slot) = self.projections.get_mut(task) {
            *slot = p;
        }
        self.projected_new = new;
        Ok(())
    }

    /// Copies checked values into the open job and logs `op`; moves a full job to the outbox.
    fn take_values<B: AsRef<[u8]>>(
        &mut self,
        positions: impl Iterator<Item = usize>,
        values: &[B],
        op: Op,
    ) {
        for (f, v) in positions.zip(values) {
            let v = v.as_ref();
            let codec = self.field_metas.get(f).map(|m| m.codec).unwrap_or_default();
            self.open.data.extend_from_slice(v);
            self.open.items.push(Item {
                len: v.len() as u32,
                codec,
            });
        }
        self.ops.push_back(op);
        if self.open.data.len() >= self.config.write_buffer_bytes {
            self.close_open_job();
        }
    }

    /// The ticket of the open job.
    fn open_ticket(&self) -> u64 {
        self.next_ticket
    }

    /// Moves the open job (if it has values) to the outbox and starts the next task's job.
    fn close_open_job(&mut self) {
        if self.open.items.is_empty() {
            return;
        }
        let mut data = self.spare.pop().unwrap_or_default();
        data.clear();
        data.reserve(self.config.write_buffer_bytes + 64);
        let next = Job {
            ticket: self.next_ticket + 1,
            data,
            items: Vec::new(),
        };
        let job = std::mem::replace(&mut self.open, next);
        self.outbox.push_back((self.open_task, job));
        self.next_ticket += 1;
        self.open_task = (self.open_task + 1) % self.tasks.len().max(1);
    }

    /// Accepts a whole record (every field) as record `self.len`.
    fn accept_record<B: AsRef<[u8]>>(&mut self, fields: &[B]) -> Result<u64> {
        if fields.len() != self.field_metas.len() {
            return Err(Error::FieldCount {
                expected: self.field_metas.len(),
                actual: fields.len(),
            });
        }
        self.check_for_open_job(0..fields.len(), fields)?;
        let index = self.len;
        let op = Op::Set {
            index,
            field: None,
            ticket: self.open_ticket(),
        };
        self.take_values(0..fields.len(), fields, op);
        self.len += 1;
        Ok(index)
    }

    /// Checks every record of a batch, as if appended one after another, before any is taken.
    fn check_many<R: AsRef<[B]>, B: AsRef<[u8]>>(&self, records: &[R]) -> Result<()> {
        let mut proj = self.projections.clone();
        let mut new = self.projected_new;
        let mut task = self.open_task;
        let mut bytes = self.open.data.len();
        let n = self.field_metas.len();
        for r in records {
            let r = r.as_ref();
            if r.len() != n {
                return Err(Error::FieldCount {
                    expected: n,
                    actual: r.len(),
                });
            }
            let p = proj.get_mut(task).ok_or_else(task_gone)?;
            self.check_values(0..n, r, p, &mut new)?;
            bytes += r.iter().map(|v| v.as_ref().len()).sum::<usize>();
            if bytes >= self.config.write_buffer_bytes {
                bytes = 0;
                task = (task + 1) % self.tasks.len().max(1);
            }
        }
        Ok(())
    }

    // ---- Talking to the append tasks ----

    /// Records a task's answer: its entries wait for their ops; an error poisons the writer.
    fn on_done(&mut self, d: Done) -> Result<()> {
        self.in_flight = self.in_flight.saturating_sub(1);
        if self.spare.len() < self.tasks.len() * (self.config.queue_depth + 2) {
            self.spare.push(d.data);
        }
        let entries = self.poison_on(d.entries)?;
        self.answered.insert(d.ticket, entries.into_iter());
        Ok(())
    }

    /// Takes every answer already there, without waiting.
    fn take_ready_answers(&mut self) -> Result<()> {
        while let Ok(d) = self.done_rx.try_recv() {
            self.on_done(d)?;
        }
        Ok(())
    }

    /// Applies logged ops, in order, as far as their entries have arrived.
    fn apply_ready(&mut self) -> Result<()> {
        let r = self.apply_ready_inner();
        self.poison_on(r)
    }

    fn apply_ready_inner(&mut self) -> Result<()> {
        match self.ops.front() {
            None => return Ok(()),
            // The common case while appending: the oldest op still waits for its job.
            Some(Op::Set { ticket, .. }) if !self.answered.contains_key(ticket) => return Ok(()),
            Some(_) => {}
        }
        let core = self.core.clone();
        let mut core = core.lock().unwrap_or_else(|e| e.into_inner());
        let nfields = self.field_metas.len();
        while let Some(&op) = self.ops.front() {
            match op {
                Op::Delete { index, last } => core.apply_delete(index, last)?,
                Op::Set {
                    index,
                    field,
                    ticket,
                } => {
                    let Some(entries) = self.answered.get_mut(&ticket) else {
                        break;
                    };
                    let mut next = || {
                        entries.next().ok_or_else(|| Error::InvalidConfig {
                            reason: format!("append job {ticket} answered too few entries"),
                        })
                    };
                    match field {
                        Some(f) => {
                            let e = next()?;
                            if let Some(wf) = core.fields.get_mut(f) {
                                wf.set(index, e);
                            }
                        }
                        None => {
                            for f in 0..nfields {
                                let e = next()?;
                                if let Some(wf) = core.fields.get_mut(f) {
                                    wf.set(index, e);
                                }
                            }
                        }
                    }
                    if entries.len() == 0 {
                        self.answered.remove(&ticket);
                    }
                }
            }
            self.ops.pop_front();
        }
        Ok(())
    }

    /// Hands outbox jobs to their tasks while their queues have room; `Pending` once one is
    /// full (the caller's waker is registered with that queue).
    fn poll_send_outbox(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Result<()>> {
        while let Some(&(task, _)) = self.outbox.front() {
            let Some(t) = self.tasks.get_mut(task) else {
                return Poll::Ready(Err(Error::InvalidConfig {
                    reason: format!("no append task {task}"),
                }));
            };
            match t.tx.poll_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(_)) => return Poll::Ready(Err(task_gone())),
                Poll::Ready(Ok(())) => {}
            }
            let Some((_, job)) = self.outbox.pop_front() else {
                break;
            };
            if t.tx.start_send(Msg::Job(job)).is_err() {
                return Poll::Ready(Err(task_gone()));
            }
            self.in_flight += 1;
        }
        Poll::Ready(Ok(()))
    }

    /// Waits (asynchronously) until every outbox job is handed to its task, taking answers as
    /// they come. Cancel safe: jobs not handed over stay in the outbox.
    async fn send_outbox(&mut self) -> Result<()> {
        let r = futures::future::poll_fn(|cx| self.poll_send_outbox(cx)).await;
        let r = self.poison_on(r);
        r?;
        self.take_ready_answers()?;
        self.apply_ready()
    }

    /// Waits (asynchronously) for every job handed over to be answered and applies every op.
    /// Cancel safe: answers are recorded as they arrive.
    async fn finish_jobs(&mut self) -> Result<()> {
        self.close_open_job();
        self.send_outbox().await?;
        while self.in_flight > 0 {
            match self.done_rx.next().await {
                Some(d) => self.on_done(d)?,
                None => return self.poison_on(Err(task_gone())),
            }
        }
        self.apply_ready()?;
        if !self.ops.is_empty() || !self.answered.is_empty() {
            let r = Err(Error::InvalidConfig {
                reason: "append tasks answered fewer or more values than were sent".to_string(),
            });
            return self.poison_on(r);
        }
        Ok(())
    }

    /// Sends `msg(reply)` to every task and waits for every reply.
    async fn ask_tasks<T>(
        &mut self,
        msg: impl Fn(oneshot::Sender<Result<T>>) -> Msg,
    ) -> Result<Vec<T>> {
        let r = self.ask_tasks_inner(msg).await;
        self.poison_on(r)
    }

    async fn ask_tasks_inner<T>(
        &mut self,
        msg: impl Fn(oneshot::Sender<Result<T>>) -> Msg,
    ) -> Result<Vec<T>> {
        let mut replies = Vec::with_capacity(self.tasks.len());
        for t in &mut self.tasks {
            let (tx, rx) = oneshot::channel();
            futures::future::poll_fn(|cx| t.tx.poll_ready(cx))
                .await
                .map_err(|_| task_gone())?;
            t.tx.start_send(msg(tx)).map_err(|_| task_gone())?;
            replies.push(rx);
        }
        let mut out = Vec::with_capacity(replies.len());
        let mut first_err = None;
        for rx in replies {
            match rx.await {
                Ok(Ok(v)) => out.push(v),
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(_) => {
                    first_err.get_or_insert_with(task_gone);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// Takes the outcome of a commit finishing on its own thread, if one is running.
    async fn reclaim_commit(&mut self) -> Result<()> {
        let Some(rx) = self.committing.as_mut() else {
            return Ok(());
        };
        let r = rx.await.unwrap_or_else(|_| {
            Err(Error::Poisoned {
                cause: "a commit thread stopped without an answer".to_string(),
            })
        });
        self.committing = None;
        match self.poison_on(r) {
            Ok(generation) => {
                self.generation = generation;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Everything a call does before taking new values: no commit in flight, the outbox handed
    /// over (backpressure), answers applied.
    async fn ready(&mut self) -> Result<()> {
        self.check_poisoned()?;
        self.reclaim_commit().await?;
        self.send_outbox().await
    }

    /// The part of a commit after every task has synced: sealed chunks, tables, `meta.json`.
    fn commit_tail(core: &Mutex<Core>, shared: &Shared, len: u64) -> Result<u64> {
        let mut core = core.lock().unwrap_or_else(|e| e.into_inner());
        sync_sealed(shared)?;
        core.commit_tables(shared, len)
    }

    /// After a commit: the projections restart from what the tasks report.
    fn resync(&mut self, sizes: Vec<Option<u64>>) {
        for (p, s) in self.projections.iter_mut().zip(sizes) {
            p.size = s;
        }
        self.projected_new = 0;
        let used = self.shared.book().sizes.len() as u64;
        self.free_ids = u64::from(MAX_CHUNKS).saturating_sub(used);
    }

    // ---- Public API: async ----

    /// Appends a record — one byte string per field, in schema order; an empty one is an absent
    /// field — and returns its index. Every limit is checked before the index is taken. The
    /// bytes are copied; the future waits only while the append tasks' queues are full
    /// (backpressure) and never blocks the executor: deflate, checksums and writes run on the
    /// append tasks' threads. An I/O error of an append task is returned by a later call (and
    /// poisons the writer).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the future waits before it takes the record, so dropping it means the record
    /// was not appended (`len()` is unchanged), and any earlier record stays queued.
    pub async fn append_async<B: AsRef<[u8]> + Sync>(&mut self, fields: &[B]) -> Result<u64> {
        self.ready().await?;
        self.accept_record(fields)
    }

    /// Appends `records` (each one byte string per field) and returns their indices, which are
    /// consecutive. Every record is checked before any is taken: on an error, none is appended.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the future waits before it takes the records, and takes all of them at once
    /// (dropping it means none was appended). Jobs beyond the queues' room wait in the writer and
    /// are handed over by the next call (backpressure then applies to it): the writer holds up
    /// to the whole batch's bytes until then, beyond its usual bound (the blocking
    /// [`Writer::append_many`] hands each job over before copying the next).
    pub async fn append_many_async<R, B>(&mut self, records: &[R]) -> Result<Range<u64>>
    where
        R: AsRef<[B]> + Sync,
        B: AsRef<[u8]> + Sync,
    {
        self.ready().await?;
        self.accept_many(records)
    }

    /// [`Writer::commit`] without blocking the executor: the append tasks sync their chunks in
    /// parallel, and the rest of the commit (sealed chunks, tables, `meta.json`) runs on a
    /// thread of its own while the future waits.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not undo what was queued. If it is dropped after the commit's
    /// last part started, that part still runs to the end on its thread, and the next call on the
    /// writer (or dropping it) waits for it and takes its outcome: the commit may then be durable
    /// without its generation having been returned; [`Writer::generation`] tells after the next
    /// call.
    pub async fn commit_async(&mut self) -> Result<u64> {
        self.ready().await?;
        self.finish_jobs().await?;
        let sizes = self
            .ask_tasks(|tx: oneshot::Sender<Synced>| Msg::Sync(tx))
            .await?;
        let (tx, rx) = oneshot::channel();
        let core = self.core.clone();
        let shared = self.shared.clone();
        let len = self.len;
        let spawned = std::thread::Builder::new()
            .name("zrecord-commit".to_string())
            .spawn(move || {
                let r = Writer::commit_tail(&core, &shared, len);
                // The writer may be dropped as soon as the answer arrives: let go of the lock
                // and the table descriptors first.
                drop(core);
                drop(shared);
                let _ = tx.send(r);
            });
        if let Err(e) = spawned {
            let r = Err(Error::io(&self.shared.dir, "spawn a commit thread", e));
            return self.poison_on(r);
        }
        self.committing = Some(rx);
        self.reclaim_commit().await?;
        self.resync(sizes);
        Ok(self.generation)
    }

    // ---- Public API: blocking ----

    /// Appends a record — one byte string per field, in schema order; an empty one is an absent
    /// field — and returns its index. Every limit is checked before the index is taken. Blocks
    /// only while the append tasks' queues are full (backpressure).
    ///
    /// The chunk-id limit (65,535 chunks) is checked before the bytes are deflated, so between
    /// two commits each value counts at its logical length, an upper bound of what it stores: a
    /// dataset close to the limit may refuse a deflate record that would have fit
    /// ([`Error::TooManyChunks`]); a commit resets the count to the chunks really used.
    pub fn append<B: AsRef<[u8]>>(&mut self, fields: &[B]) -> Result<u64> {
        wait(self.ready())?;
        self.accept_record(fields)
    }

    /// Appends `records` (each one byte string per field) and returns their indices, which are
    /// consecutive. Every record is checked before any is taken: on an error, none is appended.
    pub fn append_many<R: AsRef<[B]>, B: AsRef<[u8]>>(
        &mut self,
        records: &[R],
    ) -> Result<Range<u64>> {
        wait(self.ready())?;
        self.check_many(records)?;
        let start = self.len;
        for r in records {
            // Checked above, as a batch: this cannot fail.
            self.accept_record(r.as_ref())?;
            if !self.outbox.is_empty() {
                // Hand each full job over before copying more: memory stays bounded.
                wait(self.send_outbox())?;
            }
        }
        Ok(start..self.len)
    }

    fn accept_many<R: AsRef<[B]>, B: AsRef<[u8]>>(&mut self, records: &[R]) -> Result<Range<u64>> {
        self.check_many(records)?;
        let start = self.len;
        for r in records {
            // Checked above, as a batch: this cannot fail.
            self.accept_record(r.as_ref())?;
        }
        Ok(start..self.len)
    }

    /// Replaces one field of record `index`.
    pub fn modify(&mut self, index: u64, field: &str, data: &[u8]) -> Result<()> {
        wait(self.ready())?;
        let f = self.field_position(field)?;
        self.check_index(index)?;
        self.check_for_open_job(std::iter::once(f), &[data])?;
        let op = Op::Set {
            index,
            field: Some(f),
            ticket: self.open_ticket(),
        };
        self.take_values(std::iter::once(f), &[data], op);
        Ok(())
    }

    /// Replaces every field of record `index`.
    pub fn modify_record<B: AsRef<[u8]>>(&mut self, index: u64, fields: &[B]) -> Result<()> {
        wait(self.ready())?;
        if fields.len() != self.field_metas.len() {
            return Err(Error::FieldCount {
                expected: self.field_metas.len(),
                actual: fields.len(),
            });
        }
        self.check_index(index)?;
        self.check_for_open_job(0..fields.len(), fields)?;
        let op = Op::Set {
            index,
            field: None,
            ticket: self.open_ticket(),
        };
        self.take_values(0..fields.len(), fields, op);
        Ok(())
    }

    /// Deletes record `index` by swap-remove: the last record moves into its place and the
    /// length shrinks by one. Indices of other records do not change.
    pub fn delete(&mut self, index: u64) -> Result<()> {
        wait(self.ready())?;
        self.check_index(index)?;
        let last = self.len - 1;
        self.ops.push_back(Op::Delete { index, last });
        self.len = last;
        self.apply_ready()
    }

    /// Makes everything appended, modified and deleted so far durable and visible to readers
    /// that open or refresh afterwards. Returns the new generation. On an I/O error the writer is
    /// poisoned, and the dataset on disk still holds the previous commit (or this one, if the
    /// failure came after the rename).
    pub fn commit(&mut self) -> Result<u64> {
        wait(async {
            self.ready().await?;
            self.finish_jobs().await?;
            self.ask_tasks(|tx: oneshot::Sender<Synced>| Msg::Sync(tx))
                .await
        })
        .and_then(|sizes| {
            let r = Writer::commit_tail(&self.core, &self.shared, self.len);
            let generation = self.poison_on(r)?;
            self.generation = generation;
            self.resync(sizes);
            Ok(generation)
        })
    }

    /// True if there are changes since the last commit (after every job is finished).
    fn has_pending(&self) -> bool {
        let core = self.core();
        let book = self.shared.book();
        self.len != core.meta.len
            || core
                .fields
                .iter()
                .any(|f| !f.appended.is_empty() || !f.pending.is_empty())
            || core.meta.chunks.len() != book.sizes.len()
            || core
                .meta
                .chunks
                .iter()
                .any(|c| book.sizes.get(&c.id) != Some(&c.size))
    }

    /// Rewrites every live record (all fields), in index order, into fresh chunks, writes every
    /// field's offset table as a new generation, and commits that atomically (the same
    /// `meta.json` rename as any commit). The old chunk files are then unlinked: snapshots opened
    /// before keep reading them through the descriptors and mappings they hold (a file is never
    /// truncated while a snapshot may map it), and a crash at any point leaves either the old or
    /// the new commit, with the unreferenced files removed at the next writer open.
    ///
    /// Pending changes are committed first (a commit of their own), so a rebalance never mixes
    /// with unacknowledged work. Stored bytes are copied as they are (codec and checksum kept);
    /// each is checked against its CRC32C while copied, so damage is reported
    /// ([`Error::ChecksumMismatch`]) rather than carried over. Any error poisons the writer;
    /// reopening recovers the last commit. Runs only when called: nothing triggers it. Blocking
    /// (it reads and writes the whole dataset): from async code, run it on a blocking thread.
    ///
    /// The new chunks take ids the old ones do not use, so old and new chunks together must fit
    /// in the 65,535 ids of the format ([`Error::TooManyChunks`] otherwise).
    pub fn rebalance(&mut self) -> Result<RebalanceReport> {
        wait(async {
            self.ready().await?;
            self.finish_jobs().await
        })?;
        if self.has_pending() {
            self.commit()?;
        }
        let r = wait(self.ask_tasks(|tx: oneshot::Sender<Result<()>>| Msg::Seal(tx)));
        self.poison_on(r)?;
        // The sealed chunks were synced by the last commit and nothing was appended since.
        self.shared.book().sealed.clear();
        let r = self.core().rebalance(&self.shared, self.len);
        let (report, resume) = self.poison_on(r)?;
        self.generation = report.generation;
        // Task 0 continues the last rebalanced chunk, if it has room.
        let mut sizes = vec![None; self.tasks.len()];
        if let Some((id, size)) = resume {
            let r = wait(async {
                let t = self.tasks.first_mut().ok_or_else(task_gone)?;
                futures::future::poll_fn(|cx| t.tx.poll_ready(cx))
                    .await
                    .map_err(|_| task_gone())?;
                t.tx.start_send(Msg::Resume(id, size))
                    .map_err(|_| task_gone())
            });
            self.poison_on(r)?;
            if let Some(s) = sizes.first_mut() {
                *s = Some(size);
            }
        }
        self.resync(sizes);
        Ok(report)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // A commit still finishing on its thread holds the lock: let it end first.
        if let Some(rx) = self.committing.take() {
            let _ = wait(rx);
        }
        for t in &mut self.tasks {
            t.stop();
        }
    }
}

/// The error when an append task's thread is gone (it panicked).
fn task_gone() -> Error {
    Error::Poisoned {
        cause: "an append task stopped".to_string(),
    }
}

/// Commit step 2 for the chunks sealed since the last commit, and the chunk directory.
fn sync_sealed(shared: &Shared) -> Result<()> {
    let (sealed, created) = {
        let mut book = shared.book();
        (
            std::mem::take(&mut book.sealed),
            std::mem::replace(&mut book.created_chunk_file, false),
        )
    };
    for path in &sealed {
        shared.vfs.open_read(path)?.sync_data()?;
    }
    if created {
        shared.vfs.sync_dir(&layout::chunk_dir(&shared.dir))?;
    }
    Ok(())
}

impl Core {
    /// Applies a swap-remove of `index` while the last record is `last`.
    fn apply_delete(&mut self, index: u64, last: u64) -> Result<()> {
        if index != last {
            let moved = self
                .fields
                .iter()
                .map(|wf| wf.entry(last))
                .collect::<Result<Vec<_>>>()?;
            for (wf, e) in self.fields.iter_mut().zip(moved) {
                wf.set(index, e);
            }
        }
        for wf in &mut self.fields {
            let t = wf.table().table_len;
            let keep = usize::try_from(last.saturating_sub(t)).unwrap_or(usize::MAX);
            wf.appended.truncate(keep);
        }
        Ok(())
    }

    /// Commit steps 3-5, once every chunk is durable: offset data, then `meta.json`.
    fn commit_tables(&mut self, shared: &Shared, len: u64) -> Result<u64> {
        let mut tables = Vec::with_capacity(self.fields.len());
        let mut new_files = false;
        for wf in &mut self.fields {
            let t = wf.table();
            let patches = wf.committed.patches.len() as u64;
            let needs_compaction = self.force_compaction
                || patches > (64 * 1024).max(t.table_len / 4)
                || t.table_len > 2 * len + 64 * 1024;
            let table = if needs_compaction {
                new_files = true;
                compact(&*self.vfs, &self.dir, wf, len)?
            } else {
                append_entries(wf)?
            };
            tables.push(table);
        }
        if new_files {
            self.vfs.sync_dir(&self.dir)?;
        }
        self.force_compaction = false;
        self.publish(shared, &tables, len)
    }

    /// Commit steps 4-5, once chunks and tables are durable: the `meta.json` rename naming
    /// `tables` and the book's chunk list, then adopting it and removing the table files it no
    /// longer names.
    fn publish(&mut self, shared: &Shared, tables: &[TableMeta], len: u64) -> Result<u64> {
        // 4. The commit point.
        let mut meta = self.meta.clone();
        meta.generation += 1;
        meta.len = len;
        meta.chunks = shared
            .book()
            .sizes
            .iter()
            .map(|(&id, &size)| ChunkMeta { id, size })
            .collect();
        for (fm, t) in meta.fields.iter_mut().zip(tables) {
            fm.table = *t;
        }
        vfs::replace_atomically(
            &*self.vfs,
            &self.dir,
            &self.dir.join(layout::META_TMP),
            &layout::meta(&self.dir),
            &meta.encode(),
        )?;
        // 5. Adopt the new commit; drop files it no longer names.
        let mut stale = Vec::new();
        for (wf, fm) in self.fields.iter_mut().zip(&meta.fields) {
            let old = wf.table();
            if old.generation != fm.table.generation {
                stale.push(layout::table(&self.dir, &fm.name, old.generation));
                stale.push(layout::patches(&self.dir, &fm.name, old.generation));
                let fresh = open_field(&*self.vfs, &self.dir, fm)?;
                *wf = fresh;
            } else {
                let map = wf
                    .table_file
                    .map_prefix(fm.table.table_len * ENTRY_BYTES as u64)?;
                map.advise_random();
                wf.committed.map = map;
                wf.committed.meta = fm.clone();
                wf.appended.clear();
                wf.pending.clear();
            }
        }
        for p in stale {
            if let Err(e) = self.vfs.remove_file(&p) {
                tracing::warn!(path = %p.display(), error = %e, "could not remove a table file the new commit no longer uses");
            }
        }
        self.meta = meta;
        Ok(self.meta.generation)
    }

    /// The rebalance itself, on a committed writer whose tasks hold no open chunk. Returns the
    /// report and the last new chunk if it has room (for a task to continue).
    fn rebalance(
        &mut self,
        shared: &Arc<Shared>,
        len: u64,
    ) -> Result<(RebalanceReport, Option<(u16, u64)>)> {
        let old: Vec<ChunkMeta> = self.meta.chunks.clone();
        let chunk_bytes_before: u64 = old.iter().map(|c| c.size).sum();
        // New table generations, written block by block as records are copied: memory stays
        // bounded by one block per field whatever the dataset's size.
        let mut tables = Vec::with_capacity(self.fields.len());
        for wf in &self.fields {
            let generation = wf.table().generation + 1;
            let name = &wf.committed.meta.name;
            let tpath = layout::table(&self.dir, name, generation);
            let ppath = layout::patches(&self.dir, name, generation);
            for p in [&tpath, &ppath] {
                // A leftover of a crashed compaction or rebalance is not named by any commit.
                if self.vfs.exists(p)? {
                    self.vfs.remove_file(p)?;
                }
            }
            let table = self.vfs.create_new(&tpath)?;
            let patches = self.vfs.create_new(&ppath)?;
            tables.push((generation, table, patches));
        }
        // A fresh chunk, not a continued old one: old chunks are all about to go.
        let mut appender = Appender::new(shared.clone(), 0, 1);
        let mut readers: BTreeMap<u16, Box<dyn VfsFile>> = BTreeMap::new();
        let mut live_bytes = 0u64;
        let mut stored = Vec::new();
        const BLOCK: u64 = 16 * 1024;
        let mut blocks: Vec<Vec<u8>> = vec![Vec::new(); self.fields.len()];
        let mut start = 0u64;
        while start < len {
            let end = (start + BLOCK).min(len);
            for b in &mut blocks {
                b.clear();
            }
            for index in start..end {
                for (f, block) in blocks.iter_mut().enumerate() {
                    let e =
                        self.copy_record(f, index, &old, &mut readers, &mut stored, &mut appender)?;
                    live_bytes += u64::from(e.physical_len);
                    block.extend_from_slice(&e.encode(index));
                }
            }
            for ((_, table, _), block) in tables.iter().zip(&blocks) {
                table.write_all_at(block, start * ENTRY_BYTES as u64)?;
            }
            start = end;
        }
        drop(readers);
        {
            let mut book = shared.book();
            for c in &old {
                book.sizes.remove(&c.id);
            }
        }
        appender.sync()?;
        let resume = appender
            .open_chunk()
            .filter(|&(_, size)| size < shared.chunk_size_bytes);
        drop(appender);
        sync_sealed(shared)?;
        for (_, table, patches) in &tables {
            table.sync_data()?;
            patches.sync_data()?;
        }
        self.vfs.sync_dir(&self.dir)?;
        let metas: Vec<TableMeta> = tables
            .iter()
            .map(|(generation, _, _)| TableMeta {
                generation: *generation,
                table_len: len,
                patch_len: 0,
            })
            .collect();
        drop(tables);
        let generation = self.publish(shared, &metas, len)?;
        // The new commit is durable; the old chunks are garbage. Open snapshots hold their own
        // descriptors (see `Snapshot`), so unlinking cannot disturb them.
        for c in &old {
            let p = layout::chunk(&self.dir, c.id);
            if let Err(e) = self.vfs.remove_file(&p) {
                tracing::warn!(path = %p.display(), error = %e, "could not remove a chunk the rebalanced commit no longer uses");
            }
        }
        let chunk_bytes_after: u64 = self.meta.chunks.iter().map(|c| c.size).sum();
        let report = RebalanceReport {
            generation,
            records: len,
            live_bytes,
            chunk_bytes_before,
            chunk_bytes_after,
            chunks_before: old.len(),
            chunks_after: self.meta.chunks.len(),
            chunk_size_bytes: self.meta.chunk_size_bytes,
        };
        Ok((report, resume))
    }

    /// Copies the stored bytes of field `f` of record `index` into `appender`'s chunk (checking
    /// them against their CRC32C); returns the record's new entry.
    fn copy_record(
        &mut self,
        f: usize,
        index: u64,
        old: &[ChunkMeta],
        readers: &mut BTreeMap<u16, Box<dyn VfsFile>>,
        buf: &mut Vec<u8>,
        appender: &mut Appender,
    ) -> Result<Entry> {
        let wf = self.fields.get(f).ok_or_else(|| Error::UnknownField {
            field: format!("#{f}"),
        })?;
        let e = wf.entry(index)?;
        if e.physical_len == 0 {
            return Ok(e);
        }
        let size = old.iter().find(|c| c.id == e.chunk).map(|c| c.size);
        if size.is_none_or(|s| e.end() > s) {
            return Err(wf.committed.corrupt(
                index,
                format!("record ends past committed chunk {}", e.chunk),
            ));
        }
        let path = layout::chunk(&self.dir, e.chunk);
        if readers.len() >= MAX_OPEN_READERS && !readers.contains_key(&e.chunk) {
            // Bounded descriptors, whatever the number of chunks (index order visits chunks
            // mostly in the order they were written, so few are reopened).
            readers.clear();
        }
        let file = match readers.entry(e.chunk) {
            std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::btree_map::Entry::Vacant(v) => v.insert(self.vfs.open_read(&path)?),
        };
        buf.resize(e.physical_len as usize, 0);
        file.read_exact_at(buf, e.offset)?;
        let crc = crate::checksum::crc32c(buf);
        if crc != e.data_crc {
            return Err(Error::ChecksumMismatch {
                path,
                field: wf.committed.meta.name.clone(),
                index,
                offset: e.offset,
                expected: e.data_crc,
                actual: crc,
            });
        }
        let (chunk, offset) = appender.place(buf)?;
        Ok(Entry { chunk, offset, ..e })
    }
}

/// Appends a field's new entries and patches past their committed lengths and syncs them.
fn append_entries(wf: &mut WriterField) -> Result<TableMeta> {
    let mut t = wf.table();
    if !wf.appended.is_empty() {
        let mut buf = Vec::with_capacity(wf.appended.len() * ENTRY_BYTES);
        for (k, e) in wf.appended.iter().enumerate() {
            buf.extend_from_slice(&e.encode(t.table_len + k as u64));
        }
        wf.table_file
            .write_all_at(&buf, t.table_len * ENTRY_BYTES as u64)?;
        wf.table_file.sync_data()?;
        t.table_len += wf.appended.len() as u64;
    }
    if !wf.pending.is_empty() {
        let mut buf = Vec::with_capacity(wf.pending.len() * PATCH_BYTES);
        for (index, e) in &wf.pending {
            buf.extend_from_slice(&encode_patch(*index, e));
        }
        wf.patch_file
            .write_all_at(&buf, t.patch_len * PATCH_BYTES as u64)?;
        wf.patch_file.sync_data()?;
        t.patch_len += wf.pending.len() as u64;
    }
    Ok(t)
}

/// Writes a field's `len` live entries as a new table generation with an empty patch log.
fn compact(vfs: &dyn Vfs, dir: &Path, wf: &WriterField, len: u64) -> Result<TableMeta> {
    let generation = wf.table().generation + 1;
    let name = &wf.committed.meta.name;
    let tpath = layout::table(dir, name, generation);
    let ppath = layout::patches(dir, name, generation);
    for p in [&tpath, &ppath] {
        // A leftover of a crashed compaction is not named by any commit.
        if vfs.exists(p)? {
            vfs.remove_file(p)?;
        }
    }
    let tfile = vfs.create_new(&tpath)?;
    let pfile = vfs.create_new(&ppath)?;
    const BLOCK: u64 = 16 * 1024;
    let mut buf = Vec::with_capacity(BLOCK as usize * ENTRY_BYTES);
    let mut start = 0u64;
    while start < len {
        buf.clear();
        let end = (start + BLOCK).min(len);
        for i in start..end {
            buf.extend_from_slice(&wf.entry(i)?.encode(i));
        }
        tfile.write_all_at(&buf, start * ENTRY_BYTES as u64)?;
        start = end;
    }
    tfile.sync_data()?;
    pfile.sync_data()?;
    Ok(TableMeta {
        generation,
        table_len: len,
        patch_len: 0,
    })
}

/// Opens a field's committed table and patch log for appending.
fn open_field(vfs: &dyn Vfs, dir: &Path, f: &FieldMeta) -> Result<WriterField> {
    let committed = FieldTable::load(vfs, dir, f)?;
    let table_file = vfs.open_rw(&committed.table_path)?;
    let ppath = layout::patches(dir, &f.name, f.table.generation);
    let patch_file = vfs.open_rw(&ppath)?;
    Ok(WriterField {
        committed,
        table_file,
        patch_file,
        appended: Vec::new(),
        pending: Vec::new(),
    })
}

/// Builds a committed empty dataset in `dir` (which must not exist).
fn build_empty(vfs: &dyn Vfs, dir: &Path, schema: &Schema) -> Result<()> {
    vfs.create_dir_all(&layout::chunk_dir(dir))?;
    let mut fields = Vec::with_capacity(schema.fields.len());
    for f in &schema.fields {
        for p in [
            layout::table(dir, &f.name, 0),
            layout::patches(dir, &f.name, 0),
        ] {
            vfs.create_new(&p)?.sync_data()?;
        }
        fields.push(FieldMeta {
            name: f.name.clone(),
            dtype: f.dtype,
            shape: f.shape.clone(),
            codec: f.codec,
            table: TableMeta {
                generation: 0,
                table_len: 0,
                patch_len: 0,
            },
        });
    }
    let lock = dir.join(layout::LOCK);
    vfs.create_new(&lock)?;
    let meta = Meta {
        format: "zrecord".to_string(),
        version: FORMAT_VERSION,
        generation: 0,
        len: 0,
        chunk_size_bytes: schema.chunk_size_bytes,
        fields,
        chunks: Vec::new(),
    };
    vfs.sync_dir(&layout::chunk_dir(dir))?;
    vfs::replace_atomically(
        vfs,
        dir,
        &dir.join(layout::META_TMP),
        &layout::meta(dir),
        &meta.encode(),
    )
}

/// Removes what a crash left behind and truncates committed files to their committed sizes.
fn clean_orphans(vfs: &dyn Vfs, dir: &Path, meta: &Meta) -> Result<()> {
    let mut changed_dir = false;
    let tmp = dir.join(layout::META_TMP);
    if vfs.exists(&tmp)? {
        vfs.remove_file(&tmp)?;
        changed_dir = true;
    }
    let live: Vec<(String, u64)> = meta
        .fields
        .iter()
        .flat_map(|f| {
            let t = f.table;
            [
                (
                    format!("{}.{}.offsets", f.name, t.generation),
                    t.table_len * ENTRY_BYTES as u64,
                ),
                (
                    format!("{}.{}.patches", f.name, t.generation),
                    t.patch_len * PATCH_BYTES as u64,
                ),
            ]
        })
        .collect();
    let mut names = vfs.read_dir(dir)?;
    names.sort_unstable();
    for name in names {
        if !layout::is_table_file(&name) {
            continue;
        }
        let path = dir.join(&name);
        match live.iter().find(|(n, _)| *n == name) {
            Some((_, size)) => truncate_past(vfs, &path, *size)?,
            None => {
                vfs.remove_file(&path)?;
                changed_dir = true;
            }
        }
    }
    if changed_dir {
        vfs.sync_dir(dir)?;
    }
    let cdir = layout::chunk_dir(dir);
    let mut changed_chunks = false;
    let mut names = vfs.read_dir(&cdir)?;
    names.sort_unstable();
    for name in names {
        let Some(id) = layout::parse_chunk(&name) else {
            continue;
        };
        let path = cdir.join(&name);
        match meta.chunks.iter().find(|c| c.id == id) {
            Some(c) => truncate_past(vfs, &path, c.size)?,
            None => {
                vfs.remove_file(&path)?;
                changed_chunks = true;
            }
        }
    }
    if changed_chunks {
        vfs.sync_dir(&cdir)?;
    }
    Ok(())
}

/// Truncates a file to `size` if it is longer (bytes past a committed size are leftovers of an
/// interrupted commit). A file shorter than `size` is left for the open checks to report.
fn truncate_past(vfs: &dyn Vfs, path: &Path, size: u64) -> Result<()> {
    let file = vfs.open_rw(path)?;
    if file.len()? > size {
        file.set_len(size)?;
        file.sync_data()?;
    }
    Ok(())
}
