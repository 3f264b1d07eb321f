//! `.npy` files → a new dataset: [`NpyConvert`], the first of `zrecord convert`'s forms.
//!
//! One field per file, one record per row (axis 0).
//!
//! [`NpyConvert`] checks everything before writing anything, then streams the inputs
//! through a bounded pipeline and commits once:
//!
//! ```text
//! reader thread ──stored blocks──► N decode threads ──decoded blocks──► writer (caller's thread)
//!   (pread of ~8 MiB of rows     (byte order, Fortran     (reorders by block number, appends
//!    from every input)            transpose)               each row, commits once at the end;
//!                                                          N append tasks deflate and write)
//!        ▲                                                         │
//!        └──────────────── block buffers returned for reuse ───────┘
//! ```
//!
//! The number of block buffers bounds memory, whatever the file sizes. The dataset is built in
//! a hidden sibling directory (`.NAME.zrecord-convert-PID`) and renamed onto the output only
//! after its commit: on any error no dataset appears at the output and the hidden directory is
//! removed (a process killed by a signal can leave only that hidden directory behind).
//!
//! Headers are decoded by zrecord's own `.npy` reader, not by the `npyz` crate: npyz reads element by
//! element through typed iterators, leaves Fortran-order data in file order, and reports
//! problems as `std::io::Error` text; this pipeline needs bulk reads of stored rows, a
//! transpose of Fortran-order blocks, both byte orders converted in place, and typed errors that
//! name the byte offset.
//!
//! ```
//! use zrecord::convert::NpyConvert;
//! use zrecord::{Codec, Dataset};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let tmp = tempfile::tempdir()?;
//! // A 3×2 little-endian float32 array, as NumPy writes it.
//! let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }";
//! let mut npy = b"\x93NUMPY\x01\x00".to_vec();
//! let padded = format!("{header:<117}\n");
//! npy.extend_from_slice(&(padded.len() as u16).to_le_bytes());
//! npy.extend_from_slice(padded.as_bytes());
//! for v in [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0] {
//!     npy.extend_from_slice(&v.to_le_bytes());
//! }
//! let input = tmp.path().join("x.npy");
//! std::fs::write(&input, npy)?;
//!
//! let out = tmp.path().join("x.zr");
//! let mut seen = 0;
//! let report = NpyConvert::new([&input], &out)
//!     .codec(Codec::Deflate)
//!     .on_progress(|p| seen = p.rows_done)
//!     .run()?;
//! assert_eq!((report.rows, report.fields, seen), (3, 1, 3));
//!
//! let ds = Dataset::open(&out)?;
//! assert_eq!(ds.gather_blocking(&[2])?.typed::<f32>(0, 0)?, &[5.0, 6.0]);
//! # Ok(())
//! # }
//! ```

use crate::error::{Error, Result};
pub use crate::format::npy::{NpyError, NpyErrorKind};
use crate::format::npy::{NpyHeader, NpyReader};
use crate::format::{MAX_CHUNKS, MAX_RECORD_BYTES};
use crate::store::schema::DEFAULT_CHUNK_SIZE_BYTES;
use crate::{Codec, Field, Schema, Writer, WriterConfig};
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Default stored bytes read per block (all inputs together), before decoding.
pub const DEFAULT_BLOCK_BYTES: u64 = 8 << 20;
/// Most rows in one block (for arrays of tiny or empty rows).
const MAX_BLOCK_ROWS: u64 = 1 << 16;

use super::{
    occupied, parent_dir, publish, staging_dir, ConvertProgress, ConvertReport, ProgressFn,
};

/// Converts `.npy` files into a new dataset. Built with [`NpyConvert::new`], configured with
/// its setters, run with [`NpyConvert::run`].
///
/// Each input becomes one field, named after its file stem unless [`NpyConvert::field_names`]
/// says otherwise, with the array's dtype and row shape (the dimensions after axis 0); rows are
/// stored little-endian and row-major. Inputs may be format 1.0, 2.0 or 3.0, C- or
/// Fortran-order, either byte order, of dtype bool, i1–i8, u1–u8, f2, f4 or f8; all must have
/// the same number of rows.
#[must_use = "a conversion does nothing until `run` is called"]
pub struct NpyConvert<'a> {
    inputs: Vec<PathBuf>,
    out: PathBuf,
    names: Vec<String>,
    codec: Codec,
    chunk_size_bytes: u64,
    num_writers: usize,
    block_bytes: u64,
    progress: Option<ProgressFn<'a>>,
}

impl std::fmt::Debug for NpyConvert<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NpyConvert")
            .field("inputs", &self.inputs)
            .field("out", &self.out)
            .field("names", &self.names)
            .field("codec", &self.codec)
            .field("chunk_size_bytes", &self.chunk_size_bytes)
            .field("num_writers", &self.num_writers)
            .field("block_bytes", &self.block_bytes)
            .finish_non_exhaustive()
    }
}

impl<'a> NpyConvert<'a> {
    /// A conversion of `inputs` (one field each, in order) into a new dataset at `out`, which
    /// must not exist or be an empty directory; missing parent directories are created.
    pub fn new<I, P>(inputs: I, out: impl AsRef<Path>) -> NpyConvert<'a>
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        NpyConvert {
            inputs: inputs
                .into_iter()
                .map(|p| p.as_ref().to_path_buf())
                .collect(),
            out: out.as_ref().to_path_buf(),
            names: Vec::new(),
            codec: Codec::Raw,
            chunk_size_bytes: DEFAULT_CHUNK_SIZE_BYTES,
            num_writers: 2,
            block_bytes: DEFAULT_BLOCK_BYTES,
            progress: None,
        }
    }

    /// Field names, one per input in order. Default: each input's file stem.
    pub fn field_names<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.names = names.into_iter().map(Into::into).collect();
        self
    }

    /// The codec of every field. Default: [`Codec::Raw`].
    pub fn codec(mut self, codec: Codec) -> Self {
        self.codec = codec;
        self
    }

    /// The dataset's chunk size. Default: [`DEFAULT_CHUNK_SIZE_BYTES`].
    pub fn chunk_size_bytes(mut self, bytes: u64) -> Self {
        self.chunk_size_bytes = bytes;
        self
    }

    /// Threads decoding rows (byte-order conversion, Fortran transpose) ahead of the writer,
    /// and append tasks of the writer ([`WriterConfig::num_writers`]): `n` of each. Default: 2.
    pub fn num_writers(mut self, n: usize) -> Self {
        self.num_writers = n;
        self
    }

    /// Stored bytes read per block, all inputs together (memory is a few blocks per decode
    /// thread). Default: [`DEFAULT_BLOCK_BYTES`] (8 MiB).
    pub fn block_bytes(mut self, bytes: u64) -> Self {
        self.block_bytes = bytes;
        self
    }

    /// Calls `f` on the calling thread after each block of rows is appended. Default: none.
    pub fn on_progress(mut self, f: impl FnMut(ConvertProgress) + Send + 'a) -> Self {
        self.progress = Some(Box::new(f));
        self
    }

    /// Checks every input and the output, then converts and commits, and renames the dataset
    /// into place. Nothing is written before every check has passed; on error nothing is left
    /// at the output.
    ///
    /// # Errors
    ///
    /// [`Error::AlreadyExists`] for an output that is not empty; [`Error::Io`] naming an input
    /// that cannot be read; [`Error::Npy`] for an input that is not a supported `.npy` file
    /// (naming the file and byte offset); [`Error::RowCountMismatch`]; [`Error::RecordTooLarge`]
    /// for rows over the record limit; [`Error::InvalidConfig`] for options that do not fit
    /// (no inputs, a name count that does not match, too many chunks); any error of the
    /// [`Writer`].
    pub fn run(self) -> Result<ConvertReport> {
        let NpyConvert {
            inputs: paths,
            out,
            names,
            codec,
            chunk_size_bytes,
            num_writers,
            block_bytes,
            progress,
        } = self;
        let start = Instant::now();
        // Everything is checked before anything is written.
        if occupied(&out) {
            return Err(Error::AlreadyExists { path: out });
        }
        if paths.is_empty() {
            return Err(Error::InvalidConfig {
                reason: "no .npy inputs to convert".to_string(),
            });
        }
        if !names.is_empty() && names.len() != paths.len() {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "{} field names for {} inputs: give one name per input, or none",
                    names.len(),
                    paths.len()
                ),
            });
        }
        if num_writers == 0 || chunk_size_bytes == 0 || block_bytes == 0 {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "num_writers ({num_writers}), chunk_size_bytes ({chunk_size_bytes}) and \
                     block_bytes ({block_bytes}) must be positive"
                ),
            });
        }
        let inputs = paths
            .iter()
            .map(|p| open_input(p))
            .collect::<Result<Vec<_>>>()?;
        let (first, rows) = match inputs.first() {
            Some(i) => (i.path.clone(), i.header().rows()),
            None => {
                return Err(Error::InvalidConfig {
                    reason: "no .npy inputs to convert".to_string(),
                })
            }
        };
        if let Some(bad) = inputs.iter().find(|i| i.header().rows() != rows) {
            return Err(Error::RowCountMismatch {
                path: bad.path.clone(),
                rows: bad.header().rows(),
                reference: first,
                expected: rows,
            });
        }
        let mut schema = Schema::new().chunk_size_bytes(chunk_size_bytes);
        for (k, input) in inputs.iter().enumerate() {
            let name = match names.get(k) {
                Some(n) => n.clone(),
                None => input
                    .path
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            };
            let h = input.header();
            if h.row_bytes() > MAX_RECORD_BYTES {
                return Err(Error::RecordTooLarge {
                    field: name,
                    len: h.row_bytes(),
                    max: MAX_RECORD_BYTES,
                });
            }
            schema = schema.field(
                Field::new(name, h.dtype())
                    .shape(h.item_shape().to_vec())
                    .codec(codec),
            );
        }
        schema.validate()?;
        let total_bytes: u64 = inputs.iter().map(|i| i.header().data_bytes()).sum();
        if codec == Codec::Raw && total_bytes.div_ceil(chunk_size_bytes) > u64::from(MAX_CHUNKS) {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "{total_bytes} bytes in chunks of {chunk_size_bytes} bytes need more than \
                     the {MAX_CHUNKS} chunks a dataset can hold: raise the chunk size"
                ),
            });
        }

        let tmp = staging_dir(&out)?;
        // Missing parent directories are created, and removed again if the conversion fails.
        let parent = parent_dir(&out);
        let created_parents = parent
            .ancestors()
            .take_while(|p| !p.as_os_str().is_empty() && !p.exists())
            .last()
            .map(Path::to_path_buf);
        std::fs::create_dir_all(&parent).map_err(|e| Error::Io {
            path: parent.clone(),
            op: "create directory",
            source: e,
        })?;
        let mut progress = progress;
        let mut no_progress = |_: ConvertProgress| {};
        let report: &mut dyn FnMut(ConvertProgress) = match progress.as_mut() {
            Some(f) => f,
            None => &mut no_progress,
        };
        let fields = schema.fields.len();
        let plan = Plan {
            rows,
            total_bytes,
            decoders: num_writers,
            block_bytes,
        };
        let built = build(&tmp, &schema, inputs, plan, report).and_then(|()| publish(&tmp, &out));
        if let Err(e) = built {
            let _ = std::fs::remove_dir_all(&tmp);
            if let Some(top) = created_parents {
                let _ = std::fs::remove_dir_all(top);
            }
            return Err(e);
        }
        Ok(ConvertReport {
            out,
            rows,
            fields,
            bytes: total_bytes,
            skipped: 0,
            resumed: 0,
            elapsed: start.elapsed(),
        })
    }
}

/// One input file, header read and checked.
struct Input {
    path: PathBuf,
    reader: NpyReader<File>,
}

impl Input {
    fn header(&self) -> &NpyHeader {
        self.reader.header()
    }
}

/// Opens and checks one input: readable, a valid header of a supported dtype, long enough.
fn open_input(path: &Path) -> Result<Input> {
    let file = File::open(path).map_err(|e| Error::Io {
        path: path.to_path_buf(),
        op: "open",
        source: e,
    })?;
    let len = file
        .metadata()
        .map_err(|e| Error::Io {
            path: path.to_path_buf(),
            op: "stat",
            source: e,
        })?
        .len();
    let npy = |source| Error::Npy {
        path: path.to_path_buf(),
        source,
    };
    let reader = NpyReader::new(file).map_err(npy)?;
    reader.header().check_file_len(len).map_err(npy)?;
    Ok(Input {
        path: path.to_path_buf(),
        reader,
    })
}

/// A block of rows of every input: stored bytes in, decoded bytes out. Recycled.
#[derive(Default)]
struct Block {
    seq: u64,
    rows: u64,
    stored: Vec<Vec<u8>>,
    decoded: Vec<Vec<u8>>,
}

type Shared<T> = Arc<Mutex<Receiver<T>>>;

/// The size of a conversion and how to run it.
struct Plan {
    rows: u64,
    total_bytes: u64,
    decoders: usize,
    block_bytes: u64,
}

/// Writes every row of `inputs` into a new dataset at `dir` and commits it.
fn build(
    dir: &Path,
    schema: &Schema,
    inputs: Vec<Input>,
    plan: Plan,
    progress: &mut dyn FnMut(ConvertProgress),
) -> Result<()> {
    let Plan {
        rows,
        total_bytes,
        decoders,
        block_bytes,
    } = plan;
    let row_bytes: Vec<u64> = inputs.iter().map(|i| i.header().row_bytes()).collect();
    let stored_row_bytes: u64 = row_bytes.iter().sum();
    let block_rows = (block_bytes / stored_row_bytes.max(1)).clamp(1, MAX_BLOCK_ROWS);
    let config = WriterConfig {
        num_writers: decoders,
        ..WriterConfig::default()
    };
    let mut writer = Writer::create(dir, schema, config)?;

    let buffers = decoders * 2 + 2;
    let (free_tx, free_rx) = mpsc::sync_channel::<Block>(buffers);
    for _ in 0..buffers {
        // The channel holds `buffers` blocks and its receiver is alive: this cannot fail.
        let _ = free_tx.send(Block::default());
    }
    let (work_tx, work_rx) = mpsc::sync_channel::<Result<Block, Error>>(buffers);
    let (done_tx, done_rx) = mpsc::sync_channel::<Result<Block, Error>>(buffers);
    let headers: Arc<Vec<(PathBuf, NpyHeader)>> = Arc::new(
        inputs
            .iter()
            .map(|i| (i.path.clone(), i.header().clone()))
            .collect(),
    );
    let work_rx: Shared<Result<Block, Error>> = Arc::new(Mutex::new(work_rx));

    let result = std::thread::scope(|s| {
        s.spawn(move || read_blocks(inputs, block_rows, &free_rx, &work_tx));
        for _ in 0..decoders {
            let work_rx = Arc::clone(&work_rx);
            let done_tx = done_tx.clone();
            let headers = Arc::clone(&headers);
            s.spawn(move || decode_blocks(&headers, &work_rx, &done_tx));
        }
        // Only the decoders may keep these ends alive: when they stop, the reader's sends fail.
        drop(work_rx);
        drop(done_tx);
        let mut sink = Progress {
            report: progress,
            now: ConvertProgress {
                rows_done: 0,
                rows_total: rows,
                bytes_done: 0,
                bytes_total: total_bytes,
            },
        };
        write_blocks(&mut writer, &row_bytes, done_rx, free_tx, &mut sink)
    });
    result?;
    writer.commit()?;
    drop(writer);
    Ok(())
}

/// The reader thread: fills free blocks with the stored bytes of the next rows of every input.
fn read_blocks(
    mut inputs: Vec<Input>,
    block_rows: u64,
    free: &Receiver<Block>,
    work: &SyncSender<Result<Block, Error>>,
) {
    let mut seq = 0;
    // A receive error means the writer stopped: nothing more to do.
    while let Ok(mut block) = free.recv() {
        block.stored.resize_with(inputs.len(), Vec::new);
        block.seq = seq;
        let mut got = None;
        for (input, buf) in inputs.iter_mut().zip(block.stored.iter_mut()) {
            match input.reader.read_stored(block_rows, buf) {
                Ok(n) if got.is_none() || got == Some(n) => got = Some(n),
                Ok(_) => {
                    // Row counts were checked up front; a file that changed under us lands here.
                    let _ = work.send(Err(Error::InvalidConfig {
                        reason: format!("{} changed while being read", input.path.display()),
                    }));
                    return;
                }
                Err(source) => {
                    let _ = work.send(Err(Error::Npy {
                        path: input.path.clone(),
                        source,
                    }));
                    return;
                }
            }
        }
        block.rows = got.unwrap_or(0);
        if block.rows == 0 {
            return;
        }
        seq += 1;
        if work.send(Ok(block)).is_err() {
            return;
        }
    }
}

/// A decode thread: converts stored rows to little-endian, row-major bytes.
fn decode_blocks(
    headers: &[(PathBuf, NpyHeader)],
    work: &Shared<Result<Block, Error>>,
    done: &SyncSender<Result<Block, Error>>,
) {
    loop {
        let next = match work.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(item) = next else { return };
        let item = item.and_then(|mut block| {
            block.decoded.resize_with(headers.len(), Vec::new);
            for (((path, h), stored), out) in headers
                .iter()
                .zip(block.stored.iter_mut())
                .zip(block.decoded.iter_mut())
            {
                if h.stored_as_decoded() {
                    // Already little-endian and row-major: hand the buffer over, no copy.
                    std::mem::swap(stored, out);
                    continue;
                }
                out.clear();
                h.decode_rows(block.rows, stored, out)
                    .map_err(|source| Error::Npy {
                        path: path.clone(),
                        source,
                    })?;
            }
            Ok(block)
        });
        if done.send(item).is_err() {
            return;
        }
    }
}

/// Progress so far and where it is reported.
struct Progress<'a> {
    report: &'a mut dyn FnMut(ConvertProgress),
    now: ConvertProgress,
}

/// The writer: appends decoded blocks in order, one record per row.
fn write_blocks(
    writer: &mut Writer,
    row_bytes: &[u64],
    done: Receiver<Result<Block, Error>>,
    free: SyncSender<Block>,
    progress: &mut Progress<'_>,
) -> Result<(), Error> {
    let rows = progress.now.rows_total;
    let mut pending: BTreeMap<u64, Block> = BTreeMap::new();
    let mut next_seq = 0u64;
    let mut written = 0u64;
    let row_len: Vec<usize> = row_bytes
        .iter()
        .map(|&b| usize::try_from(b).unwrap_or(usize::MAX))
        .collect();
    while written < rows {
        let block = match pending.remove(&next_seq) {
            Some(b) => b,
            None => match done.recv() {
                Ok(Ok(b)) if b.seq == next_seq => b,
                Ok(Ok(b)) => {
                    pending.insert(b.seq, b);
                    continue;
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(Error::InvalidConfig {
                        reason: format!("inputs ended after {written} of {rows} rows"),
                    })
                }
            },
        };
        let mut record: Vec<&[u8]> = Vec::with_capacity(row_len.len());
        for r in 0..usize::try_from(block.rows).unwrap_or(0) {
            record.clear();
            for (buf, &len) in block.decoded.iter().zip(&row_len) {
                let at = r * len;
                record.push(buf.get(at..at + len).unwrap_or_default());
            }
            writer.append(&record)?;
        }
        drop(record);
        written += block.rows;
        next_seq += 1;
        progress.now.rows_done = written;
        progress.now.bytes_done += block.decoded.iter().map(|d| d.len() as u64).sum::<u64>();
        (progress.report)(progress.now);
        // The reader may have stopped already (all rows read): a failed send is fine.
        let _ = free.send(block);
    }
    Ok(())
}
