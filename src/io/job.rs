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

/// An open file a job reads from, with its path for error messages.
#[derive(Debug)]
pub struct ReadFile {
    /// The file, opened read-only.
    pub file: File,
    /// Where it lives.
    pub path: PathBuf,
}

impl ReadFile {
    pub(crate) fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// One contiguous range of a file, scattered into consecutive pieces of the job's buffer.
#[derive(Clone, Debug)]
pub struct ReadOp {
    /// Index into [`IoJob::files`].
    pub file: usize,
    /// File offset of the first byte.
    pub offset: u64,
    /// Bytes that must be read; the op may ask for more (an O_DIRECT range rounded up past
    /// the end of the file), and a read that ends between `need` and the total is complete.
    pub need: usize,
    /// The pieces (indices into [`IoJob::pieces`]) the range fills, in file order.
    pub pieces: Range<usize>,
}

/// A destination: `len` bytes at `at` in buffer `buf` of the job.
#[derive(Clone, Copy, Debug)]
pub struct Piece {
    /// Index into [`IoJob::bufs`].
    pub buf: usize,
    /// Offset in that buffer.
    pub at: usize,
    /// Length in bytes.
    pub len: usize,
}

/// A batch of reads and the memory they fill.
#[derive(Debug, Default)]
pub struct IoJob {
    /// The files read from; kept open until the job completes.
    pub files: Vec<Arc<ReadFile>>,
    /// The reads.
    pub ops: Vec<ReadOp>,
    /// Where the reads land.
    pub pieces: Vec<Piece>,
    /// The destination buffers. Never resized while the job is with a backend.
    pub bufs: Vec<Vec<u8>>,
}

impl IoJob {
    /// Total bytes of an op's pieces.
    pub fn op_len(&self, op: &ReadOp) -> usize {
        self.pieces
            .get(op.pieces.clone())
            .map_or(0, |p| p.iter().map(|p| p.len).sum())
    }

    /// Checks that every piece lies inside the buffer and every op names a file, so backends can
    /// hand raw pointers to the kernel without further checks.
    pub fn validate(&self) -> std::io::Result<()> {
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
pub struct JobError {
    /// The file of the failed op.
    pub path: PathBuf,
    /// The file offset where the failed read started.
    pub offset: u64,
    /// What happened.
    pub error: std::io::Error,
}

impl JobError {
    pub(crate) fn new(job: &IoJob, op: usize, error: std::io::Error) -> JobError {
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
        crate::Error::io(e.path, "read", e.error)
    }
}

/// Progress of one op across short reads: how many bytes have landed.
pub(crate) fn eof_error(done: usize, need: usize) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        format!("file ended after {done} of {need} bytes"),
    )
}
