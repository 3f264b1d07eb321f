//! Chunk append tasks: the threads that turn a [`crate::Writer`]'s records into chunk bytes.
//!
//! Each task is a thread that owns one open chunk and appends only to it (the seed's writer
//! pool: every writer bound to one chunk, 1–4 of them). A full chunk is sealed — flushed, its
//! path kept for the commit's `fdatasync`, its descriptor closed — and the task takes the lowest
//! free chunk id from the [`Book`] the tasks share.
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

use crate::error::{Error, Result};
use crate::format::codec::Deflater;
use crate::format::dtype::Codec;
use crate::format::entry::Entry;
use crate::format::{MAX_CHUNKS, MAX_CHUNK_BYTES};
use crate::io::vfs::{Vfs, VfsFile};
use crate::store::layout;
use futures::channel::{mpsc, oneshot};
use futures::StreamExt;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

/// Runs `fut` to completion on this thread, parking it while the future is pending.
///
/// The writer's blocking API and the append tasks wait with this rather than
/// `futures::executor::block_on`, which panics when called from inside another `futures`
/// executor: a blocking `append` must work wherever a blocking call may be made.
pub(crate) fn wait<F: std::future::Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let std::task::Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

/// The chunk ids and sizes the append tasks and the writer share.
#[derive(Debug, Default)]
pub(crate) struct Book {
    /// Working chunk sizes: committed sizes plus bytes appended since.
    pub sizes: BTreeMap<u16, u64>,
    /// Per append task, where the search for a free chunk id starts.
    hints: Vec<u32>,
    /// A chunk file was created since the last commit: the chunk directory needs an `fsync`.
    pub created_chunk_file: bool,
    /// Chunks sealed since the last commit, still to be synced. Their descriptors were closed at
    /// sealing (a task may seal thousands of chunks between commits); the commit reopens each
    /// to `fdatasync` it, which flushes the file's dirty pages whichever descriptor wrote them,
    /// and since Linux 4.16 reports a writeback error no descriptor has seen yet.
    pub sealed: Vec<PathBuf>,
}

impl Book {
    /// A book of the committed chunks `sizes`.
    pub fn new(sizes: BTreeMap<u16, u64>) -> Book {
        Book {
            sizes,
            ..Book::default()
        }
    }

    /// Takes a free chunk id for append task `class` of `stride` tasks: the lowest free id at
    /// or after the task's last one among the ids `≡ class (mod stride)`, wrapping, else any free
    /// id. Each task draws from its own residue class, so which ids a task gets does not depend
    /// on how the tasks' rollovers interleave: the same appends give the same files.
    fn take_id(&mut self, class: u32, stride: u32) -> Result<u16> {
        let stride = stride.max(1);
        let class = class % stride;
        let slot = class as usize;
        if self.hints.len() <= slot {
            self.hints.resize(slot + 1, 0);
        }
        // Ids of the class are `class + m * stride`; the hint is the next `m`.
        let per_class = MAX_CHUNKS.div_ceil(stride);
        let hint = self.hints.get(slot).copied().unwrap_or(0);
        let own = (0..per_class)
            .map(|k| (hint + k) % per_class)
            .map(|m| (m, class + m * stride))
            .filter(|&(_, i)| i < MAX_CHUNKS)
            .filter_map(|(m, i)| u16::try_from(i).ok().map(|i| (m, i)))
            .find(|(_, i)| !self.sizes.contains_key(i));
        let id = match own {
            Some((m, id)) => {
                if let Some(h) = self.hints.get_mut(slot) {
                    *h = (m + 1) % per_class;
                }
                id
            }
            None => (0..MAX_CHUNKS)
                .filter_map(|i| u16::try_from(i).ok())
                .find(|i| !self.sizes.contains_key(i))
                .ok_or(Error::TooManyChunks { max: MAX_CHUNKS })?,
        };
        self.sizes.insert(id, 0);
        Ok(id)
    }
}

/// What every append task and the writer share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub vfs: Arc<dyn Vfs>,
    pub dir: PathBuf,
    pub chunk_size_bytes: u64,
    pub write_buffer_bytes: usize,
    pub book: Mutex<Book>,
}

impl Shared {
    /// The book, even if a thread panicked while holding it (its state is still consistent:
    /// every update is a single map insert or push).
    pub fn book(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A chunk being appended to.
#[derive(Debug)]
struct ActiveChunk {
    id: u16,
    path: PathBuf,
    file: Box<dyn VfsFile>,
    /// Size including buffered bytes.
    size: u64,
    /// Bytes not yet written, starting at `size - buf.len()`.
    buf: Vec<u8>,
    /// Writeback was started for the bytes before this offset.
    written_back: u64,
}

impl ActiveChunk {
    /// Writes the buffered bytes at their offset.
    fn flush(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let at = self.size - self.buf.len() as u64;
        self.write(at, None)?;
        self.buf.clear();
        Ok(())
    }

    /// Writes `run` (or the buffer) at `at`, and starts writeback of every whole
    /// [`WRITEBACK_BYTES`] span the write completed.
    fn write(&mut self, at: u64, run: Option<&[u8]>) -> Result<()> {
        let bytes = run.unwrap_or(&self.buf);
        self.file.write_all_at(bytes, at)?;
        let end = at + bytes.len() as u64;
        let done = end - end % WRITEBACK_BYTES;
        if done > self.written_back {
            self.file
                .start_writeback(self.written_back, done - self.written_back);
            self.written_back = done;
        }
        Ok(())
    }
}

/// Written chunk bytes are handed to the disk (`start_writeback`) in spans of this size, so the
/// disk works while later records are appended instead of all at the commit's `fdatasync`.
const WRITEBACK_BYTES: u64 = 8 << 20;

/// True if `n` more bytes go into a chunk of `size` bytes under the chunk-size `limit`: a
/// record larger than a chunk still goes, alone, into an empty one.
pub(crate) fn fits(size: u64, n: u64, limit: u64) -> bool {
    size == 0 || size + n <= limit
}

/// One open chunk and the rules for filling it (next fit: a value that does not fit seals the
/// chunk and starts a fresh one).
#[derive(Debug)]
pub(crate) struct Appender {
    pub shared: Arc<Shared>,
    /// This appender's residue class of chunk ids and the number of classes (see
    /// [`Book::take_id`]).
    class: (u32, u32),
    active: Option<ActiveChunk>,
    /// A committed chunk with room that the first value continues, if it fits (opened then).
    resume: Option<(u16, u64)>,
}

impl Appender {
    /// An appender with no open chunk: the first value takes a fresh chunk id.
    pub fn new(shared: Arc<Shared>, class: u32, stride: u32) -> Appender {
        Appender {
            shared,
            class: (class, stride),
            active: None,
            resume: None,
        }
    }

    /// An appender whose first value continues committed chunk `id` of `size` bytes if it fits
    /// there (appending past a committed size is the commit rule), and takes a fresh id if not.
    pub fn resuming(shared: Arc<Shared>, class: u32, stride: u32, id: u16, size: u64) -> Appender {
        let mut a = Appender::new(shared, class, stride);
        a.resume = Some((id, size));
        a
    }

    /// Continue chunk `id` of `size` bytes next (see [`Appender::resuming`]); the open chunk, if
    /// any, is sealed first.
    pub fn resume(&mut self, id: u16, size: u64) -> Result<()> {
        self.seal()?;
        self.resume = Some((id, size));
        Ok(())
    }

    /// The chunk the next value would continue and its size: the open one, or the one to resume.
    pub fn open_chunk(&self) -> Option<(u16, u64)> {
        self.active.as_ref().map(|a| (a.id, a.size)).or(self.resume)
    }

    /// Makes sure the open chunk takes `n` more bytes: seals a full one and opens a fresh one.
    fn room(&mut self, n: u64) -> Result<&mut ActiveChunk> {
        let limit = self.shared.chunk_size_bytes;
        if self.active.is_none() {
            if let Some((id, size)) = self.resume.take() {
                if fits(size, n, limit) {
                    let path = layout::chunk(&self.shared.dir, id);
                    let file = self.shared.vfs.open_rw(&path)?;
                    self.active = Some(ActiveChunk {
                        id,
                        path,
                        file,
                        size,
                        buf: Vec::new(),
                        // Committed bytes are durable already.
                        written_back: size,
                    });
                }
            }
        }
        let full = self.active.as_ref().is_none_or(|a| !fits(a.size, n, limit));
        if full {
            self.seal()?;
            let id = self.shared.book().take_id(self.class.0, self.class.1)?;
            let path = layout::chunk(&self.shared.dir, id);
            let file = match self.shared.vfs.create_new(&path) {
                Ok(f) => f,
                Err(e) => {
                    // The id is not in use after all.
                    self.shared.book().sizes.remove(&id);
                    return Err(e);
                }
            };
            self.shared.book().created_chunk_file = true;
            self.active = Some(ActiveChunk {
                id,
                path,
                file,
                size: 0,
                buf: Vec::with_capacity(self.shared.write_buffer_bytes.min(1 << 20)),
                written_back: 0,
            });
        }
        let a = self
            .active
            .as_mut()
            .ok_or(Error::TooManyChunks { max: MAX_CHUNKS })?;
        if a.size + n > MAX_CHUNK_BYTES {
            return Err(Error::ChunkTooLarge {
                chunk: u32::from(a.id),
                size: a.size + n,
                max: MAX_CHUNK_BYTES,
            });
        }
        Ok(a)
    }

    /// Appends `stored` through the write buffer; returns where it went.
    pub fn place(&mut self, stored: &[u8]) -> Result<(u16, u64)> {
        let n = stored.len() as u64;
        let buffer_bytes = self.shared.write_buffer_bytes;
        let a = self.room(n)?;
        let at = (a.id, a.size);
        a.buf.extend_from_slice(stored);
        a.size += n;
        if a.buf.len() >= buffer_bytes {
            a.flush()?;
        }
        let (id, size) = (a.id, a.size);
        self.shared.book().sizes.insert(id, size);
        Ok(at)
    }

    /// Writes `run` (values that all fit in the open chunk, see [`Appender::fit_run`]) with one
    /// positioned write straight from the caller's buffer; returns where it starts.
    fn write_run(&mut self, run: &[u8]) -> Result<(u16, u64)> {
        let n = run.len() as u64;
        let a = self.room(n)?;
        // The write buffer holds the bytes just before `size`: out first, so it stays contiguous.
        a.flush()?;
        let at = (a.id, a.size);
        a.write(a.size, Some(run))?;
        a.size += n;
        let (id, size) = (a.id, a.size);
        self.shared.book().sizes.insert(id, size);
        Ok(at)
    }

    /// How many of `lens` (value lengths, the first non-zero) go into the open chunk, or into a
    /// fresh one if the first does not fit.
    fn fit_run(&self, lens: impl Iterator<Item = u64>) -> usize {
        let limit = self.shared.chunk_size_bytes;
        let mut size = self.open_chunk().map_or(0, |(_, s)| s);
        let mut k = 0usize;
        for (i, n) in lens.enumerate() {
            if i == 0 && !fits(size, n, limit) {
                size = 0;
            }
            if !fits(size, n, limit) {
                break;
            }
            size += n;
            k += 1;
        }
        k
    }

    /// Writes out the write buffer and `fdatasync`s the open chunk.
    pub fn sync(&mut self) -> Result<()> {
        if let Some(a) = self.active.as_mut() {
            a.flush()?;
            a.file.sync_data()?;
        }
        Ok(())
    }

    /// Writes out the write buffer and closes the open chunk; the commit syncs it by path. A
    /// chunk to resume is forgotten too (a rebalance may remove it).
    pub fn seal(&mut self) -> Result<()> {
        self.resume = None;
        if let Some(mut a) = self.active.take() {
            a.flush()?;
            self.shared.book().sealed.push(a.path);
        }
        Ok(())
    }
}

/// Runs of raw values at least this long (or at least `write_buffer_bytes`, if smaller) are
/// written straight from the job's buffer instead of being copied into the write buffer.
const DIRECT_BYTES: usize = 256 << 10;

/// One value of a job: its logical length in the job's buffer and its field's codec.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Item {
    pub len: u32,
    pub codec: Codec,
}

/// Values for one append task: their logical bytes back to back, and what each is.
#[derive(Debug, Default)]
pub(crate) struct Job {
    pub ticket: u64,
    pub data: Vec<u8>,
    pub items: Vec<Item>,
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
    deflater: Deflater,
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
            if item.codec == Codec::Deflate {
                // Disjoint fields: the deflater's output goes to the appender uncopied.
                let (codec, stored) = self.deflater.encode(Codec::Deflate, value);
                let (chunk, offset) = self.appender.place(stored)?;
                entries.push(Entry {
                    chunk,
                    offset,
                    physical_len: stored.len() as u32,
                    codec,
                    data_crc: crate::checksum::crc32c(stored),
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
                    codec: Codec::Raw,
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
            deflater: Deflater::new(deflate_level),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_task_takes_ids_of_its_own_class() {
        let mut b = Book::new(BTreeMap::from([(0, 10), (3, 10)]));
        assert_eq!(b.take_id(0, 2).unwrap(), 2);
        assert_eq!(b.take_id(1, 2).unwrap(), 1);
        assert_eq!(b.take_id(1, 2).unwrap(), 5);
        assert_eq!(b.take_id(0, 2).unwrap(), 4);
        assert_eq!(b.take_id(0, 1).unwrap(), 6);
        // A full class falls back to any free id.
        let mut full = Book::new(
            (0..MAX_CHUNKS)
                .filter(|i| i % 2 == 0)
                .map(|i| (i as u16, 1))
                .collect(),
        );
        assert_eq!(full.take_id(0, 2).unwrap(), 1);
    }

    #[test]
    fn next_fit() {
        assert!(
            fits(0, 100, 10),
            "an oversized value goes alone into an empty chunk"
        );
        assert!(fits(5, 5, 10));
        assert!(!fits(6, 5, 10));
    }
}
