//! `zrecord convert`: `.npy` files → a new dataset, one field per file, one record per row.
//! Thin over [`zrecord::convert::NpyConvert`]: flags in, a progress bar and one summary line
//! out.

use crate::args::{parse_size, CodecArg};
use crate::progress;
use crate::Res;
use clap::Args;
use std::path::PathBuf;
use zrecord::convert::{NpyConvert, DEFAULT_BLOCK_BYTES};
use zrecord::Error;
use zrecord::DEFAULT_CHUNK_SIZE_BYTES;

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
    /// zstd level of `--codec zstd` and `zstd-dict`: 1 (fastest) to 19.
    #[arg(long, value_name = "LEVEL", default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=19))]
    zstd_level: i32,
    /// Chunk size (plain bytes or K, M, G with binary multiples: 64M, 256MiB, 1GiB).
    #[arg(long, value_name = "BYTES", value_parser = parse_size, default_value_t = DEFAULT_CHUNK_SIZE_BYTES)]
    chunk_size: u64,
    /// Threads decoding rows (byte-order conversion, Fortran transpose) ahead of the dataset's
    /// writer, and append tasks of the writer (deflate, checksums and writes, each task into
    /// its own chunk), 1-4 of each.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=4))]
    writers: u8,
    /// Stored bytes read per block (testing aid: small values exercise the pipeline).
    #[arg(long, hide = true, value_parser = parse_size, default_value_t = DEFAULT_BLOCK_BYTES)]
    block_bytes: u64,
}

/// Runs `zrecord convert`.
pub fn run(a: &ConvertArgs) -> Res {
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
    let bar = progress::bytes_bar(0, "convert");
    let report = NpyConvert::new(&a.inputs, &a.out)
        .field_names(a.fields.iter().cloned())
        .codec(a.codec.codec(a.zstd_level))
        .chunk_size_bytes(a.chunk_size)
        .num_writers(usize::from(a.writers))
        .block_bytes(a.block_bytes)
        .on_progress(|p| {
            bar.set_length(p.bytes_total);
            bar.set_position(p.bytes_done);
        })
        .run();
    bar.finish_and_clear();
    let report = report?;
    let secs = report.elapsed.as_secs_f64();
    println!(
        "converted {} rows × {} field(s) ({} bytes) into {} in {secs:.2} s: {:.1} MB/s",
        report.rows,
        report.fields,
        report.bytes,
        report.out.display(),
        report.bytes as f64 / secs.max(1e-9) / 1e6
    );
    Ok(())
}
