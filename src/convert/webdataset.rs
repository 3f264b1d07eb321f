//! WebDataset tar shards → a new dataset: [`WebDatasetConvert`].

use super::images::IMAGE_EXTENSIONS;
use super::records::{self, Job, Source, DEFAULT_COMMIT_EVERY};
use super::{ConvertProgress, ConvertReport, ProgressFn};
use crate::error::{Error, Result};
use crate::hash::{fnv, hash};
use crate::store::schema::DEFAULT_CHUNK_SIZE_BYTES;
use crate::transform::image::Prepare;
use crate::{Codec, DType, Field, Schema, MAX_RECORD_BYTES};
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The most fields (distinct extensions) a conversion takes.
const MAX_FIELDS: usize = 256;

/// The longest `cls` member parsed as an integer.
const MAX_INT_BYTES: u64 = 32;

/// Converts WebDataset shards (tar files) into a new dataset: one record per sample, one field
/// per extension.
///
/// A member's **key** is its path up to the first dot of its file name, its **extension** the
/// rest (`train/000017.seg.png`: key `train/000017`, extension `seg.png`); consecutive members
/// with one key are one sample, and samples are stored in shard order, then tar order. Each
/// extension seen in any shard becomes a field named after it (characters other than
/// `A-Z a-z 0-9 _ -` become `_`: `seg.png` → `seg_png`), of dtype `bytes` holding the member's
/// bytes, except `cls`, which is `i64` of shape `[]` when every `cls` member is a decimal
/// integer (surrounding whitespace allowed), as WebDataset's class labels are. A sample without
/// some extension has that field absent (empty). Members without an extension, directories
/// and links are ignored.
///
/// Members whose extension ends in `jpg`, `jpeg` or `png` are checked as images (format
/// sniffed, header read) and scaled with [`WebDatasetConvert::max_side`]; one that is not a
/// readable image is [`Error::NotAnImage`] naming the shard and member, or skipped with the
/// rest of its sample under [`WebDatasetConvert::skip_bad`].
///
/// Every shard's member list is read first (headers only; `cls` members also read, to decide
/// their dtype), so problems of structure are found before anything is written. It is kept in
/// memory: 16 bytes per member and 8 per sample (about 50 MB for ImageNet's 1.28 million
/// two-member samples); the samples themselves are read with positioned reads, a few blocks of
/// 32 per thread at a time.
#[must_use = "a conversion does nothing until `run` is called"]
pub struct WebDatasetConvert<'a> {
    shards: Vec<PathBuf>,
    out: PathBuf,
    codec: Codec,
    chunk_size_bytes: u64,
    num_threads: usize,
    max_side: Option<u32>,
    quality: u8,
    skip_bad: bool,
    commit_every: u64,
    progress: Option<ProgressFn<'a>>,
}

impl std::fmt::Debug for WebDatasetConvert<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebDatasetConvert")
            .field("shards", &self.shards)
            .field("out", &self.out)
            .field("codec", &self.codec)
            .field("max_side", &self.max_side)
            .field("skip_bad", &self.skip_bad)
            .finish_non_exhaustive()
    }
}

impl<'a> WebDatasetConvert<'a> {
    /// A conversion of `shards` (tar files, in this order; expand globs before) into a new
    /// dataset at `out`, which must not exist or be an empty directory.
    pub fn new<I, P>(shards: I, out: impl AsRef<Path>) -> WebDatasetConvert<'a>
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        WebDatasetConvert {
            shards: shards
                .into_iter()
                .map(|p| p.as_ref().to_path_buf())
                .collect(),
            out: out.as_ref().to_path_buf(),
            codec: Codec::Raw,
            chunk_size_bytes: DEFAULT_CHUNK_SIZE_BYTES,
            num_threads: 2,
            max_side: None,
            quality: 90,
            skip_bad: false,
            commit_every: DEFAULT_COMMIT_EVERY,
            progress: None,
        }
    }

    /// The codec of every `bytes` field. Default: [`Codec::Raw`].
    pub fn codec(mut self, codec: Codec) -> Self {
        self.codec = codec;
        self
    }

    /// The dataset's chunk size. Default: [`DEFAULT_CHUNK_SIZE_BYTES`].
    pub fn chunk_size_bytes(mut self, bytes: u64) -> Self {
        self.chunk_size_bytes = bytes;
        self
    }

    /// Threads reading and checking samples, and append tasks of the writer (at most 4).
    /// Default: 2.
    pub fn num_threads(mut self, n: usize) -> Self {
        self.num_threads = n;
        self
    }

    /// Image members whose longer side is over `side` are stored scaled down to it, as JPEG
    /// (see [`super::ImagesConvert::max_side`]). Default: none.
    pub fn max_side(mut self, side: u32) -> Self {
        self.max_side = Some(side);
        self
    }

    /// JPEG quality (1–100) of scaled images. Default: 90.
    pub fn quality(mut self, quality: u8) -> Self {
        self.quality = quality;
        self
    }

    /// Skips samples with an image member that is not a readable image (logging a warning)
    /// instead of failing with [`Error::NotAnImage`]. Default: false.
    pub fn skip_bad(mut self, skip: bool) -> Self {
        self.skip_bad = skip;
        self
    }

    /// Samples between two commits (each a point a rerun resumes from). Default: 4096.
    pub fn commit_every(mut self, samples: u64) -> Self {
        self.commit_every = samples;
        self
    }

    /// Calls `f` on the calling thread after each block of samples is appended.
    pub fn on_progress(mut self, f: impl FnMut(ConvertProgress) + Send + 'a) -> Self {
        self.progress = Some(Box::new(f));
        self
    }

    /// Reads every shard's member list, then converts the samples on
    /// [`WebDatasetConvert::num_threads`] threads, commits, and renames the dataset into place.
    /// Resumable as [`super::ImagesConvert::run`] is: a rerun with the same shards (paths, in
    /// order) and options continues after the last commit of an interrupted run.
    ///
    /// # Errors
    ///
    /// [`Error::AlreadyExists`] for an output that is not empty; [`Error::Io`] naming a shard
    /// that cannot be read; [`Error::BadShard`] for a shard that is not a tar archive or whose
    /// members do not fit a dataset; [`Error::NotAnImage`] naming shard and member;
    /// [`Error::RecordTooLarge`]; [`Error::InvalidConfig`] for no shards or samples, bad
    /// options, or a build directory of another conversion; any error of the
    /// [`crate::Writer`].
    pub fn run(self) -> Result<ConvertReport> {
        let start = Instant::now();
        if super::occupied(&self.out) {
            return Err(Error::AlreadyExists { path: self.out });
        }
        if self.shards.is_empty() {
            return Err(Error::InvalidConfig {
                reason: "no shards to convert".to_string(),
            });
        }
        let mut scan = Scan::default();
        for (k, shard) in self.shards.iter().enumerate() {
            scan.shard(k, shard)?;
        }
        let samples = scan.sample_start.len().saturating_sub(1);
        if samples == 0 {
            return Err(Error::InvalidConfig {
                reason: format!("no samples in {} shard(s)", self.shards.len()),
            });
        }
        let plan = scan.plan()?;
        let mut schema = Schema::new().chunk_size_bytes(self.chunk_size_bytes);
        for f in &plan {
            let field = match f.kind {
                Kind::Int => Field::new(f.name.clone(), DType::I64).shape(Vec::new()),
                Kind::Bytes | Kind::Image => {
                    Field::new(f.name.clone(), DType::Bytes).codec(self.codec)
                }
            };
            schema = schema.field(field);
        }
        schema.validate()?;
        let fingerprint = self.fingerprint(&plan);
        let mut progress = self.progress;
        let mut no_progress = |_: ConvertProgress| {};
        let report: &mut dyn FnMut(ConvertProgress) = match progress.as_mut() {
            Some(f) => f,
            None => &mut no_progress,
        };
        let bytes_total = scan.bytes;
        let fields = plan.len();
        let source = Samples {
            shards: self.shards.clone(),
            scan,
            plan,
            prepare: Prepare {
                max_side: self.max_side,
                quality: self.quality,
            },
            skip_bad: self.skip_bad,
        };
        let job = Job {
            out: self.out.clone(),
            schema,
            attributes: BTreeMap::new(),
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
            fields,
            bytes: bytes_total,
            skipped: done.skipped,
            resumed: done.resumed,
            elapsed: start.elapsed(),
        })
    }

    fn fingerprint(&self, plan: &[PlanField]) -> u64 {
        let mut words = vec![
            fnv("webdataset"),
            fnv(&format!(
                "{:?} {} {:?} {} {}",
                self.codec, self.chunk_size_bytes, self.max_side, self.quality, self.skip_bad
            )),
        ];
        words.extend(self.shards.iter().map(|s| fnv(&s.to_string_lossy())));
        words.extend(plan.iter().map(|f| fnv(&f.name) ^ f.kind as u64));
        hash(&words)
    }
}

/// How a field's members are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Bytes,
    Image,
    Int,
}

/// A field of the dataset: its extension, name and kind.
struct PlanField {
    ext: String,
    name: String,
    kind: Kind,
}

/// A member's bytes in its shard, and its field (an index into the scan's extensions).
#[derive(Clone, Copy)]
struct Member {
    offset: u64,
    len: u32,
    field: u16,
}

/// Every shard's samples: where their members are.
#[derive(Default)]
struct Scan {
    /// Extensions in the order first seen.
    exts: Vec<String>,
    ext_index: HashMap<String, u16>,
    /// Whether every member of the extension parsed as an integer so far.
    ints: Vec<bool>,
    members: Vec<Member>,
    /// Sample `s` is `members[sample_start[s]..sample_start[s + 1]]` (one extra at the end).
    sample_start: Vec<u64>,
    /// Shard `k` holds samples `shard_start[k]..shard_start[k + 1]`.
    shard_start: Vec<u64>,
    bytes: u64,
}

/// Splits a member path into key and extension at the first dot of its file name.
fn split_key(path: &str) -> Option<(&str, &str)> {
    let base = path.rfind('/').map_or(0, |i| i + 1);
    let dot = base + path.get(base..)?.find('.')?;
    let key = path.get(..dot)?;
    let ext = path.get(dot + 1..)?;
    (dot > base && !ext.is_empty()).then_some((key, ext))
}

impl Scan {
    /// Reads the member list of shard `k` at `path`.
    fn shard(&mut self, k: usize, path: &Path) -> Result<()> {
        let bad = |member: Option<String>, reason: String| Error::BadShard {
            path: path.to_path_buf(),
            member,
            reason,
        };
        let file = File::open(path).map_err(|e| Error::io(path, "open", e))?;
        self.shard_start.push(self.samples());
        if k == 0 {
            self.sample_start.push(0);
        }
        let mut archive = tar::Archive::new(file);
        let entries = archive
            .entries_with_seek()
            .map_err(|e| bad(None, format!("not a tar archive: {e}")))?;
        let mut key = String::new();
        let mut seen: Vec<u16> = Vec::new();
        for entry in entries {
            let mut entry = entry.map_err(|e| bad(None, format!("bad tar header: {e}")))?;
            if !entry.header().entry_type().is_file() {
                continue;
            }
            let name = entry
                .path()
                .map_err(|e| bad(None, format!("bad member name: {e}")))?
                .to_string_lossy()
                .into_owned();
            let Some((k_, ext)) = split_key(&name) else {
                tracing::debug!(shard = %path.display(), member = %name, "member without an extension ignored");
                continue;
            };
            if k_ != key || seen.is_empty() {
                if !seen.is_empty() {
                    self.sample_start.push(self.members.len() as u64);
                }
                key = k_.to_string();
                seen.clear();
            }
            let field = match self.ext_index.get(ext) {
                Some(&f) => f,
                None => {
                    if self.exts.len() >= MAX_FIELDS {
                        return Err(bad(
                            Some(name.clone()),
                            format!("more than {MAX_FIELDS} extensions"),
                        ));
                    }
                    let f = self.exts.len() as u16;
                    self.exts.push(ext.to_string());
                    self.ext_index.insert(ext.to_string(), f);
                    self.ints.push(true);
                    f
                }
            };
            if seen.contains(&field) {
                return Err(bad(
                    Some(name.clone()),
                    format!("a second .{ext} member in sample {key:?}"),
                ));
            }
            seen.push(field);
            let size = entry.size();
            if size > MAX_RECORD_BYTES {
                return Err(Error::RecordTooLarge {
                    field: ext.to_string(),
                    len: size,
                    max: MAX_RECORD_BYTES,
                });
            }
            let offset = entry.raw_file_position();
            if ext == "cls" && self.ints.get(usize::from(field)) == Some(&true) {
                let mut text = String::new();
                let is_int = size <= MAX_INT_BYTES
                    && entry.read_to_string(&mut text).is_ok()
                    && text.trim().parse::<i64>().is_ok();
                if let Some(slot) = self.ints.get_mut(usize::from(field)) {
                    *slot = is_int;
                }
            }
            self.members.push(Member {
                offset,
                len: size as u32,
                field,
            });
            self.bytes += size;
        }
        if !seen.is_empty() {
            self.sample_start.push(self.members.len() as u64);
        }
        Ok(())
    }

    /// Samples found so far.
    fn samples(&self) -> u64 {
        self.sample_start.len().saturating_sub(1) as u64
    }

    /// The fields, sorted by name, with members renumbered to match.
    fn plan(&mut self) -> Result<Vec<PlanField>> {
        self.shard_start.push(self.samples());
        let mut plan: Vec<(usize, PlanField)> = self
            .exts
            .iter()
            .enumerate()
            .map(|(i, ext)| {
                let name: String = ext
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                            c
                        } else {
                            '_'
                        }
                    })
                    .collect();
                let lower = ext.to_ascii_lowercase();
                let kind = if ext == "cls" && self.ints.get(i) == Some(&true) {
                    Kind::Int
                } else if IMAGE_EXTENSIONS.iter().any(|e| lower.ends_with(e)) {
                    Kind::Image
                } else {
                    Kind::Bytes
                };
                (
                    i,
                    PlanField {
                        ext: ext.clone(),
                        name,
                        kind,
                    },
                )
            })
            .collect();
        plan.sort_by(|a, b| a.1.name.cmp(&b.1.name));
        for w in plan.windows(2) {
            if let [(_, a), (_, b)] = w {
                if a.name == b.name {
                    return Err(Error::InvalidConfig {
                        reason: format!(
                            "extensions .{} and .{} would both be field {:?}",
                            a.ext, b.ext, a.name
                        ),
                    });
                }
            }
        }
        let mut renumber = vec![0u16; plan.len()];
        for (new, (old, _)) in plan.iter().enumerate() {
            if let Some(slot) = renumber.get_mut(*old) {
                *slot = new as u16;
            }
        }
        for m in &mut self.members {
            m.field = renumber.get(usize::from(m.field)).copied().unwrap_or(0);
        }
        Ok(plan.into_iter().map(|(_, f)| f).collect())
    }
}

/// The samples as the record pipeline sees them.
struct Samples {
    shards: Vec<PathBuf>,
    scan: Scan,
    plan: Vec<PlanField>,
    prepare: Prepare,
    skip_bad: bool,
}

/// The name of the member of `shard` whose data starts at `offset` (for an error message).
fn member_at(shard: &Path, offset: u64) -> Option<String> {
    let mut archive = tar::Archive::new(File::open(shard).ok()?);
    for entry in archive.entries_with_seek().ok()? {
        let entry = entry.ok()?;
        if entry.raw_file_position() == offset {
            return Some(entry.path().ok()?.to_string_lossy().into_owned());
        }
    }
    None
}

impl Source for Samples {
    fn len(&self) -> u64 {
        self.scan.samples()
    }

    fn record(&self, index: u64, out: &mut [Vec<u8>]) -> Result<bool> {
        let s = usize::try_from(index).unwrap_or(usize::MAX);
        let range = match (
            self.scan.sample_start.get(s),
            self.scan.sample_start.get(s + 1),
        ) {
            (Some(&a), Some(&b)) => a as usize..b as usize,
            _ => return Ok(false),
        };
        let k = self
            .scan
            .shard_start
            .partition_point(|&start| start <= index);
        let Some(path) = k.checked_sub(1).and_then(|k| self.shards.get(k)) else {
            return Ok(false);
        };
        let file = File::open(path).map_err(|e| Error::io(path, "open", e))?;
        for v in out.iter_mut() {
            v.clear();
        }
        for m in self.scan.members.get(range).unwrap_or_default() {
            let mut bytes = vec![0u8; m.len as usize];
            file.read_exact_at(&mut bytes, m.offset)
                .map_err(|e| Error::io(path, "read", e))?;
            let (Some(field), Some(slot)) = (
                self.plan.get(usize::from(m.field)),
                out.get_mut(usize::from(m.field)),
            ) else {
                continue;
            };
            *slot = match field.kind {
                Kind::Bytes => bytes,
                Kind::Int => {
                    let v = std::str::from_utf8(&bytes)
                        .ok()
                        .and_then(|t| t.trim().parse::<i64>().ok())
                        .ok_or_else(|| Error::BadShard {
                            path: path.clone(),
                            member: member_at(path, m.offset),
                            reason: "a .cls member changed since it was read".to_string(),
                        })?;
                    v.to_le_bytes().to_vec()
                }
                Kind::Image => match self.prepare.apply(bytes) {
                    Ok(b) => b,
                    Err(reason) if self.skip_bad => {
                        tracing::warn!(shard = %path.display(), member = ?member_at(path, m.offset), %reason, "skipping a sample whose image is not readable");
                        return Ok(false);
                    }
                    Err(reason) => {
                        return Err(Error::NotAnImage {
                            path: path.clone(),
                            member: member_at(path, m.offset),
                            reason,
                        })
                    }
                },
            };
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::split_key;

    #[test]
    fn keys_end_at_the_first_dot_of_the_file_name() {
        assert_eq!(split_key("a/b.c/x.seg.png"), Some(("a/b.c/x", "seg.png")));
        assert_eq!(split_key("000017.jpg"), Some(("000017", "jpg")));
        assert_eq!(split_key("noext"), None);
        assert_eq!(split_key("dir/.hidden"), None);
        assert_eq!(split_key("x."), None);
    }
}
