//! The single writer of a dataset: its public API ([`Writer`]), and the map of its parts.
//!
//! A writer appends, modifies, deletes (swap-remove) and commits crash-safely, with record bytes
//! written by concurrent chunk append tasks. One file per job:
//!
//! | file | job |
//! |---|---|
//! | `mod.rs` | [`Writer`]: the public calls, its state, poisoning |
//! | `attributes.rs` | the user attributes the next commit writes |
//! | `config.rs` | [`WriterConfig`]: options, defaults, bounds |
//! | `open.rs` | creating a dataset, opening its writer, starting the append tasks |
//! | `recover.rs` | cleaning what a crash left behind, at open |
//! | `intake.rs` | limits checked before an index is taken; values copied into the open job |
//! | `arrow.rs` | Arrow record batches in, column by column (feature `arrow`) |
//! | `oplog.rs` | jobs handed to the tasks (backpressure); table ops applied in call order |
//! | `tables.rs` | the offset tables as the writer sees them (committed + pending) |
//! | `commit.rs` | the commit protocol |
//! | `rebalance.rs` | rebalance and [`RebalanceReport`] |
//! | `placement.rs` | next-fit placement into chunks, shared by the tasks and the limit check |
//! | `book.rs` | chunk ids and sizes shared by the writer and its tasks |
//! | `appender.rs` | one open chunk being filled |
//! | `task.rs` | the append-task threads and their messages |
//! | `wait.rs` | blocking on a future from any thread |
//!
//! Data path: `append` checks every limit, takes the record's index, and copies its bytes into
//! the job being filled for one append task; a job of about `write_buffer_bytes` goes to its
//! task through a bounded queue, and the next job to the next task (round robin). Each task owns
//! one open chunk and deflates, checksums and writes its jobs on its own thread, answering with
//! the offset entries. The writer applies entries, modifies and deletes to its offset tables in
//! call order (an op log), so record indices and tables never depend on which task finishes
//! first. The commit protocol is described in `commit.rs` and `docs/FORMAT.md`.
//!
//! Any I/O failure while writing poisons the writer: every later call returns
//! [`Error::Poisoned`], and reopening recovers the last commit.
//!
//! Every file operation goes through the `Vfs` seam chosen at create/open (`StdFs` by
//! default), so tests can run the writer on a simulated file system that crashes or fails at
//! any operation (`tests/crash_points.rs`, `tests/io_errors.rs`). [`Writer::rebalance`]
//! rewrites live records into fresh chunks (`docs/FORMAT.md`, "Rebalance").

mod appender;
#[cfg(feature = "arrow")]
mod arrow;
mod attributes;
mod book;
mod commit;
mod config;
mod dictionary;
mod intake;
mod open;
mod oplog;
mod placement;
mod rebalance;
mod recover;
mod tables;
mod task;
mod wait;

pub use config::{
    WriterConfig, DICTIONARY_SAMPLE_RECORDS, MAX_DICTIONARY_BYTES, MAX_QUEUE_DEPTH, MAX_WRITERS,
    MAX_WRITE_BUFFER_BYTES,
};
pub use rebalance::{RebalanceOptions, RebalanceReport};

use crate::error::{Error, Result};
use crate::format::entry::Entry;
use crate::format::meta::FieldMeta;
use crate::io::vfs::StdFs;
#[cfg(feature = "testing")]
use crate::io::vfs::Vfs;
use crate::store::schema::Schema;
use book::Shared;
use futures::channel::{mpsc, oneshot};
use oplog::Op;
use placement::NextFit;
use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use tables::Core;
use task::{Done, Job, TaskHandle};
use wait::wait;

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
    /// Each `zstd_dict` field's sample of its first records, until its dictionary is trained.
    samples: Vec<dictionary::Sample>,
    /// Each field's current zstd dictionary, handed to every job (empty: none yet).
    dictionaries: std::sync::Arc<[Option<std::sync::Arc<crate::format::codec::Dictionary>>]>,
    /// Number of records, uncommitted changes included (what the caller sees).
    len: u64,
    generation: u64,
    /// The fork generation of the process that opened it (`io::fork::generation`): in a child
    /// of `fork()` its append tasks, its commit thread and its lock are not there.
    process: u64,
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
    projections: Vec<NextFit>,
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
        open::create(StdFs::shared(), path.as_ref(), schema, config)
    }

    /// [`Writer::create`] on the file system `vfs` (the real one is [`StdFs`]; tests use the
    /// simulated and fault-injecting ones of the `zrecord-testing` crate). Feature `testing`.
    #[cfg(feature = "testing")]
    pub fn create_with_vfs(
        vfs: Arc<dyn Vfs>,
        path: impl AsRef<Path>,
        schema: &Schema,
        config: WriterConfig,
    ) -> Result<Writer> {
        open::create(vfs, path.as_ref(), schema, config)
    }

    /// Opens the writer of an existing dataset at its latest commit, cleaning what a crash left
    /// behind: a stale `meta.json.tmp`, files no commit names, and bytes past committed sizes.
    pub fn open(path: impl AsRef<Path>, config: WriterConfig) -> Result<Writer> {
        open::open(StdFs::shared(), path.as_ref(), config)
    }

    /// [`Writer::open`] on the file system `vfs`. Feature `testing`.
    #[cfg(feature = "testing")]
    pub fn open_with_vfs(
        vfs: Arc<dyn Vfs>,
        path: impl AsRef<Path>,
        config: WriterConfig,
    ) -> Result<Writer> {
        open::open(vfs, path.as_ref(), config)
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
    /// the patch thresholds were reached. For tests of the compaction path (feature `testing`).
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn force_compaction_at_next_commit(&mut self) {
        self.core().force_compaction = true;
    }

    fn core(&self) -> MutexGuard<'_, Core> {
        // A panic while holding the lock leaves the tables in an unknown state; the writer is
        // then poisoned by the error that follows, or was by the panic's caller.
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this is a child of `fork()` of the process that opened the writer.
    fn forked(&self) -> bool {
        self.process != crate::io::fork::generation()
    }

    /// Refuses a writer used in a child of `fork()`: its append tasks and its commit thread
    /// are its parent's threads (not in the child), and its lock is its parent's.
    fn check_process(&self) -> Result<()> {
        if !self.forked() {
            return Ok(());
        }
        Err(Error::InvalidConfig {
            reason: format!(
                "this Writer of {} was opened in another process (before a fork): its append                  tasks and its lock belong to that process; open a new Writer in this one",
                self.shared.dir.display()
            ),
        })
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

    /// Everything a call does before taking new values: no commit in flight, the outbox handed
    /// over (backpressure), answers applied.
    async fn ready(&mut self) -> Result<()> {
        self.check_process()?;
        self.check_poisoned()?;
        self.reclaim_commit().await?;
        self.send_outbox().await?;
        // A dictionary sample completed by the last call is trained on now (once per field, a
        // few to a hundred milliseconds), before this call takes anything.
        self.train_ready()
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
        self.commit_on_thread().await
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
        self.commit_blocking()
    }

    /// Rewrites every live record (all fields), in index order, into fresh chunks, writes every
    /// field's offset table as a new generation, and commits that atomically (the same
    /// `meta.json` rename as any commit). The old chunk files are then unlinked: snapshots opened
    /// before keep reading the chunks they hold open (the read engine never closes a
    /// descriptor of a removed file; a file is never truncated while a snapshot may map it),
    /// and report [`crate::Error::ChunkGone`] for one they had not opened, and a crash at any point leaves either the old or
    /// the new commit, with the unreferenced files removed at the next writer open.
    ///
    /// Pending changes are committed first (a commit of their own), so a rebalance never mixes
    /// with unacknowledged work. A dataset whose chunks hold only live bytes has nothing to
    /// reclaim: nothing is rewritten or committed, and the report says so
    /// ([`RebalanceReport::rewritten`]). Stored bytes are copied as they are (codec and checksum kept);
    /// each is checked against its CRC32C while copied, so damage is reported
    /// ([`Error::ChecksumMismatch`]) rather than carried over. Any error poisons the writer;
    /// reopening recovers the last commit. Runs only when called: nothing triggers it. Blocking
    /// (it reads and writes the whole dataset): from async code, run it on a blocking thread.
    ///
    /// The new chunks take ids the old ones do not use, so old and new chunks together must fit
    /// in the 65,535 ids of the format ([`Error::TooManyChunks`] otherwise).
    pub fn rebalance(&mut self) -> Result<RebalanceReport> {
        self.rebalance_all(&RebalanceOptions::default())
    }

    /// [`Writer::rebalance`] with `options`: with
    /// [`RebalanceOptions::retrain_dictionaries`], every `zstd_dict` field is compressed again
    /// with a dictionary trained on records sampled across the whole dataset.
    pub fn rebalance_with(&mut self, options: RebalanceOptions) -> Result<RebalanceReport> {
        self.rebalance_all(&options)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if self.forked() {
            // A child of `fork()`: waiting for the parent's threads would wait forever, and
            // what they share is the parent's. Everything is left as it is (a leak per fork).
            std::mem::forget(std::mem::take(&mut self.tasks));
            std::mem::forget(self.committing.take());
            std::mem::forget(Arc::clone(&self.core));
            std::mem::forget(Arc::clone(&self.shared));
            return;
        }
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
