//! Where a dataset lives: the [`Location`] trait a [`crate::Dataset`] reads its commits
//! through, the local directory that implements it here, and the URL schemes other locations
//! plug in with.
//!
//! A location says *what* the latest commit is (a [`Snapshot`], and a cheap check whether it
//! still is), which read backend its chunks need, and whether it can be written. How a snapshot
//! is put together from a commit's parts (its `meta.json`, its offset tables and patch logs, its
//! chunks) is [`Snapshot::assemble`]: a location fetches the parts its own way and hands them
//! over. A local directory ([`LocalDir`]) is one location; a prefix on an object store
//! (`remote/`) is another, and neither knows the other, the way object_store's `LocalFileSystem`
//! and `AmazonS3` sit side by side under `ObjectStore`.
//!
//! `store/` names no location but its own. [`crate::Dataset::open`] hands a URL
//! (`scheme://…`) to the [`UrlScheme`] the crate root lists for that scheme
//! (`crate::url_schemes` in `lib.rs`): adding a scheme (`gs://`, `az://`, a collection) is one
//! impl of [`UrlScheme`] and one line in that list.

use crate::error::{Error, Result};
use crate::store::read::ReadBackend;
use crate::store::snapshot::{meta_id, read_meta, Snapshot};
use crate::store::writer::{Writer, WriterConfig};
use std::any::Any;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where a dataset's commits, offset tables and chunks come from: a local directory, a prefix
/// on an object store, or one of yours. A [`crate::Dataset`] holds one
/// ([`crate::Dataset::from_location`]) and asks it for the latest commit on open and on
/// [`crate::Dataset::refresh`].
///
/// An implementation fetches a commit's parts its own way and builds the snapshot with
/// [`Snapshot::assemble`]; records are then read by the engine (checked against their CRC32C,
/// inflated, laid out) through the configured backend, or through
/// [`Location::read_backend`] for chunks only the location can read (objects).
///
/// Called on zrecord's threads or the caller's, never on an async runtime's worker by zrecord
/// itself; the methods may block.
pub trait Location: Any + Send + Sync + fmt::Debug {
    /// What the dataset is called: its directory, or its URL. [`crate::Dataset::path`] and
    /// [`Snapshot::dir`] report it.
    fn path(&self) -> &Path;

    /// A snapshot of the latest commit.
    ///
    /// # Errors
    /// The location's: [`Error::NotADataset`] where there is no commit, the corruption and I/O
    /// errors of the parts.
    fn snapshot(&self) -> Result<Snapshot>;

    /// Whether `current` (a snapshot this location made) still shows the latest commit: a
    /// cheap check (a `stat` and a small read, one listing), so that a refresh that finds
    /// nothing new opens nothing. Returning `false` when unsure is always correct; it costs a
    /// [`Location::snapshot`].
    ///
    /// # Errors
    /// The location's, for a check that could not be made.
    fn is_latest(&self, current: &Snapshot) -> Result<bool>;

    /// The backend the chunks of this location's snapshots must be read with (objects that
    /// only it can fetch), used instead of the configured one; `None` (the default): the
    /// backend the [`crate::ReadConfig`] names reads them.
    fn read_backend(&self) -> Option<Arc<dyn ReadBackend>> {
        None
    }

    /// Opens the dataset's single writer, where this location can be written. Default:
    /// [`Error::InvalidConfig`], read-only.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a read-only location; the writer's errors otherwise
    /// ([`Error::WriterBusy`], …).
    fn writer(&self) -> Result<Writer> {
        Err(Error::InvalidConfig {
            reason: format!("{} is read-only", self.path().display()),
        })
    }
}

/// A dataset directory on the local file system: the location of every dataset opened by path.
#[derive(Debug, Clone)]
pub struct LocalDir {
    dir: PathBuf,
}

impl LocalDir {
    /// The dataset directory `dir` (not opened until a snapshot is asked for).
    pub fn new(dir: impl Into<PathBuf>) -> LocalDir {
        LocalDir { dir: dir.into() }
    }
}

impl Location for LocalDir {
    fn path(&self) -> &Path {
        &self.dir
    }

    fn snapshot(&self) -> Result<Snapshot> {
        Snapshot::load(&self.dir)
    }

    // Every commit renames a new `meta.json` into place, so a dataset removed and created
    // again at this path is another file, even at the same generation. The identity alone
    // does not name a commit, though: a freed inode number is handed straight back (two
    // commits later `meta.json` has its old inode again) and birth times are coarse or
    // absent. The same file holding the same meta is the same commit.
    fn is_latest(&self, current: &Snapshot) -> Result<bool> {
        Ok(current.meta_id.is_some()
            && meta_id(&self.dir) == current.meta_id
            && read_meta(&self.dir)?.1 == current.meta)
    }

    fn writer(&self) -> Result<Writer> {
        Writer::open(&self.dir, WriterConfig::default())
    }
}

/// The local path `name` names, or `None` if it names a URL: the one rule by which every call
/// that takes a dataset's or collection's place as text ([`crate::Dataset::open`],
/// `zrecord::collection::commit_url` and `gc`, `zrecord::remote::is_url`, the CLI, the Python
/// package) tells a URL from a local path.
///
/// - `SCHEME://…`, where SCHEME is a URL scheme as RFC 3986 spells one (an ASCII letter, then
///   letters, digits, `+`, `-` or `.`) other than `file`, is a URL: `s3://b/p`, `gs://b/p`,
///   `az://c/p`, `abfss://c@a.dfs.core.windows.net/p`, also `http://h/p` (which is then refused
///   as a scheme zrecord does not open, not taken for a directory named `http:`).
/// - `file://PATH` is the local path PATH: `file:///data/ds` is `/data/ds`.
/// - Anything else is a local path as it stands: `data/ds`, `/data/ds`, `s3:` and `s3:/b/p` (no
///   `//`), `./a://b` and `://b` (no scheme before the `://`), `C:\data` (zrecord runs on Linux,
///   where that is a file name).
///
/// Schemes are taken as written: `S3://b/p` is a URL of the scheme `S3`, which no store opens.
pub fn local_path(name: &str) -> Option<&str> {
    match split_url(name) {
        Some(("file", path)) => Some(path),
        Some(_) => None,
        None => Some(name),
    }
}

/// The scheme and the rest of `name` if it is a URL by [`local_path`]'s rule (`("s3",
/// "bucket/prefix")` of `s3://bucket/prefix`), else `None`.
pub(crate) fn url_parts(name: &str) -> Option<(&str, &str)> {
    split_url(name).filter(|(scheme, _)| *scheme != "file")
}

/// `name` split at its first `://` if what comes before is a URL scheme (RFC 3986, section 3.1).
fn split_url(name: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = name.split_once("://")?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    let valid = first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then_some((scheme, rest))
}

/// The error for the URL `url` in a build that opens no object stores (no `remote` feature).
pub(crate) fn no_object_stores(url: &str) -> Error {
    let scheme = url_parts(url).map_or("", |(s, _)| s);
    Error::NotADataset {
        path: PathBuf::from(url),
        reason: format!(
            "this build of zrecord opens no `{scheme}://` URLs (object stores need its \
             `remote` feature: enable it)"
        ),
    }
}

/// Opens the datasets at URLs of some schemes as [`Location`]s: the seam
/// [`crate::Dataset::open`] dispatches `scheme://…` through. The crate root lists the schemes
/// this build knows (`crate::url_schemes`, in `lib.rs`: `s3://` with the `remote` feature);
/// `store/` names none of them.
pub(crate) trait UrlScheme: Sync {
    /// Whether this opens URLs of `scheme` (`"s3"`, without `://`).
    fn handles(&self, scheme: &str) -> bool;

    /// The location of the dataset at `url`, with default options (the environment's).
    fn open(&self, url: &str) -> Result<Arc<dyn Location>>;
}

/// The location of the dataset at `url` (`scheme://…`), from the first scheme of `schemes`
/// that handles it.
pub(crate) fn open_url(url: &str, schemes: &[&dyn UrlScheme]) -> Result<Arc<dyn Location>> {
    let scheme = url_parts(url).map_or("", |(s, _)| s);
    match schemes.iter().find(|s| s.handles(scheme)) {
        Some(s) => s.open(url),
        // A build without object stores: say how to get them.
        None if schemes.is_empty() => Err(no_object_stores(url)),
        None => Err(Error::InvalidConfig {
            reason: format!("{url}: the {scheme}:// scheme is not supported"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Only(&'static str);

    impl UrlScheme for Only {
        fn handles(&self, scheme: &str) -> bool {
            scheme == self.0
        }

        fn open(&self, url: &str) -> Result<Arc<dyn Location>> {
            Err(Error::InvalidConfig {
                reason: format!("opened {url}"),
            })
        }
    }

    #[test]
    fn a_url_goes_to_its_scheme_and_an_unknown_scheme_is_named() {
        let s3 = Only("s3");
        let schemes: &[&dyn UrlScheme] = &[&s3];
        let reason = |e: Error| e.to_string();
        assert!(reason(open_url("s3://b/p", schemes).unwrap_err()).contains("opened s3://b/p"));
        let e = open_url("gs://b/p", schemes).unwrap_err();
        assert!(matches!(e, Error::InvalidConfig { .. }), "{e}");
        assert!(
            e.to_string().contains("gs:// scheme is not supported"),
            "{e}"
        );
        // No scheme at all in this build: the feature that brings them is named.
        let e = open_url("s3://b/p", &[]).unwrap_err();
        assert!(matches!(e, Error::NotADataset { .. }), "{e}");
        assert!(e.to_string().contains("`remote` feature"), "{e}");
    }

    /// The one rule, case by case: what is a URL, and which local path the rest name.
    #[test]
    fn local_path_tells_a_url_from_a_path() {
        let cases: &[(&str, Option<&str>)] = &[
            // Local paths, as they stand.
            ("data/train.zr", Some("data/train.zr")),
            ("/data/train.zr", Some("/data/train.zr")),
            ("./train.zr", Some("./train.zr")),
            ("", Some("")),
            // Windows-looking names are file names on Linux.
            ("C:\\data\\train.zr", Some("C:\\data\\train.zr")),
            ("C:/data/train.zr", Some("C:/data/train.zr")),
            // No `//` after the colon: a path named so.
            ("s3:", Some("s3:")),
            ("s3:/bucket/prefix", Some("s3:/bucket/prefix")),
            ("s3:bucket", Some("s3:bucket")),
            // No scheme before the `://`: a path holding `://`.
            ("://bucket/prefix", Some("://bucket/prefix")),
            ("./a://b", Some("./a://b")),
            ("data/s3://b", Some("data/s3://b")),
            ("3d://b", Some("3d://b")),
            ("my_store://b", Some("my_store://b")),
            (" s3://b", Some(" s3://b")),
            // `file://`: the path after it.
            ("file:///data/train.zr", Some("/data/train.zr")),
            ("file://train.zr", Some("train.zr")),
            ("file://", Some("")),
            // URLs: the object stores' schemes and every other well-formed one.
            ("s3://bucket/prefix", None),
            ("s3a://bucket/prefix", None),
            ("s3://bucket", None),
            ("gs://bucket/prefix", None),
            ("az://container/prefix", None),
            ("azure://container/prefix", None),
            ("abfs://container/prefix", None),
            (
                "abfss://container@account.dfs.core.windows.net/prefix",
                None,
            ),
            ("http://host/prefix", None),
            ("https://host/prefix", None),
            ("S3://bucket/prefix", None),
            ("git+ssh://host/p", None),
            ("s3://bucket/a://b", None),
            ("FILE:///data", None),
        ];
        for &(name, want) in cases {
            assert_eq!(local_path(name), want, "{name:?}");
            assert_eq!(url_parts(name).is_none(), want.is_some(), "{name:?}");
        }
        assert_eq!(url_parts("s3://bucket/p"), Some(("s3", "bucket/p")));
        assert_eq!(url_parts("gs://b/x://y"), Some(("gs", "b/x://y")));
    }
}
