//! `zrecord convert`: `.npy` files → a new dataset, one field per file, one record per row.
//!
//! Pipeline (bounded memory whatever the file size):
//!
//! ```text
//! reader thread ──stored blocks──► N decode threads ──decoded blocks──► writer (this thread)
//!   (pread of ~8 MiB of rows     (byte order, Fortran     (reorders by block number, appends
//!    from every input)            transpose)               each row, commits once at the end;
//!                                                          N append tasks deflate and write)
//!        ▲                                                         │
//!        └──────────────── block buffers returned for reuse ───────┘
//! ```
//!
//! The number of block buffers bounds memory. The dataset is built in a hidden sibling
//! directory and renamed onto `--out` only after its commit: on any error (or a crash) no
//! dataset appears at `--out`, and the hidden directory is removed on error.

use crate::progress;
use crate::Res;
use clap::{Args, ValueEnum};
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use zrecord::format::npy::{NpyHeader, NpyReader};
use zrecord::format::{MAX_CHUNKS, MAX_RECORD_BYTES};
use zrecord::store::schema::DEFAULT_CHUNK_SIZE_BYTES;
use zrecord::{Codec, Error, Field, Schema, Writer, WriterConfig};

/// Stored bytes read per block (all inputs together), before decoding.
const BLOCK_BYTES: u64 = 8 << 20;
/// Most rows in one block (for arrays of tiny or empty rows).
const MAX_BLOCK_ROWS: u64 = 1 << 16;

#[derive(Args)]
#[command(
    after_help = "Example:\n  zrecord convert images.npy labels.npy --out train.zr --codec deflate\n\n\
    Each input becomes one field (named after the file's stem unless --field is given) with its \
    dtype and row shape (the dimensions after axis 0). Inputs may be C- or Fortran-order, either \
    byte order, .npy format 1.0, 2.0 or 3.0; dtypes bool, i1-i8, u1-u8, f2, f4, f8."
)]
pub struct ConvertArgs {
    /// Input .npy files; all must have the same number of rows (axis 0).
    #[arg(required = true, value_name = "IN.npy")]
    inputs: Vec<PathBuf>,
    /// The dataset directory to create: it must not exist, or be an empty directory.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Field name for each input, in order (default: each file's stem). Give one per input.
    #[arg(long = "field", value_name = "NAME")]
    fields: Vec<String>,
    /// Codec of every field.
    #[arg(long, value_enum, default_value_t = CodecArg::Raw)]
    codec: CodecArg,
    /// Chunk size in bytes (suffixes K, M, G: binary multiples, e.g. 64M).
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes, default_value_t = DEFAULT_CHUNK_SIZE_BYTES)]
    chunk_size: u64,
    /// Threads decoding rows (byte-order conversion, Fortran transpose) ahead of the dataset's
    /// writer, and append tasks of the writer (deflate, checksums and writes, each task into
    /// its own chunk), 1-4 of each.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=4))]
    writers: u8,
    /// Stored bytes read per block (testing aid: small values exercise the pipeline).
    #[arg(long, hide = true, default_value_t = BLOCK_BYTES)]
    block_bytes: u64,
}

#[derive(Clone, Copy, ValueEnum)]
enum CodecArg {
    /// Stored as given.
    Raw,
    /// Whole-record deflate (records that do not shrink are stored raw).
    Deflate,
}

/// Parses `1234`, `64K`, `256M`, `1G` (binary multiples; an optional trailing `B`/`iB`).
fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, shift) = match t.chars().last() {
        Some('k' | 'K') => (t.get(..t.len() - 1), 10),
        Some('m' | 'M') => (t.get(..t.len() - 1), 20),
        Some('g' | 'G') => (t.get(..t.len() - 1), 30),
        _ => (Some(t), 0),
    };
    num.and_then(|n| n.trim().parse::<u64>().ok())
        .and_then(|n| n.checked_mul(1u64 << shift))
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{s:?} is not a positive byte count (e.g. 1048576 or 64M)"))
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
fn open_input(path: &Path) -> Result<Input, Error> {
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

/// True if `path` exists and is not an empty directory.
fn occupied(path: &Path) -> bool {
    match std::fs::read_dir(path) {
        Ok(mut rd) => rd.next().is_some(),
        Err(_) => path.exists() || path.symlink_metadata().is_ok(),
    }
}

/// Runs `zrecord convert`.
pub fn run(a: &ConvertArgs) -> Res {
    // Everything is checked before anything is written.
    if occupied(&a.out) {
        return Err(Error::AlreadyExists {
            path: a.out.clone(),
        }
        .into());
    }
    if !a.fields.is_empty() && a.fields.len() != a.inputs.len() {
        return Err(Error::InvalidConfig {
            reason: format!(
                "{} --field names for {} inputs: give one name per input, or none",
                a.fields.len(),
                a.inputs.len()
            ),
        }
        .into());
    }
    let inputs = a
        .inputs
        .iter()
        .map(|p| open_input(p))
        .collect::<Result<Vec<_>, _>>()?;
    let (first, rows) = match inputs.first() {
        Some(i) => (i.path.clone(), i.header().rows()),
        None => return Err("no input files".into()),
    };
    if let Some(bad) = inputs.iter().find(|i| i.header().rows() != rows) {
        return Err(Error::RowCountMismatch {
            path: bad.path.clone(),
            rows: bad.header().rows(),
            reference: first,
            expected: rows,
        }
        .into());
    }
    let codec = match a.codec {
        CodecArg::Raw => Codec::Raw,
        CodecArg::Deflate => Codec::Deflate,
    };
    let mut schema = Schema::new().chunk_size_bytes(a.chunk_size);
    for (k, input) in inputs.iter().enumerate() {
        let name = match a.fields.get(k) {
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
            }
            .into());
        }
        schema = schema.field(
            Field::new(name, h.dtype)
                .shape(h.item_shape().to_vec())
                .codec(codec),
        );
    }
    schema.validate()?;
    let total_bytes: u64 = inputs.iter().map(|i| i.header().data_bytes()).sum();
    if codec == Codec::Raw && total_bytes.div_ceil(a.chunk_size) > u64::from(MAX_CHUNKS) {
        return Err(Error::InvalidConfig {
            reason: format!(
                "{total_bytes} bytes in chunks of {} bytes need more than the {MAX_CHUNKS} \
                 chunks a dataset can hold: raise --chunk-size",
                a.chunk_size
            ),
        }
        .into());
    }

    let tmp = staging_dir(&a.out)?;
    // Missing parent directories are created, and removed again if the conversion fails.
    let parent = parent_dir(&a.out);
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
    let start = Instant::now();
    let built = build(
        &tmp,
        &schema,
        inputs,
        Plan {
            rows,
            total_bytes,
            decoders: usize::from(a.writers),
            block_bytes: a.block_bytes,
        },
    )
    .and_then(|()| publish(&tmp, &a.out));
    if let Err(e) = built {
        let _ = std::fs::remove_dir_all(&tmp);
        if let Some(top) = created_parents {
            let _ = std::fs::remove_dir_all(top);
        }
        return Err(e);
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "converted {rows} rows × {} field(s) ({total_bytes} bytes) into {} in {secs:.2} s: {:.1} MB/s",
        schema.fields.len(),
        a.out.display(),
        total_bytes as f64 / secs.max(1e-9) / 1e6
    );
    Ok(())
}

/// A hidden sibling of `out` to build in, so the final rename is atomic (same file system).
fn staging_dir(out: &Path) -> Result<PathBuf, Error> {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| Error::InvalidConfig {
            reason: format!("--out {} has no directory name", out.display()),
        })?;
    Ok(parent_dir(out).join(format!(".{name}.zrecord-convert-{}", std::process::id())))
}

/// The directory `out` is created in.
fn parent_dir(out: &Path) -> PathBuf {
    match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Renames the committed dataset onto `out` (replacing an empty directory) and syncs the
/// parent directory.
fn publish(tmp: &Path, out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::rename(tmp, out).map_err(|e| Error::Io {
        path: out.to_path_buf(),
        op: "rename the converted dataset into place",
        source: e,
    })?;
    let parent = parent_dir(out);
    File::open(&parent)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::Io {
            path: parent,
            op: "fsync directory",
            source: e,
        })?;
    Ok(())
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
) -> Result<(), Box<dyn std::error::Error>> {
    let Plan {
        rows,
        total_bytes,
        decoders,
        block_bytes,
    } = plan;
    let row_bytes: Vec<u64> = inputs.iter().map(|i| i.header().row_bytes()).collect();
    let stored_row_bytes: u64 = row_bytes.iter().sum();
    let block_rows = (block_bytes / stored_row_bytes.max(1)).clamp(1, MAX_BLOCK_ROWS);
    let config = WriterConfig::default().num_writers(decoders);
    let mut writer = Writer::create(dir, schema, config)?;
    let bar = progress::bytes_bar(total_bytes, "convert");

    let buffers = decoders * 2 + 2;
    let (free_tx, free_rx) = mpsc::sync_channel::<Block>(buffers);
    for _ in 0..buffers {
        free_tx.send(Block::default())?;
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
        write_blocks(&mut writer, rows, &row_bytes, done_rx, free_tx, &bar)
    });
    result?;
    writer.commit()?;
    drop(writer);
    bar.finish_and_clear();
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

/// The writer: appends decoded blocks in order, one record per row.
fn write_blocks(
    writer: &mut Writer,
    rows: u64,
    row_bytes: &[u64],
    done: Receiver<Result<Block, Error>>,
    free: SyncSender<Block>,
    bar: &indicatif::ProgressBar,
) -> Result<(), Error> {
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
        bar.inc(block.decoded.iter().map(|d| d.len() as u64).sum());
        // The reader may have stopped already (all rows read): a failed send is fine.
        let _ = free.send(block);
    }
    Ok(())
}
