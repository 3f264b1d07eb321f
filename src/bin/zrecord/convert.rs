//! `zrecord convert`: files → a new dataset. Forms: `npy IN.npy... OUT` (also the original
//! `IN.npy... --out DIR` with no form name), `images DIR OUT`, `webdataset SHARDS... OUT`.
//! Thin over [`zrecord::convert`]: flags in, a progress bar and one summary line out.

use crate::args::{parse_size, CodecArg};
use crate::progress;
use crate::Res;
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};
use zrecord::convert::{
    ConvertReport, ImagesConvert, NpyConvert, WebDatasetConvert, DEFAULT_BLOCK_BYTES,
};
use zrecord::Error;
use zrecord::DEFAULT_CHUNK_SIZE_BYTES;

#[derive(Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "Examples:\n  zrecord convert npy images.npy labels.npy train.zr --codec deflate\n  \
    zrecord convert images ./train train.zr --max-side 512\n  \
    zrecord convert webdataset 'shards/train-*.tar' train.zr\n  \
    zrecord convert images.npy labels.npy --out train.zr   (the .npy form without its name)\n\n\
    .npy: each input becomes one field (named after the file's stem unless --field is given) \
    with its dtype and row shape (the dimensions after axis 0). Inputs may be C- or \
    Fortran-order, either byte order, .npy format 1.0, 2.0 or 3.0; dtypes bool, i1-i8, u1-u8, \
    f2, f4, f8.\n\nimages and webdataset are resumable: an interrupted run leaves \
    .OUT.zrecord-convert beside OUT, and the same command run again continues from its last \
    commit."
)]
pub struct ConvertArgs {
    #[command(subcommand)]
    form: Option<Form>,
    #[command(flatten)]
    npy: NpyArgs,
}

#[derive(Subcommand)]
enum Form {
    /// .npy files → a dataset: one field per file, one record per row (axis 0).
    Npy(NpyArgs),
    /// A folder of class folders of JPEG/PNG images → `image` bytes and `label` (the class's
    /// index); the class names are stored as the dataset attribute `classes`.
    Images(ImagesArgs),
    /// WebDataset tar shards → one record per sample, one field per extension.
    Webdataset(WebDatasetArgs),
}

#[derive(Args)]
struct NpyArgs {
    /// Input .npy files (all with the same number of rows), then the output unless --out is
    /// given.
    #[arg(required = true, value_name = "IN.npy")]
    inputs: Vec<PathBuf>,
    /// The dataset directory to create: it must not exist, or be an empty directory.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Field name for each input, in order (default: each file's stem). Give one per input.
    #[arg(long = "field", value_name = "NAME")]
    fields: Vec<String>,
    #[command(flatten)]
    common: Common,
    /// Stored bytes read per block (testing aid: small values exercise the pipeline).
    #[arg(long, hide = true, value_parser = parse_size, default_value_t = DEFAULT_BLOCK_BYTES)]
    block_bytes: u64,
}

/// Options every form takes.
#[derive(Args)]
struct Common {
    /// Codec of every field (of the image and other bytes fields for images and webdataset).
    #[arg(long, value_enum, default_value_t = CodecArg::Raw)]
    codec: CodecArg,
    /// zstd level of `--codec zstd` and `zstd-dict`: 1 (fastest) to 19.
    #[arg(long, value_name = "LEVEL", default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=19))]
    zstd_level: i32,
    /// Chunk size (plain bytes or K, M, G with binary multiples: 64M, 256MiB, 1GiB).
    #[arg(long, value_name = "BYTES", value_parser = parse_size, default_value_t = DEFAULT_CHUNK_SIZE_BYTES)]
    chunk_size: u64,
    /// Threads reading and decoding ahead of the dataset's writer, and append tasks of the
    /// writer (deflate, checksums and writes, each task into its own chunk), 1-4 of each.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=4))]
    writers: u8,
}

/// Options of the image forms.
#[derive(Args)]
struct ImageOptions {
    /// Store images whose longer side is over N pixels scaled down to N, as JPEG (smaller ones
    /// as they are).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=16384))]
    max_side: Option<u32>,
    /// JPEG quality of images scaled by --max-side.
    #[arg(long, value_name = "Q", default_value_t = 90, value_parser = clap::value_parser!(u8).range(1..=100))]
    quality: u8,
    /// Skip files that are not readable images (a warning each) instead of stopping.
    #[arg(long)]
    skip_bad: bool,
    /// Inputs between two commits (points an interrupted run resumes from).
    #[arg(long, value_name = "N", default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..))]
    commit_every: u64,
}

#[derive(Args)]
struct ImagesArgs {
    /// The folder of class folders (DIR/<class>/**/*.{jpg,jpeg,png,webp}).
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    /// The dataset directory to create: it must not exist, or be an empty directory.
    #[arg(value_name = "OUT")]
    out: PathBuf,
    /// Store the images in an order shuffled by this seed instead of class by class.
    #[arg(long, value_name = "SEED")]
    shuffle: Option<u64>,
    #[command(flatten)]
    image: ImageOptions,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct WebDatasetArgs {
    /// Tar shards (quote a pattern with * or ? to have zrecord expand it, sorted), then the
    /// dataset directory to create.
    #[arg(required = true, num_args = 2.., value_name = "SHARDS... OUT")]
    paths: Vec<PathBuf>,
    #[command(flatten)]
    image: ImageOptions,
    #[command(flatten)]
    common: Common,
}

/// What clap cannot check of the arguments (exit status 2, as its own usage errors).
pub fn usage_error(a: &ConvertArgs) -> Option<String> {
    match &a.form {
        None if a.npy.out.is_none() => Some(
            "the .npy form without its name needs --out DIR (or use `convert npy IN.npy... OUT`)"
                .to_string(),
        ),
        Some(Form::Npy(n)) if n.out.is_none() && n.inputs.len() < 2 => {
            Some("give the .npy inputs and then the output (or --out DIR)".to_string())
        }
        _ => None,
    }
}

/// Runs `zrecord convert`.
pub fn run(a: &ConvertArgs) -> Res {
    match &a.form {
        None => npy(&a.npy),
        Some(Form::Npy(n)) => npy(n),
        Some(Form::Images(i)) => images(i),
        Some(Form::Webdataset(w)) => webdataset(w),
    }
}

fn usage(reason: &str) -> Error {
    Error::InvalidConfig {
        reason: reason.to_string(),
    }
}

fn npy(a: &NpyArgs) -> Res {
    let (inputs, out) = match &a.out {
        Some(out) => (&a.inputs[..], out.clone()),
        None => match a.inputs.split_last() {
            Some((out, inputs)) if !inputs.is_empty() => (inputs, out.clone()),
            _ => {
                return Err(usage("give the .npy inputs and then the output (or --out DIR)").into())
            }
        },
    };
    if !a.fields.is_empty() && a.fields.len() != inputs.len() {
        return Err(Error::InvalidConfig {
            reason: format!(
                "{} --field names for {} inputs: give one name per input, or none",
                a.fields.len(),
                inputs.len()
            ),
        }
        .into());
    }
    let c = &a.common;
    let bar = progress::bytes_bar(0, "convert");
    let report = NpyConvert::new(inputs, &out)
        .field_names(a.fields.iter().cloned())
        .codec(c.codec.codec(c.zstd_level))
        .chunk_size_bytes(c.chunk_size)
        .num_writers(usize::from(c.writers))
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

fn images(a: &ImagesArgs) -> Res {
    let (c, o) = (&a.common, &a.image);
    let bar = progress::records_bar(0, "convert");
    let mut conv = ImagesConvert::new(&a.dir, &a.out)
        .codec(c.codec.codec(c.zstd_level))
        .chunk_size_bytes(c.chunk_size)
        .num_threads(usize::from(c.writers))
        .quality(o.quality)
        .skip_bad(o.skip_bad)
        .commit_every(o.commit_every)
        .on_progress(|p| {
            bar.set_length(p.rows_total);
            bar.set_position(p.rows_done);
        });
    if let Some(s) = o.max_side {
        conv = conv.max_side(s);
    }
    if let Some(seed) = a.shuffle {
        conv = conv.shuffle(seed);
    }
    let report = conv.run();
    bar.finish_and_clear();
    summary(&report?, "images");
    Ok(())
}

fn webdataset(a: &WebDatasetArgs) -> Res {
    let (c, o) = (&a.common, &a.image);
    let Some((out, patterns)) = a.paths.split_last() else {
        return Err(usage("give the shards and then the output").into());
    };
    let mut shards = Vec::new();
    for p in patterns {
        shards.extend(expand(p)?);
    }
    let bar = progress::records_bar(0, "convert");
    let mut conv = WebDatasetConvert::new(&shards, out)
        .codec(c.codec.codec(c.zstd_level))
        .chunk_size_bytes(c.chunk_size)
        .num_threads(usize::from(c.writers))
        .quality(o.quality)
        .skip_bad(o.skip_bad)
        .commit_every(o.commit_every)
        .on_progress(|p| {
            bar.set_length(p.rows_total);
            bar.set_position(p.rows_done);
        });
    if let Some(s) = o.max_side {
        conv = conv.max_side(s);
    }
    let report = conv.run();
    bar.finish_and_clear();
    summary(&report?, "samples");
    Ok(())
}

fn summary(r: &ConvertReport, what: &str) {
    let secs = r.elapsed.as_secs_f64();
    let mut extra = String::new();
    if r.resumed > 0 {
        extra.push_str(&format!(", resumed after {}", r.resumed));
    }
    if r.skipped > 0 {
        extra.push_str(&format!(", {} skipped", r.skipped));
    }
    println!(
        "converted {} {what} × {} field(s) ({} input bytes) into {} in {secs:.2} s{extra}",
        r.rows,
        r.fields,
        r.bytes,
        r.out.display(),
    );
}

/// `pattern` as the sorted list of files it matches (`*` and `?` in its last component), or
/// itself if it has neither.
fn expand(pattern: &Path) -> Result<Vec<PathBuf>, Error> {
    let name = pattern
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !name.contains(['*', '?']) {
        return Ok(vec![pattern.to_path_buf()]);
    }
    let dir = match pattern.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if dir.to_string_lossy().contains(['*', '?']) {
        return Err(usage(&format!(
            "{}: wildcards only in the file name, not in directories",
            pattern.display()
        )));
    }
    let rd = std::fs::read_dir(&dir).map_err(|e| Error::Io {
        path: dir.clone(),
        op: "list directory",
        source: e,
    })?;
    let mut out: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .filter(|e| wildcard(name.as_bytes(), e.file_name().to_string_lossy().as_bytes()))
        .map(|e| dir.join(e.file_name()))
        .collect();
    out.sort();
    if out.is_empty() {
        return Err(usage(&format!("no file matches {}", pattern.display())));
    }
    Ok(out)
}

/// True if `name` matches `pattern` (`*`: any run, `?`: any one byte).
fn wildcard(pattern: &[u8], name: &[u8]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some((b'*', rest)) => {
            (0..=name.len()).any(|k| name.get(k..).is_some_and(|n| wildcard(rest, n)))
        }
        Some((b'?', rest)) => name.split_first().is_some_and(|(_, n)| wildcard(rest, n)),
        Some((c, rest)) => name
            .split_first()
            .is_some_and(|(d, n)| c == d && wildcard(rest, n)),
    }
}

#[cfg(test)]
mod tests {
    use super::wildcard;

    #[test]
    fn wildcards_match_runs_and_single_bytes() {
        assert!(wildcard(b"shard-*.tar", b"shard-000.tar"));
        assert!(wildcard(b"shard-??.tar", b"shard-01.tar"));
        assert!(!wildcard(b"shard-??.tar", b"shard-001.tar"));
        assert!(!wildcard(b"*.tar", b"x.tar.gz"));
        assert!(wildcard(b"*", b""));
    }
}
