//! A batch of positioned reads, in the form every backend executes.
//!
//! A job owns everything its reads touch: the destination buffer, the scatter lists and the
//! open files. A backend takes the job by value and gives it back only once every read it
//! submitted has completed, so no memory named by an in-flight read can be freed or reused
//! early, whatever the caller does meanwhile (including dropping its future).

use std::fs::File;
use std::ops::Range;
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

/// What makes a file the one a commit named: its device and inode number, the inode's
/// generation number (`FS_IOC_GETVERSION`: ext4, XFS, btrfs and tmpfs give a freshly allocated
/// inode a new one, so a reused inode number is told apart) and its birth time. Where the file
/// system has neither, a reused inode number goes unnoticed; while a descriptor of a file is
/// open, though, no other file on its device can have its inode number, so the identity of a
/// file some job holds open names that file alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct FileId {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) generation: Option<u32>,
    pub(crate) born: Option<SystemTime>,
}

impl FileId {
    /// The identity of the open file `f`.
    pub(crate) fn of(f: &File) -> std::io::Result<FileId> {
        use std::os::unix::fs::MetadataExt;
        let m = f.metadata()?;
        Ok(FileId {
            dev: m.dev(),
            ino: m.ino(),
            generation: inode_generation(f),
            born: m.created().ok(),
        })
    }

    /// The identity of the file at `path` now (opened read-only for a moment).
    pub(crate) fn at(path: &std::path::Path) -> std::io::Result<FileId> {
        FileId::of(&File::open(path)?)
    }
}

/// The inode's generation number, where the file system keeps one.
fn inode_generation(f: &File) -> Option<u32> {
    let mut v: libc::c_long = 0;
    // SAFETY: `FS_IOC_GETVERSION` writes at most one `long` (file systems write an `int`)
    // through the pointer, which points to a live, writable `c_long`; the descriptor is open for
    // the call's duration (borrowed from `f`).
    let r = unsafe { libc::ioctl(f.as_raw_fd(), libc::FS_IOC_GETVERSION, &mut v) };
    // File systems store an `int` in the low bytes of the `long` (little-endian targets).
    (r == 0).then_some(v as u32)
}

/// A file a job reads from: an open local file, or an object on a store. Its path (the
/// object's URL for an object) names it in error messages.
#[derive(Debug)]
pub(crate) struct ReadFile {
    /// The file, opened read-only; `None` for an object on a store.
    pub(crate) file: Option<File>,
    /// Where it lives.
    pub(crate) path: PathBuf,
    /// Opened with `O_DIRECT`: offsets, lengths and destinations of its reads are aligned.
    pub(crate) direct: bool,
    /// The object's key under its dataset's prefix, for an object on a store.
    pub(crate) object: Option<String>,
    /// The identity of the local file (checked against its commit's when opened); `None` for
    /// an object on a store.
    pub(crate) id: Option<FileId>,
}

impl ReadFile {
    /// A local file, whose identity is `id`.
    pub(crate) fn local_file(file: File, path: PathBuf, direct: bool, id: FileId) -> ReadFile {
        ReadFile {
            file: Some(file),
            path,
            direct,
            object: None,
            id: Some(id),
        }
    }

    /// The descriptor; -1 (every read of it fails with `EBADF`) for an object on a store, which
    /// only the remote backend reads.
    pub(crate) fn fd(&self) -> RawFd {
        self.file.as_ref().map_or(-1, AsRawFd::as_raw_fd)
    }

    /// The local file, `None` for an object on a store.
    pub(crate) fn local(&self) -> Option<&File> {
        self.file.as_ref()
    }
}

/// One contiguous range of a file, scattered into consecutive pieces of the job's buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReadOp {
    /// Index into [`ReadJob::files`].
    pub(crate) file: usize,
    /// File offset of the first byte.
    pub(crate) offset: u64,
    /// Bytes that must be read; the op may ask for more (an O_DIRECT range rounded up past
    /// the end of the file), and a read that ends between `need` and the total is complete.
    pub(crate) need: usize,
    /// The pieces (indices into [`ReadJob::pieces`]) the range fills, in file order.
    pub(crate) pieces: Range<usize>,
}

/// The buffer of a piece whose bytes are read and dropped: a gap the coalescing rule read
/// across (`io/coalesce.rs`; only for objects on a store, whose backend delivers through
/// [`ReadJob::fill`]). No buffer has this index, so [`ReadJob::validate`] refuses a job with
/// one: no such piece reaches the kernel.
pub(crate) const SKIP: usize = usize::MAX;

/// A destination: `len` bytes at `at` in buffer `buf` of the job ([`SKIP`]: dropped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Piece {
    /// Index into [`ReadJob::bufs`].
    pub(crate) buf: usize,
    /// Offset in that buffer.
    pub(crate) at: usize,
    /// Length in bytes.
    pub(crate) len: usize,
}

/// A batch of positioned reads and the memory they fill: what a
/// [`ReadBackend`](crate::ReadBackend) executes. Each read (an *op*) is one contiguous byte
/// range of one chunk file; [`ReadJob::range`] describes it and [`ReadJob::fill`] delivers its
/// bytes.
#[derive(Debug, Default)]
pub struct ReadJob {
    /// The files read from; kept open until the job completes.
    pub(crate) files: Vec<Arc<ReadFile>>,
    /// The reads.
    pub(crate) ops: Vec<ReadOp>,
    /// Where the reads land.
    pub(crate) pieces: Vec<Piece>,
    /// The destination buffers. Never resized while the job is with a backend.
    pub(crate) bufs: Vec<Vec<u8>>,
}

/// One read of a [`ReadJob`]: `len` bytes of the file at `path` from `offset`, of which the
/// first `need` must arrive (the rest may lie past the end of the file: an `O_DIRECT` range is
/// rounded up to whole blocks).
#[derive(Debug)]
#[non_exhaustive]
pub struct ReadRange<'a> {
    /// The chunk file (the object's URL for a chunk on an object store).
    pub path: &'a std::path::Path,
    /// The chunk file, open read-only; `None` for a chunk on an object store.
    pub file: Option<&'a File>,
    /// The chunk's object key under its dataset's prefix, for a chunk on an object store.
    pub object: Option<&'a str>,
    /// `file` was opened with `O_DIRECT`: `offset` and `len` are multiples of 4 KiB, and so is
    /// the address of every destination.
    pub direct: bool,
    /// File offset of the first byte.
    pub offset: u64,
    /// Bytes the range covers.
    pub len: usize,
    /// Bytes that must be read.
    pub need: usize,
}

impl ReadJob {
    /// Number of reads.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True if the job has no reads.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Read `op`, or `None` past the last.
    pub fn range(&self, op: usize) -> Option<ReadRange<'_>> {
        let o = self.ops.get(op)?;
        let f = self.files.get(o.file)?;
        Some(ReadRange {
            path: &f.path,
            file: f.file.as_ref(),
            object: f.object.as_deref(),
            direct: f.direct,
            offset: o.offset,
            len: self.op_len(o),
            need: o.need,
        })
    }

    /// Delivers the bytes of read `op`: `data` must hold at least its `need` bytes and at most
    /// its `len`; they are scattered into the op's destinations (the bytes of a gap the read
    /// was coalesced across are dropped).
    pub fn fill(&mut self, op: usize, data: &[u8]) -> std::io::Result<()> {
        let bad = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, m);
        let o = self
            .ops
            .get(op)
            .ok_or_else(|| bad(format!("no read {op}")))?;
        let total = self.op_len(o);
        if data.len() < o.need || data.len() > total {
            return Err(bad(format!(
                "read {op} takes {}..={total} bytes, got {}",
                o.need,
                data.len()
            )));
        }
        let mut rest = data;
        for p in self.pieces.get(o.pieces.clone()).unwrap_or_default() {
            let n = p.len.min(rest.len());
            let (head, tail) = rest.split_at(n);
            if p.buf == SKIP {
                rest = tail;
                continue;
            }
            let dst = self
                .bufs
                .get_mut(p.buf)
                .and_then(|b| b.get_mut(p.at..p.at + n))
                .ok_or_else(|| bad(format!("read {op} lands outside its buffer")))?;
            dst.copy_from_slice(head);
            rest = tail;
        }
        Ok(())
    }

    /// The bytes read `op` has delivered so far (its whole `len`, a coalesced gap as zeros),
    /// copied out.
    pub fn read_back(&self, op: usize) -> Option<Vec<u8>> {
        let o = self.ops.get(op)?;
        let mut out = Vec::with_capacity(self.op_len(o));
        for p in self.pieces.get(o.pieces.clone())? {
            match p.buf {
                SKIP => out.resize(out.len() + p.len, 0),
                b => out.extend_from_slice(self.bufs.get(b)?.get(p.at..p.at + p.len)?),
            }
        }
        Some(out)
    }

    /// Bytes of read `op` its caller wants: its length less the gaps it reads across.
    #[cfg(feature = "remote")]
    pub(crate) fn wanted(&self, op: usize) -> usize {
        self.ops.get(op).map_or(0, |o| {
            self.pieces.get(o.pieces.clone()).map_or(0, |p| {
                p.iter().filter(|p| p.buf != SKIP).map(|p| p.len).sum()
            })
        })
    }

    /// Total bytes of an op's pieces.
    pub(crate) fn op_len(&self, op: &ReadOp) -> usize {
        self.pieces
            .get(op.pieces.clone())
            .map_or(0, |p| p.iter().map(|p| p.len).sum())
    }

    /// Checks that every piece lies inside the buffer and every op names a file, so backends can
    /// hand raw pointers to the kernel without further checks.
    pub(crate) fn validate(&self) -> std::io::Result<()> {
        let bad =
            |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, what.to_string());
        for p in &self.pieces {
            let size = self.bufs.get(p.buf).map_or(0, Vec::len);
            if p.at.checked_add(p.len).is_none_or(|end| end > size) {
                return Err(bad("read piece outside the job's buffer"));
            }
        }
        for op in &self.ops {
            if op.file >= self.files.len() || op.pieces.end > self.pieces.len() {
                return Err(bad("read op names a missing file or piece"));
            }
            if op.need > self.op_len(op) {
                return Err(bad("read op needs more than its pieces hold"));
            }
        }
        Ok(())
    }
}

/// Why a job failed: the op that failed and the OS error (or `UnexpectedEof` for a file that
/// ended before the op's `need` bytes).
#[derive(Debug)]
pub(crate) struct JobError {
    /// The file of the failed op.
    pub(crate) path: PathBuf,
    /// The file offset where the failed read started.
    pub(crate) offset: u64,
    /// What happened.
    pub(crate) error: std::io::Error,
}

impl JobError {
    pub(crate) fn new(job: &ReadJob, op: usize, error: std::io::Error) -> JobError {
        let op = job.ops.get(op);
        JobError {
            path: op
                .and_then(|o| job.files.get(o.file))
                .map(|f| f.path.clone())
                .unwrap_or_default(),
            offset: op.map_or(0, |o| o.offset),
            error,
        }
    }
}

impl From<JobError> for crate::Error {
    fn from(e: JobError) -> crate::Error {
        crate::Error::ReadFailed {
            path: e.path,
            offset: e.offset,
            source: e.error,
        }
    }
}

/// Progress of one op across short reads: how many bytes have landed.
pub(crate) fn eof_error(done: usize, need: usize) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        format!("file ended after {done} of {need} bytes"),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
    use super::*;

    /// A file that takes the inode number of a removed one is another file: its generation
    /// number (or birth time) differs, on file systems that keep one (this test's temporary
    /// directory's; it reports and passes where inode numbers are never reused quickly).
    #[test]
    fn a_reused_inode_number_is_another_identity() {
        let dir = tempfile::tempdir().unwrap();
        let first = dir.path().join("a");
        std::fs::write(&first, b"one").unwrap();
        let old = FileId::at(&first).unwrap();
        if old.generation.is_none() {
            eprintln!("no inode generation numbers on this file system");
        }
        std::fs::remove_file(&first).unwrap();
        let mut reused = 0;
        for i in 0..200 {
            let p = dir.path().join(format!("b{i}"));
            std::fs::write(&p, b"two").unwrap();
            let new = FileId::at(&p).unwrap();
            if (new.dev, new.ino) == (old.dev, old.ino) {
                reused += 1;
                if old.generation.is_some() {
                    assert_ne!(new.generation, old.generation, "{old:?} {new:?}");
                }
                assert_ne!(new, old);
            }
            std::fs::remove_file(&p).unwrap();
        }
        eprintln!("inode number reused {reused} times in 200 files");
    }
}
