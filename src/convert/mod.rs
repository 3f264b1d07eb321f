//! Files → a new dataset: the library side of `zrecord convert`, for programs that convert
//! without the command-line tool.
//!
//! | converter | input | records |
//! |---|---|---|
//! | [`NpyConvert`] | `.npy` files, one per field | one per row (axis 0) |
//! | `ImagesConvert` (feature `images`) | a folder of class folders of JPEG/PNG/WebP files | one per image: `image` bytes, `label` index; class names in attribute `classes` |
//! | `WebDatasetConvert` (feature `images`) | WebDataset tar shards | one per sample: a field per extension |
//!
//! Each builds the dataset in a hidden sibling of the output and renames it into place after
//! its last commit, so the output appears whole or not at all. The image and WebDataset
//! converters are also resumable: they commit every few thousand records into a hidden
//! directory named after the output (`.NAME.zrecord-convert`), each commit recording how far
//! through the inputs it is, and a run with the same inputs and options continues from the last
//! commit of an interrupted one (see `ImagesConvert::run`).

#[cfg(feature = "images")]
mod images;
mod npy;
#[cfg(feature = "images")]
mod records;
#[cfg(feature = "images")]
mod webdataset;

#[cfg(feature = "images")]
pub use images::ImagesConvert;
pub use npy::{NpyConvert, NpyError, NpyErrorKind, DEFAULT_BLOCK_BYTES};
#[cfg(feature = "images")]
pub use webdataset::WebDatasetConvert;

use crate::error::{Error, Result};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How far a conversion is, passed to its `on_progress` callback (e.g.
/// [`NpyConvert::on_progress`]) after each block of records is appended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConvertProgress {
    /// Rows (records, or input samples of an image or WebDataset conversion, skipped ones and
    /// those of an earlier interrupted run included) done so far.
    pub rows_done: u64,
    /// Rows in every input.
    pub rows_total: u64,
    /// Bytes appended so far (all fields; by this run).
    pub bytes_done: u64,
    /// Data bytes of every input together (an estimate for images scaled down).
    pub bytes_total: u64,
}

/// What a finished conversion wrote.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ConvertReport {
    /// The dataset created.
    pub out: PathBuf,
    /// Records written (rows of each input; images or samples).
    pub rows: u64,
    /// Fields (one per input of an `.npy` conversion).
    pub fields: usize,
    /// Inputs skipped as unreadable images (only with `skip_bad`).
    pub skipped: u64,
    /// Rows an earlier, interrupted run of the same conversion had committed, which this run
    /// kept and did not convert again (0 for a fresh start).
    pub resumed: u64,
    /// Data bytes of every input together.
    pub bytes: u64,
    /// Wall time from the first check to the rename into place.
    pub elapsed: Duration,
}

type ProgressFn<'a> = Box<dyn FnMut(ConvertProgress) + Send + 'a>;

/// True if `path` exists and is not an empty directory.
pub(super) fn occupied(path: &Path) -> bool {
    match std::fs::read_dir(path) {
        Ok(mut rd) => rd.next().is_some(),
        Err(_) => path.exists() || path.symlink_metadata().is_ok(),
    }
}

/// A hidden sibling of `out` to build in, so the final rename is atomic (same file system).
pub(super) fn staging_dir(out: &Path) -> Result<PathBuf> {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| Error::InvalidConfig {
            reason: format!("output {} has no directory name", out.display()),
        })?;
    Ok(parent_dir(out).join(format!(".{name}.zrecord-convert-{}", std::process::id())))
}

/// The directory `out` is created in.
pub(super) fn parent_dir(out: &Path) -> PathBuf {
    match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Renames the committed dataset onto `out` (replacing an empty directory) and syncs the
/// parent directory.
pub(super) fn publish(tmp: &Path, out: &Path) -> Result<()> {
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
