//! Chunk append tasks: the threads that turn a [`crate::Writer`]'s records into chunk bytes.
//!
//! Each task is a thread that owns one open chunk and appends only to it (the seed's writer
//! pool: every writer bound to one chunk, 1–4 of them). A full chunk is sealed — flushed, its
//! path kept for the commit's `fdatasync`, its descriptor closed — and the task takes the lowest
//! free chunk id from the book the tasks share (`book.rs`). The chunk itself is the task's
//! [`Appender`] (`appender.rs`).
//!
//! The writer sends a task [`Job`]s: the logical bytes of a run of records, about
//! `write_buffer_bytes` of them, through a bounded channel (backpressure: a full queue makes the
//! writer wait). For each value the task deflates it if its field asks for it (falling back to
//! raw when it does not shrink), computes its CRC32C, places it in its chunk, and answers with one
//! [`Entry`] per value, in order. Runs of raw values are written straight from the job's buffer
//! with one positioned write (no copy); deflated values go through the chunk's write buffer.
//! The writer applies the entries to its offset tables in call order, so the record indices and
//! the tables do not depend on which task finishes first.
//!
//! A failed file operation stops the task: it answers every later job and sync with the error,
//! and the writer poisons itself.

use super::appender::Appender;
use super::wait::wait;
use crate::error::{Error, Result};
use crate::format::codec::{Dictionary, Encoder};
use crate::format::dtype::{Codec, StoredCodec};
use crate::format::entry::Entry;
use futures::channel::{mpsc, oneshot};
use futures::StreamExt;
use std::sync::Arc;

/// Runs of raw values at least this long (or at least `write_buffer_bytes`, if smaller) are
/// written straight from the job's buffer instead of being copied into the write buffer.
const DIRECT_BYTES: usize = 256 << 10;

/// One value of a job: its logical length in the job's buffer, its field and the field's codec.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Item {
    pub len: u32,
    pub field: u32,
    pub codec: Codec,
}

/// Values for one append task: their logical bytes back to back, and what each is.
#[derive(Debug, Default)]
pub(crate) struct Job {
    pub ticket: u64,
    pub data: Vec<u8>,
    pub items: Vec<Item>,
    /// Each field's current zstd dictionary (empty when no field has one): values of a
    /// `ZstdDict` field are compressed with it, or as plain zstd before it exists.
    pub dictionaries: Arc<[Option<Arc<Dictionary>>]>,
}

/// A task's answer to a job: one entry per value, in order; the buffer comes back for reuse.
#[derive(Debug)]
pub(crate) struct Done {
    pub ticket: u64,
    pub entries: Result<Vec<Entry>>,
    pub data: Vec<u8>,
}

/// What a task answers to a sync: the open chunk's size after it (for the writer's chunk-id
/// accounting).
pub(crate) type Synced = Result<Option<u64>>;

/// A message to an append task.
#[derive(Debug)]
pub(crate) enum Msg {
    /// Place these values.
    Job(Job),
    /// Write out buffered bytes and `fdatasync` the open chunk.
    Sync(oneshot::Sender<Synced>),
    /// Write out buffered bytes and close the open chunk (before a rebalance).
    Seal(oneshot::Sender<Result<()>>),
    /// Continue this chunk (of this size) next.
    Resume(u16, u64),
}

/// An append task's state on its thread.
struct Task {
    appender: Appender,
    encoder: Encoder,
    /// The first error: once a file operation failed, the task writes nothing more.
    failed: Option<Error>,
}

impl Task {
    fn check(&self) -> Result<()> {
        match &self.failed {
            Some(e) => Err(Error::Poisoned {
                cause: e.to_string(),
            }),
            None => Ok(()),
        }
    }

    fn fail<T>(&mut self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            if self.failed.is_none() {
                self.failed = Some(Error::Poisoned {
                    cause: e.to_string(),
                });
            }
        }
        r
    }

    fn run_job(&mut self, job: &Job) -> Result<Vec<Entry>> {
        self.check()?;
        let r = self.place_job(job);
        self.fail(r)
    }

    fn place_job(&mut self, job: &Job) -> Result<Vec<Entry>> {
        let mut entries = Vec::with_capacity(job.items.len());
        let mut at = 0usize;
        let mut k = 0usize;
        while let Some(item) = job.items.get(k) {
            let len = item.len as usize;
            let value = job.data.get(at..at + len).ok_or_else(overrun)?;
            if len == 0 {
                entries.push(Entry::EMPTY);
                k += 1;
                continue;
            }
            if item.codec.compresses() {
                let field = item.field as usize;
                let dictionary = job.dictionaries.get(field).and_then(|d| d.as_deref());
                // Disjoint fields: the encoder's output goes to the appender uncopied.
                let (codec, stored) = self.encoder.encode(item.codec, field, dictionary, value);
                // A zstd entry's CRC32C covers the logical bytes (docs/FORMAT.md): a frame
                // decoded with the wrong dictionary is caught too.
                let data_crc = match codec {
                    StoredCodec::Zstd | StoredCodec::ZstdDict(_) => crate::checksum::crc32c(value),
                    _ => crate::checksum::crc32c(stored),
                };
                let (chunk, offset) = self.appender.place(stored)?;
                entries.push(Entry {
                    chunk,
                    offset,
                    physical_len: stored.len() as u32,
                    codec,
                    data_crc,
                    logical_len: item.len,
                });
                at += len;
                k += 1;
                continue;
            }
            // A run of raw values (absent ones included) that fit in one chunk: one write.
            let rest = job.items.get(k..).unwrap_or_default();
            let raw = rest
                .iter()
                .take_while(|i| i.codec == Codec::Raw || i.len == 0)
                .count();
            // `rest[0]` is not empty, so the run has at least one value.
            let n = self
                .appender
                .fit_run(rest.iter().take(raw).map(|i| u64::from(i.len)))
                .max(1);
            let run_items = rest.get(..n).unwrap_or_default();
            let run_bytes: usize = run_items.iter().map(|i| i.len as usize).sum();
            let run = job.data.get(at..at + run_bytes).ok_or_else(overrun)?;
            // Small runs go through the write buffer: one write per buffer, not per run.
            let direct = run_bytes >= self.appender.shared.write_buffer_bytes.min(DIRECT_BYTES);
            let placed = if direct {
                Some(self.appender.write_run(run)?)
            } else {
                None
            };
            let mut off = 0usize;
            for i in run_items {
                let l = i.len as usize;
                if l == 0 {
                    entries.push(Entry::EMPTY);
                    continue;
                }
                let v = run.get(off..off + l).unwrap_or_default();
                let (chunk, offset) = match placed {
                    Some((chunk, start)) => (chunk, start + off as u64),
                    None => self.appender.place(v)?,
                };
                entries.push(Entry {
                    chunk,
                    offset,
                    physical_len: i.len,
                    codec: StoredCodec::Raw,
                    data_crc: crate::checksum::crc32c(v),
                    logical_len: i.len,
                });
                off += l;
            }
            at += run_bytes;
            k += run_items.len();
        }
        Ok(entries)
    }
}

/// Runs `f`, turning a panic (a `Vfs` implementation that panics, an allocation failure) into
/// an error, so the writer is answered and poisons itself instead of waiting forever.
fn unwound<T>(task: &mut Task, f: impl FnOnce(&mut Task) -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut *task))) {
        Ok(r) => r,
        Err(_) => {
            let r = Err(Error::Poisoned {
                cause: "an append task panicked".to_string(),
            });
            task.fail(r)
        }
    }
}

/// A job whose items claim more bytes than it holds (a bug of the writer, not bad input).
fn overrun() -> Error {
    Error::InvalidConfig {
        reason: "an append job's values overrun its buffer".to_string(),
    }
}

/// The thread body of an append task: serves messages until the writer drops its sender.
fn serve(mut task: Task, mut rx: mpsc::Receiver<Msg>, done: mpsc::UnboundedSender<Done>) {
    while let Some(msg) = wait(rx.next()) {
        match msg {
            Msg::Job(mut job) => {
                let entries = unwound(&mut task, |t| t.run_job(&job));
                job.data.clear();
                // The writer may be gone (dropped mid-flight): nothing left to tell.
                let _ = done.unbounded_send(Done {
                    ticket: job.ticket,
                    entries,
                    data: job.data,
                });
            }
            Msg::Sync(reply) => {
                let r = unwound(&mut task, |t| {
                    let r = t.check().and_then(|()| t.appender.sync());
                    t.fail(r).map(|()| t.appender.open_chunk().map(|(_, s)| s))
                });
                let _ = reply.send(r);
            }
            Msg::Seal(reply) => {
                let r = unwound(&mut task, |t| {
                    let r = t.check().and_then(|()| t.appender.seal());
                    t.fail(r)
                });
                let _ = reply.send(r);
            }
            Msg::Resume(id, size) => {
                // An error here is answered by the next job or sync.
                let _ = unwound(&mut task, |t| {
                    let r = t.check().and_then(|()| t.appender.resume(id, size));
                    t.fail(r)
                });
            }
        }
    }
}

/// A running append task, as the writer holds it.
#[derive(Debug)]
pub(crate) struct TaskHandle {
    pub tx: mpsc::Sender<Msg>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TaskHandle {
    /// Starts task `k` with `appender`, a queue of `queue_depth` jobs, answering on `done`.
    pub fn spawn(
        k: usize,
        appender: Appender,
        deflate_level: i32,
        queue_depth: usize,
        done: mpsc::UnboundedSender<Done>,
    ) -> Result<TaskHandle> {
        let dir = appender.shared.dir.clone();
        // A futures channel holds `buffer + senders` messages: one sender, so `depth - 1`.
        let (tx, rx) = mpsc::channel(queue_depth.saturating_sub(1));
        let task = Task {
            appender,
            encoder: Encoder::new(deflate_level),
            failed: None,
        };
        let thread = std::thread::Builder::new()
            .name(format!("zrecord-append-{k}"))
            .spawn(move || serve(task, rx, done))
            .map_err(|e| Error::io(dir, "spawn an append task", e))?;
        Ok(TaskHandle {
            tx,
            thread: Some(thread),
        })
    }

    /// Closes the queue and waits for the thread: its chunk descriptor is closed on return.
    pub fn stop(&mut self) {
        self.tx.close_channel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for TaskHandle {
    fn drop(&mut self) {
        self.stop();
    }
}
