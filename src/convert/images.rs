//! A folder of class folders of images → a new dataset: [`ImagesConvert`].

use super::records::{self, Job, Source, DEFAULT_COMMIT_EVERY};
use super::{ConvertProgress, ConvertReport, ProgressFn};
use crate::error::{Error, Result};
use crate::hash::{fnv, hash, reduce};
use crate::store::schema::DEFAULT_CHUNK_SIZE_BYTES;
use crate::transform::image::Prepare;
use crate::{Codec, DType, Field, Schema, MAX_RECORD_BYTES};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// File extensions taken as images (compared without case).
pub(super) const IMAGE_EXTENSIONS: [&str; 4] = ["jpg", "jpeg", "png", "webp"];

/// Default JPEG quality of images scaled down by `max_side`.
const DEFAULT_QUALITY: u8 = 90;

/// Converts a folder of class folders (`DIR/<class>/**/*.{jpg,jpeg,png,webp}`, as torchvision's
/// `ImageFolder` reads) into a new dataset of two fields: `image` (`bytes`, the file's bytes,
/// or a scaled-down JPEG with [`ImagesConvert::max_side`]) and `label` (`i64`, shape `[]`: the
/// class's index). Classes are the sub-folders of `DIR` sorted by name (byte order), numbered
/// from 0, and stored as the dataset attribute `classes`, a JSON list of their names. Images
/// are in class order, and within a class sorted by path, unless [`ImagesConvert::shuffle`].
///
/// Files whose extension is not `jpg`, `jpeg` or `png` (any case) are ignored, and so are files
/// directly in `DIR`. Every image is checked: its format sniffed (JPEG or PNG) and its header
/// read. One that fails is [`Error::NotAnImage`] naming the file (or, with
/// [`ImagesConvert::skip_bad`], skipped with a warning in the log and counted in
/// [`ConvertReport::skipped`]).
///
/// ```
/// use zrecord::convert::ImagesConvert;
/// use zrecord::Dataset;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let tmp = tempfile::tempdir()?;
/// let root = tmp.path().join("train");
/// for class in ["cat", "dog"] {
///     std::fs::create_dir_all(root.join(class))?;
/// }
/// // A 4×4 grey JPEG (any JPEG or PNG file will do).
/// let mut jpeg = Vec::new();
/// jpeg_encoder::Encoder::new(&mut jpeg, 90).encode(&[128; 16], 4, 4, jpeg_encoder::ColorType::Luma)?;
/// std::fs::write(root.join("cat/a.jpg"), &jpeg)?;
/// std::fs::write(root.join("dog/b.JPEG"), &jpeg)?;
///
/// let out = tmp.path().join("train.zr");
/// let report = ImagesConvert::new(&root, &out).run()?;
/// assert_eq!(report.rows, 2);
/// let ds = Dataset::open(&out)?;
/// assert_eq!(ds.attributes()["classes"], serde_json::json!(["cat", "dog"]));
/// assert_eq!(ds.gather_blocking(&[1])?.typed::<i64>(0, 1)?, &[1]);
/// # Ok(())
/// # }
/// ```
#[must_use = "a conversion does nothing until `run` is called"]
pub struct ImagesConvert<'a> {
    dir: PathBuf,
    out: PathBuf,
    codec: Codec,
    chunk_size_bytes: u64,
    num_threads: usize,
    max_side: Option<u32>,
    quality: u8,
    skip_bad: bool,
    shuffle: Option<u64>,
    commit_every: u64,
    progress: Option<ProgressFn<'a>>,
}

impl std::fmt::Debug for ImagesConvert<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImagesConvert")
            .field("dir", &self.dir)
            .field("out", &self.out)
            .field("codec", &self.codec)
            .field("max_side", &self.max_side)
            .field("skip_bad", &self.skip_bad)
            .field("shuffle", &self.shuffle)
            .finish_non_exhaustive()
    }
}

impl<'a> ImagesConvert<'a> {
    /// A conversion of the class folders in `dir` into a new dataset at `out`, which must not
    /// exist or be an empty directory; missing parent directories are created.
    pub fn new(dir: impl AsRef<Path>, out: impl AsRef<Path>) -> ImagesConvert<'a> {
        ImagesConvert {
            dir: dir.as_ref().to_path_buf(),
            out: out.as_ref().to_path_buf(),
            codec: Codec::Raw,
            chunk_size_bytes: DEFAULT_CHUNK_SIZE_BYTES,
            num_threads: 2,
            max_side: None,
            quality: DEFAULT_QUALITY,
            skip_bad: false,
            shuffle: None,
            commit_every: DEFAULT_COMMIT_EVERY,
            progress: None,
        }
    }

    /// The codec of the `image` field. Default: [`Codec::Raw`] (JPEG and PNG are compressed
    /// already).
    pub fn codec(mut self, codec: Codec) -> Self {
        self.codec = codec;
        self
    }

    /// The dataset's chunk size. Default: [`DEFAULT_CHUNK_SIZE_BYTES`].
    pub fn chunk_size_bytes(mut self, bytes: u64) -> Self {
        self.chunk_size_bytes = bytes;
        self
    }

    /// Threads reading and checking images, and append tasks of the writer (at most 4).
    /// Default: 2.
    pub fn num_threads(mut self, n: usize) -> Self {
        self.num_threads = n;
        self
    }

    /// Stores every image whose longer side is over `side` pixels scaled down to it (aspect
    /// ratio kept, bilinear with antialiasing) and re-encoded as JPEG at
    /// [`ImagesConvert::quality`]; smaller images are stored as they are. Default: none (every
    /// file as it is).
    pub fn max_side(mut self, side: u32) -> Self {
        self.max_side = Some(side);
        self
    }

    /// JPEG quality (1–100) of images scaled down by [`ImagesConvert::max_side`]. Default: 90.
    pub fn quality(mut self, quality: u8) -> Self {
        self.quality = quality;
        self
    }

    /// Skips files that are not readable images (logging a warning for each) instead of
    /// failing with [`Error::NotAnImage`]. Default: false.
    pub fn skip_bad(mut self, skip: bool) -> Self {
        self.skip_bad = skip;
        self
    }

    /// Stores the images in an order shuffled by `seed` (the same seed, the same order)
    /// instead of class by class. Default: none.
    pub fn shuffle(mut self, seed: u64) -> Self {
        self.shuffle = Some(seed);
        self
    }

    /// Images between two commits (each a point a rerun resumes from). Default: 4096.
    pub fn commit_every(mut self, images: u64) -> Self {
        self.commit_every = images;
        self
    }

    /// Calls `f` on the calling thread after each block of images is appended. Default: none.
    pub fn on_progress(mut self, f: impl FnMut(ConvertProgress) + Send + 'a) -> Self {
        self.progress = Some(Box::new(f));
        self
    }

    /// Lists the classes and images, then converts them on [`ImagesConvert::num_threads`]
    /// threads, commits, and renames the dataset into place.
    ///
    /// **Resume.** The dataset is built in `.NAME.zrecord-convert` beside the output, with a
    /// commit every [`ImagesConvert::commit_every`] images. If the process is killed, or the
    /// run fails (an unreadable image, a full disk), that directory stays; running the same
    /// conversion again (same folder listing, same options) continues after its last commit
    /// instead of starting over. A run that finds it left by a conversion of other inputs or
    /// options refuses ([`Error::InvalidConfig`] naming it): remove it to start over.
    ///
    /// # Errors
    ///
    /// [`Error::AlreadyExists`] for an output that is not empty; [`Error::Io`] naming a file or
    /// folder that cannot be read; [`Error::NotAnImage`] naming a file that is not a readable
    /// JPEG or PNG (unless skipped); [`Error::RecordTooLarge`] for an image over the record
    /// limit; [`Error::InvalidConfig`] for a folder without classes or images, bad options, or
    /// a build directory of another conversion; any error of the [`crate::Writer`].
    pub fn run(self) -> Result<ConvertReport> {
        let start = Instant::now();
        if self.occupied() {
            return Err(Error::AlreadyExists { path: self.out });
        }
        let (classes, mut files) = list(&self.dir)?;
        if let Some(seed) = self.shuffle {
            shuffle(&mut files, seed);
        }
        let bytes_total = files.iter().map(|f| f.bytes).sum();
        let schema = Schema::new()
            .chunk_size_bytes(self.chunk_size_bytes)
            .field(Field::new("image", DType::Bytes).codec(self.codec))
            .field(Field::new("label", DType::I64).shape(Vec::new()));
        schema.validate()?;
        let fingerprint = self.fingerprint(&classes, &files);
        let mut attributes = std::collections::BTreeMap::new();
        attributes.insert("classes".to_string(), serde_json::json!(classes));
        let mut progress = self.progress;
        let mut no_progress = |_: ConvertProgress| {};
        let report: &mut dyn FnMut(ConvertProgress) = match progress.as_mut() {
            Some(f) => f,
            None => &mut no_progress,
        };
        let source = Images {
            files,
            prepare: Prepare {
                max_side: self.max_side,
                quality: self.quality,
            },
            skip_bad: self.skip_bad,
        };
        let job = Job {
            out: self.out.clone(),
            schema,
            attributes,
            fingerprint,
            threads: self.num_threads,
            commit_every: self.commit_every,
            bytes_total,
            progress: report,
        };
        let done = records::run(job, &source)?;
        Ok(ConvertReport {
            out: self.out,
            rows: done.records,
            fields: 2,
            bytes: bytes_total,
            skipped: done.skipped,
            resumed: done.resumed,
            elapsed: start.elapsed(),
        })
    }

    fn occupied(&self) -> bool {
        super::occupied(&self.out)
    }

    /// A hash of what decides the records: the listing and every option that changes them.
    fn fingerprint(&self, classes: &[String], files: &[Image]) -> u64 {
        let mut words = vec![
            fnv("images"),
            fnv(&format!(
                "{:?} {} {:?} {} {} {:?}",
                self.codec,
                self.chunk_size_bytes,
                self.max_side,
                self.quality,
                self.skip_bad,
                self.shuffle
            )),
        ];
        words.extend(classes.iter().map(|c| fnv(c)));
        words.extend(
            files
                .iter()
                .map(|f| fnv(&f.path.to_string_lossy()) ^ f.label.rotate_left(32) as u64),
        );
        hash(&words)
    }
}

/// One image to convert.
struct Image {
    path: PathBuf,
    label: i64,
    bytes: u64,
}

/// The classes of `dir` (sorted) and their images (class order, paths sorted within a class).
fn list(dir: &Path) -> Result<(Vec<String>, Vec<Image>)> {
    let mut classes = Vec::new();
    for entry in read_dir_sorted(dir)? {
        if std::fs::metadata(&entry).is_ok_and(|m| m.is_dir()) {
            classes.push(entry);
        }
    }
    if classes.is_empty() {
        return Err(Error::InvalidConfig {
            reason: format!("{} has no class folders", dir.display()),
        });
    }
    let mut names = Vec::with_capacity(classes.len());
    let mut files = Vec::new();
    for (label, class) in classes.iter().enumerate() {
        let name = class
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        names.push(name);
        let label = i64::try_from(label).unwrap_or(i64::MAX);
        walk(class, label, &mut files, 0)?;
    }
    if files.is_empty() {
        return Err(Error::InvalidConfig {
            reason: format!(
                "{} has no images ({} files) in its class folders",
                dir.display(),
                IMAGE_EXTENSIONS.join(", ")
            ),
        });
    }
    Ok((names, files))
}

/// The entries of `dir`, sorted by name.
fn read_dir_sorted(dir: &Path) -> Result<Vec<PathBuf>> {
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io(dir, "list directory", e))?;
    let mut out = rd
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| Error::io(dir, "list directory", e))?;
    out.sort();
    Ok(out)
}

/// Adds the images under `dir` (recursively, sorted by path) with `label`.
fn walk(dir: &Path, label: i64, out: &mut Vec<Image>, depth: usize) -> Result<()> {
    if depth > 64 {
        return Err(Error::InvalidConfig {
            reason: format!("{} is nested too deep (a link cycle?)", dir.display()),
        });
    }
    for path in read_dir_sorted(dir)? {
        let meta = std::fs::metadata(&path).map_err(|e| Error::io(&path, "stat", e))?;
        if meta.is_dir() {
            walk(&path, label, out, depth + 1)?;
        } else if is_image_name(&path) {
            out.push(Image {
                path,
                label,
                bytes: meta.len(),
            });
        }
    }
    Ok(())
}

/// True for a file name ending in an image extension (any case).
fn is_image_name(path: &Path) -> bool {
    path.extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .is_some_and(|e| IMAGE_EXTENSIONS.contains(&e.as_str()))
}

/// Fisher–Yates, each draw from `(seed, position)`.
fn shuffle(files: &mut [Image], seed: u64) {
    for i in (1..files.len()).rev() {
        let j = reduce(hash(&[seed, i as u64]), i as u64 + 1) as usize;
        files.swap(i, j);
    }
}

/// The images as the record pipeline sees them.
struct Images {
    files: Vec<Image>,
    prepare: Prepare,
    skip_bad: bool,
}

impl Source for Images {
    fn len(&self) -> u64 {
        self.files.len() as u64
    }

    fn record(&self, index: u64, out: &mut [Vec<u8>]) -> Result<bool> {
        let Some(image) = usize::try_from(index).ok().and_then(|i| self.files.get(i)) else {
            return Ok(false);
        };
        let bytes = std::fs::read(&image.path).map_err(|e| Error::io(&image.path, "read", e))?;
        let stored = match self.prepare.apply(bytes) {
            Ok(b) => b,
            Err(reason) if self.skip_bad => {
                tracing::warn!(path = %image.path.display(), %reason, "skipping a file that is not a readable image");
                return Ok(false);
            }
            Err(reason) => {
                return Err(Error::NotAnImage {
                    path: image.path.clone(),
                    member: None,
                    reason,
                })
            }
        };
        if stored.len() as u64 > MAX_RECORD_BYTES {
            return Err(Error::RecordTooLarge {
                field: "image".to_string(),
                len: stored.len() as u64,
                max: MAX_RECORD_BYTES,
            });
        }
        if let [img, label, ..] = out {
            *img = stored;
            label.clear();
            label.extend_from_slice(&image.label.to_le_bytes());
        }
        Ok(true)
    }
}
