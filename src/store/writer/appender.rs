//! The appender: one open chunk and the rules for filling it, sealing it when full.

use super::book::Shared;
use super::placement::NextFit;
use crate::error::{Error, Result};
use crate::format::layout;
use crate::format::{MAX_CHUNKS, MAX_CHUNK_BYTES};
use crate::io::vfs::VfsFile;
use std::path::PathBuf;
use std::sync::Arc;

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

/// One open chunk, filled by next fit ([`NextFit`]): a value that does not fit seals the chunk
/// and starts a fresh one.
#[derive(Debug)]
pub(crate) struct Appender {
    pub shared: Arc<Shared>,
    /// This appender's residue class of chunk ids and the number of classes (see
    /// [`Book::take_id`](super::book::Book::take_id)).
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

    /// Where the next value goes: next fit from the open chunk (or the one to resume).
    fn placement(&self) -> NextFit {
        NextFit::new(
            self.shared.chunk_size_bytes,
            self.open_chunk().map(|(_, size)| size),
        )
    }

    /// Makes sure the open chunk takes `n` more bytes: seals a full one and opens a fresh one.
    fn room(&mut self, n: u64) -> Result<&mut ActiveChunk> {
        let fresh = self.placement().needs_fresh(n);
        if self.active.is_none() {
            if let Some((id, size)) = self.resume.take() {
                if !fresh {
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
        if fresh {
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
    pub fn write_run(&mut self, run: &[u8]) -> Result<(u16, u64)> {
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
    pub fn fit_run(&self, lens: impl Iterator<Item = u64>) -> usize {
        self.placement().run_len(lens)
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
