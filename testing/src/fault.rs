//! Test file systems behind the [`Vfs`] seam: a simulated one that knows what a power cut would
//! keep, and a fault-injecting wrapper that crashes or fails at a chosen operation.
//!
//! - [`SimFs`]: in-memory files and directories. Each file keeps its current bytes, its durable
//!   bytes (as of its last `fdatasync`/`fsync`) and the writes made since; each directory keeps
//!   its current entries, its durable entries (as of its last directory `fsync`) and the entry
//!   operations (link, unlink, rename) made since. [`SimFs::crash_state`] freezes all of it, and
//!   [`CrashState`] builds the post-crash images a real machine could show: unsynced writes
//!   dropped, applied, torn at 512-byte boundaries, or the file grown with zeros; directory
//!   operations durable or not (in order, per directory). It also counts open handles. A
//!   rename must stay inside one directory (`EXDEV` otherwise), as every rename of the writer
//!   does. `tests/vfs_conformance.rs` checks it answers like the real file system.
//! - [`FaultFs`]: wraps any [`Vfs`] (the simulated or the real one), numbers every operation
//!   (`0, 1, 2, …`, including reads and `stat`s), and from a chosen operation on either crashes
//!   (that operation and every later one fails without effect) or fails operations with `EIO`,
//!   `ENOSPC` or a short write, once or permanently.
//!
//! Built on zrecord's public seam only (`zrecord::testing`): it constructs `Prefix::Owned`
//! copies and zrecord's `Error::Io`/`Error::WriterBusy`, the errors the real file system gives.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use zrecord::testing::{Prefix, Vfs, VfsFile, VfsLock};
use zrecord::{Error, Result};

/// An I/O error on `path` during `op`, as zrecord's own file calls report one.
fn io_error(path: impl Into<PathBuf>, op: &'static str, source: std::io::Error) -> Error {
    Error::Io {
        path: path.into(),
        op,
        source,
    }
}

/// CRC32C of `data` continued from `crc` (zrecord's checksum, for image fingerprints).
fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    let mut d =
        crc_fast::Digest::new_with_init_state(crc_fast::CrcAlgorithm::Crc32Iscsi, u64::from(!crc));
    d.update(data);
    d.finalize() as u32
}

type Ino = usize;

/// The root directory's inode.
const ROOT: Ino = 0;

/// The granularity at which an unsynced write can be torn.
pub const SECTOR_BYTES: u64 = 512;

#[derive(Clone, Debug)]
enum Pending {
    Write { offset: u64, bytes: Vec<u8> },
    SetLen(u64),
}

#[derive(Clone, Debug, Default)]
struct FileNode {
    data: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<Pending>,
}

#[derive(Clone, Debug)]
enum DirOp {
    Link(String, Ino),
    Unlink(String),
    Rename(String, String),
}

#[derive(Clone, Debug, Default)]
struct DirNode {
    entries: BTreeMap<String, Ino>,
    durable: BTreeMap<String, Ino>,
    pending: Vec<DirOp>,
}

#[derive(Clone, Debug)]
enum Node {
    File(FileNode),
    Dir(DirNode),
}

#[derive(Debug)]
struct SimState {
    nodes: Vec<Node>,
    open_handles: usize,
    locks: BTreeSet<Ino>,
}

fn errno(code: i32) -> std::io::Error {
    std::io::Error::from_raw_os_error(code)
}

fn write_into(v: &mut Vec<u8>, offset: u64, bytes: &[u8]) {
    let start = usize::try_from(offset).unwrap_or(usize::MAX);
    let end = start.saturating_add(bytes.len());
    if v.len() < end {
        v.resize(end, 0);
    }
    if let Some(dst) = v.get_mut(start..end) {
        dst.copy_from_slice(bytes);
    }
}

fn apply_op(entries: &mut BTreeMap<String, Ino>, op: &DirOp) {
    match op {
        DirOp::Link(name, ino) => {
            entries.insert(name.clone(), *ino);
        }
        DirOp::Unlink(name) => {
            entries.remove(name);
        }
        DirOp::Rename(from, to) => {
            if let Some(ino) = entries.remove(from) {
                entries.insert(to.clone(), ino);
            }
        }
    }
}

impl SimState {
    fn dir(&self, ino: Ino) -> std::io::Result<&DirNode> {
        match self.nodes.get(ino) {
            Some(Node::Dir(d)) => Ok(d),
            _ => Err(errno(libc::ENOTDIR)),
        }
    }

    fn dir_mut(&mut self, ino: Ino) -> std::io::Result<&mut DirNode> {
        match self.nodes.get_mut(ino) {
            Some(Node::Dir(d)) => Ok(d),
            _ => Err(errno(libc::ENOTDIR)),
        }
    }

    fn file(&self, ino: Ino) -> std::io::Result<&FileNode> {
        match self.nodes.get(ino) {
            Some(Node::File(f)) => Ok(f),
            Some(Node::Dir(_)) => Err(errno(libc::EISDIR)),
            None => Err(errno(libc::EBADF)),
        }
    }

    fn file_mut(&mut self, ino: Ino) -> std::io::Result<&mut FileNode> {
        match self.nodes.get_mut(ino) {
            Some(Node::File(f)) => Ok(f),
            Some(Node::Dir(_)) => Err(errno(libc::EISDIR)),
            None => Err(errno(libc::EBADF)),
        }
    }

    fn names(path: &Path) -> std::io::Result<Vec<String>> {
        let mut out = Vec::new();
        for c in path.components() {
            match c {
                Component::RootDir | Component::CurDir => {}
                Component::Normal(n) => out.push(n.to_string_lossy().into_owned()),
                Component::Prefix(_) | Component::ParentDir => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        "the simulated file system takes plain paths only",
                    ))
                }
            }
        }
        Ok(out)
    }

    fn lookup(&self, path: &Path) -> std::io::Result<Ino> {
        let mut ino = ROOT;
        for name in Self::names(path)? {
            ino = *self
                .dir(ino)?
                .entries
                .get(&name)
                .ok_or_else(|| errno(libc::ENOENT))?;
        }
        Ok(ino)
    }

    /// The parent directory's inode and the last name of `path`.
    fn parent(&self, path: &Path) -> std::io::Result<(Ino, String)> {
        let mut names = Self::names(path)?;
        let name = names.pop().ok_or_else(|| errno(libc::EINVAL))?;
        let mut ino = ROOT;
        for n in names {
            ino = *self
                .dir(ino)?
                .entries
                .get(&n)
                .ok_or_else(|| errno(libc::ENOENT))?;
        }
        self.dir(ino)?;
        Ok((ino, name))
    }

    fn link(&mut self, dir: Ino, name: String, node: Node) -> std::io::Result<Ino> {
        let ino = self.nodes.len();
        self.nodes.push(node);
        let d = self.dir_mut(dir)?;
        d.entries.insert(name.clone(), ino);
        d.pending.push(DirOp::Link(name, ino));
        Ok(ino)
    }

    fn create_file(
        &mut self,
        path: &Path,
        exclusive: bool,
        truncate: bool,
    ) -> std::io::Result<Ino> {
        let (dir, name) = self.parent(path)?;
        match self.dir(dir)?.entries.get(&name).copied() {
            Some(_) if exclusive => Err(errno(libc::EEXIST)),
            Some(ino) => {
                let f = self.file_mut(ino)?;
                if truncate {
                    f.data.clear();
                    f.pending.push(Pending::SetLen(0));
                }
                Ok(ino)
            }
            None => self.link(dir, name, Node::File(FileNode::default())),
        }
    }
}

/// An in-memory file system that tracks what is durable. Cheap to clone (shared state).
#[derive(Clone, Debug)]
pub struct SimFs {
    state: Arc<Mutex<SimState>>,
}

impl Default for SimFs {
    fn default() -> Self {
        SimFs::new()
    }
}

fn lock_state<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl SimFs {
    /// An empty file system: a root directory, durable.
    pub fn new() -> SimFs {
        SimFs {
            state: Arc::new(Mutex::new(SimState {
                nodes: vec![Node::Dir(DirNode::default())],
                open_handles: 0,
                locks: BTreeSet::new(),
            })),
        }
    }

    fn st(&self) -> MutexGuard<'_, SimState> {
        lock_state(&self.state)
    }

    /// Creates `dir` and its parents and makes them durable (test setup).
    pub fn mkdir_durable(&self, dir: &Path) -> Result<()> {
        self.create_dir_all(dir)?;
        self.sync_everything();
        Ok(())
    }

    /// Makes every file and directory durable, as a clean shutdown would.
    pub fn sync_everything(&self) {
        let mut st = self.st();
        for n in &mut st.nodes {
            match n {
                Node::File(f) => {
                    f.durable = f.data.clone();
                    f.pending.clear();
                }
                Node::Dir(d) => {
                    d.durable = d.entries.clone();
                    d.pending.clear();
                }
            }
        }
    }

    /// Open file handles and held locks.
    pub fn open_handles(&self) -> usize {
        self.st().open_handles
    }

    /// Freezes the durable and unsynced state, to build post-crash images from.
    pub fn crash_state(&self) -> CrashState {
        CrashState {
            nodes: self.st().nodes.clone(),
        }
    }

    /// The current bytes of a file (what the process would read).
    pub fn current(&self, path: &Path) -> Option<Vec<u8>> {
        let st = self.st();
        let ino = st.lookup(path).ok()?;
        st.file(ino).ok().map(|f| f.data.clone())
    }

    fn handle(&self, ino: Ino, path: &Path, writable: bool) -> Box<dyn VfsFile> {
        self.st().open_handles += 1;
        Box::new(SimFile {
            fs: self.clone(),
            ino,
            path: path.to_path_buf(),
            writable,
        })
    }
}

/// A file of [`SimFs`].
#[derive(Debug)]
pub struct SimFile {
    fs: SimFs,
    ino: Ino,
    path: PathBuf,
    writable: bool,
}

impl Drop for SimFile {
    fn drop(&mut self) {
        let mut st = self.fs.st();
        st.open_handles = st.open_handles.saturating_sub(1);
    }
}

impl SimFile {
    fn err(&self, op: &'static str, e: std::io::Error) -> Error {
        io_error(&self.path, op, e)
    }
}

impl VfsFile for SimFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<usize> {
        if !self.writable {
            return Err(self.err("write", errno(libc::EBADF)));
        }
        let mut st = self.fs.st();
        let f = st.file_mut(self.ino).map_err(|e| self.err("write", e))?;
        write_into(&mut f.data, offset, buf);
        f.pending.push(Pending::Write {
            offset,
            bytes: buf.to_vec(),
        });
        Ok(buf.len())
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let st = self.fs.st();
        let f = st.file(self.ino).map_err(|e| self.err("read", e))?;
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let src = f
            .data
            .get(start..start.saturating_add(buf.len()))
            .ok_or_else(|| self.err("read", std::io::ErrorKind::UnexpectedEof.into()))?;
        buf.copy_from_slice(src);
        Ok(())
    }

    fn len(&self) -> Result<u64> {
        let st = self.fs.st();
        Ok(st
            .file(self.ino)
            .map_err(|e| self.err("stat", e))?
            .data
            .len() as u64)
    }

    fn set_len(&self, len: u64) -> Result<()> {
        if !self.writable {
            return Err(self.err("truncate", errno(libc::EBADF)));
        }
        let mut st = self.fs.st();
        let f = st.file_mut(self.ino).map_err(|e| self.err("truncate", e))?;
        f.data.resize(usize::try_from(len).unwrap_or(usize::MAX), 0);
        f.pending.push(Pending::SetLen(len));
        Ok(())
    }

    fn sync_data(&self) -> Result<()> {
        let mut st = self.fs.st();
        let f = st
            .file_mut(self.ino)
            .map_err(|e| self.err("fdatasync", e))?;
        f.durable = f.data.clone();
        f.pending.clear();
        Ok(())
    }

    fn sync_all(&self) -> Result<()> {
        self.sync_data()
    }

    fn map_prefix(&self, len: u64) -> Result<Prefix> {
        let st = self.fs.st();
        let f = st.file(self.ino).map_err(|e| self.err("mmap", e))?;
        let n = usize::try_from(len).unwrap_or(usize::MAX);
        let bytes = f
            .data
            .get(..n)
            .ok_or_else(|| self.err("mmap", std::io::ErrorKind::UnexpectedEof.into()))?;
        Ok(Prefix::Owned(bytes.into()))
    }
}

#[derive(Debug)]
struct SimLock {
    fs: SimFs,
    ino: Ino,
}

impl VfsLock for SimLock {}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut st = self.fs.st();
        st.locks.remove(&self.ino);
        st.open_handles = st.open_handles.saturating_sub(1);
    }
}

impl Vfs for SimFs {
    fn open_read(&self, path: &Path) -> Result<Box<dyn VfsFile>> {
        let ino = {
            let st = self.st();
            let ino = st.lookup(path).map_err(|e| io_error(path, "open", e))?;
            st.file(ino).map_err(|e| io_error(path, "open", e))?;
            ino
        };
        Ok(self.handle(ino, path, false))
    }

    fn open_rw(&self, path: &Path) -> Result<Box<dyn VfsFile>> {
        let ino = {
            let st = self.st();
            let ino = st.lookup(path).map_err(|e| io_error(path, "open", e))?;
            st.file(ino).map_err(|e| io_error(path, "open", e))?;
            ino
        };
        Ok(self.handle(ino, path, true))
    }

    fn create_new(&self, path: &Path) -> Result<Box<dyn VfsFile>> {
        let ino = self
            .st()
            .create_file(path, true, false)
            .map_err(|e| io_error(path, "create", e))?;
        Ok(self.handle(ino, path, true))
    }

    fn create_truncate(&self, path: &Path) -> Result<Box<dyn VfsFile>> {
        let ino = self
            .st()
            .create_file(path, false, true)
            .map_err(|e| io_error(path, "create", e))?;
        Ok(self.handle(ino, path, true))
    }

    fn read(&self, path: &Path) -> Result<Vec<u8>> {
        let st = self.st();
        let ino = st.lookup(path).map_err(|e| io_error(path, "read", e))?;
        Ok(st
            .file(ino)
            .map_err(|e| io_error(path, "read", e))?
            .data
            .clone())
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        match self.st().lookup(path) {
            Ok(_) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(io_error(path, "stat", e)),
        }
    }

    fn read_dir(&self, dir: &Path) -> Result<Vec<String>> {
        let st = self.st();
        let ino = st.lookup(dir).map_err(|e| io_error(dir, "list", e))?;
        Ok(st
            .dir(ino)
            .map_err(|e| io_error(dir, "list", e))?
            .entries
            .keys()
            .cloned()
            .collect())
    }

    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        let mut st = self.st();
        let err = |e| io_error(dir, "create directory", e);
        let mut ino = ROOT;
        for name in SimState::names(dir).map_err(err)? {
            let next = st.dir(ino).map_err(err)?.entries.get(&name).copied();
            ino = match next {
                Some(i) => {
                    st.dir(i).map_err(err)?;
                    i
                }
                None => st
                    .link(ino, name, Node::Dir(DirNode::default()))
                    .map_err(err)?,
            };
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        let mut st = self.st();
        let err = |e| io_error(path, "remove", e);
        let (dir, name) = st.parent(path).map_err(err)?;
        let ino = *st
            .dir(dir)
            .map_err(err)?
            .entries
            .get(&name)
            .ok_or_else(|| err(errno(libc::ENOENT)))?;
        st.file(ino).map_err(err)?;
        let d = st.dir_mut(dir).map_err(err)?;
        d.entries.remove(&name);
        d.pending.push(DirOp::Unlink(name));
        Ok(())
    }

    fn remove_dir_all(&self, dir: &Path) -> Result<()> {
        let mut st = self.st();
        let err = |e| io_error(dir, "remove directory", e);
        let (parent, name) = st.parent(dir).map_err(err)?;
        let ino = *st
            .dir(parent)
            .map_err(err)?
            .entries
            .get(&name)
            .ok_or_else(|| err(errno(libc::ENOENT)))?;
        st.dir(ino).map_err(err)?;
        let d = st.dir_mut(parent).map_err(err)?;
        d.entries.remove(&name);
        d.pending.push(DirOp::Unlink(name));
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut st = self.st();
        let err = |e| io_error(to, "rename", e);
        let (fd, fname) = st.parent(from).map_err(err)?;
        let (td, tname) = st.parent(to).map_err(err)?;
        if fd != td {
            return Err(err(errno(libc::EXDEV)));
        }
        let d = st.dir(fd).map_err(err)?;
        let src = *d
            .entries
            .get(&fname)
            .ok_or_else(|| err(errno(libc::ENOENT)))?;
        if let Some(&dst) = d.entries.get(&tname) {
            match (st.nodes.get(src), st.nodes.get(dst)) {
                (Some(Node::File(_)), Some(Node::File(_))) => {}
                (Some(Node::Dir(_)), Some(Node::Dir(t))) if t.entries.is_empty() => {}
                (Some(Node::Dir(_)), Some(Node::Dir(_))) => {
                    return Err(err(errno(libc::ENOTEMPTY)))
                }
                (Some(Node::File(_)), _) => return Err(err(errno(libc::EISDIR))),
                _ => return Err(err(errno(libc::ENOTDIR))),
            }
        }
        let d = st.dir_mut(fd).map_err(err)?;
        d.entries.remove(&fname);
        d.entries.insert(tname.clone(), src);
        d.pending.push(DirOp::Rename(fname, tname));
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        let mut st = self.st();
        let err = |e| io_error(dir, "fsync directory", e);
        let ino = st.lookup(dir).map_err(err)?;
        let d = st.dir_mut(ino).map_err(err)?;
        d.durable = d.entries.clone();
        d.pending.clear();
        Ok(())
    }

    fn lock(&self, path: &Path) -> Result<Box<dyn VfsLock>> {
        let mut st = self.st();
        let ino = st
            .create_file(path, false, false)
            .map_err(|e| io_error(path, "open", e))?;
        if !st.locks.insert(ino) {
            return Err(Error::WriterBusy {
                path: path.to_path_buf(),
            });
        }
        st.open_handles += 1;
        Ok(Box::new(SimLock {
            fs: self.clone(),
            ino,
        }))
    }
}

// ---------------------------------------------------------------------------------------------
// Post-crash images.

/// What happens to a file's unsynced writes in an image.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ContentMode {
    /// Lost: the file holds its durable bytes.
    #[default]
    Drop,
    /// Reached the disk: the file holds what the process last saw.
    Apply,
    /// The size reached the disk but the data did not: durable bytes, then zeros up to the
    /// current size.
    ZeroGrow,
    /// The first `write` unsynced operations reached the disk, and `keep` bytes of the next one
    /// (a 512-byte-aligned file position).
    Torn {
        /// Operations applied whole.
        write: usize,
        /// Bytes of the next write applied.
        keep: usize,
    },
    /// The size reached the disk, and each 512-byte piece of each unsynced write did or did
    /// not, independently (chosen by a hash of `seed`, the write and the piece): the disk wrote
    /// sectors out of order.
    Sectors {
        /// Chooses the pieces.
        seed: u64,
    },
}

/// One post-crash image: a default for every directory and file with unsynced state, and
/// overrides for some of them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ImageSpec {
    /// True: every unsynced directory operation reached the disk; false: none did.
    pub dirs_applied: bool,
    /// Directories (inode, `n`) with only their first `n` unsynced operations applied.
    pub dir_prefixes: Vec<(usize, usize)>,
    /// What happens to every file's unsynced writes.
    pub files: ContentMode,
    /// Files (inode, mode) treated differently.
    pub file_overrides: Vec<(usize, ContentMode)>,
}

impl ImageSpec {
    /// Every unsynced write and directory operation reached the disk (a process crash: the
    /// kernel still writes back what it holds).
    pub fn all_applied() -> ImageSpec {
        ImageSpec {
            dirs_applied: true,
            files: ContentMode::Apply,
            ..ImageSpec::default()
        }
    }

    /// Nothing unsynced reached the disk.
    pub fn all_dropped() -> ImageSpec {
        ImageSpec {
            dirs_applied: false,
            files: ContentMode::Drop,
            ..ImageSpec::default()
        }
    }
}

impl std::fmt::Display for ImageSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "dirs {} (prefixes {:?}), files {:?} (overrides {:?})",
            if self.dirs_applied {
                "applied"
            } else {
                "dropped"
            },
            self.dir_prefixes,
            self.files,
            self.file_overrides
        )
    }
}

/// A frozen copy of a [`SimFs`] at a crash.
#[derive(Clone, Debug)]
pub struct CrashState {
    nodes: Vec<Node>,
}

/// A post-crash file tree: relative path → file bytes (`None` for a directory).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Image {
    /// The entries, parents before children.
    pub entries: BTreeMap<PathBuf, Option<Vec<u8>>>,
}

impl Image {
    /// A 128-bit fingerprint of the tree, to recognise images already checked.
    pub fn fingerprint(&self) -> (u64, u32) {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.hash(&mut h);
        let mut crc = 0u32;
        for (p, c) in &self.entries {
            crc = crc32c_append(crc, p.as_os_str().as_encoded_bytes());
            if let Some(c) = c {
                crc = crc32c_append(crc, &(c.len() as u64).to_le_bytes());
                crc = crc32c_append(crc, c);
            }
        }
        (h.finish(), crc)
    }

    /// Writes the tree under `dst` (which must exist) on the real file system.
    pub fn materialise(&self, dst: &Path) -> Result<()> {
        for (p, c) in &self.entries {
            let at = dst.join(p);
            match c {
                None => std::fs::create_dir_all(&at)
                    .map_err(|e| io_error(&at, "create directory", e))?,
                Some(bytes) => std::fs::write(&at, bytes).map_err(|e| io_error(&at, "write", e))?,
            }
        }
        Ok(())
    }
}

/// splitmix64's finaliser: a well-mixed hash of `x`.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Up to `n` evenly spread items of `v`, first and last included.
fn spread<T: Clone>(v: &[T], n: usize) -> Vec<T> {
    if v.len() <= n {
        return v.to_vec();
    }
    if n < 2 {
        return v.iter().take(n).cloned().collect();
    }
    (0..n)
        .filter_map(|k| v.get(k * (v.len() - 1) / (n - 1)).cloned())
        .collect()
}

impl CrashState {
    fn dirs_with_pending(&self) -> Vec<(Ino, usize)> {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| match n {
                Node::Dir(d) if !d.pending.is_empty() => Some((i, d.pending.len())),
                _ => None,
            })
            .collect()
    }

    fn files_with_pending(&self) -> Vec<(Ino, &FileNode)> {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| match n {
                Node::File(f) if !f.pending.is_empty() => Some((i, f)),
                _ => None,
            })
            .collect()
    }

    /// Ways the unsynced writes of `f` can be torn: after each whole write, and inside writes
    /// at up to three 512-byte-aligned file positions; at most `max` of them, spread out.
    fn torn_modes(f: &FileNode, max: usize) -> Vec<ContentMode> {
        let mut cuts = Vec::new();
        for (j, p) in f.pending.iter().enumerate() {
            cuts.push(ContentMode::Torn { write: j, keep: 0 });
            if let Pending::Write { offset, bytes } = p {
                let first = offset.next_multiple_of(SECTOR_BYTES).max(offset + 1);
                let end = offset + bytes.len() as u64;
                let bounds: Vec<u64> = (first..end)
                    .step_by(SECTOR_BYTES as usize)
                    .filter(|b| b % SECTOR_BYTES == 0)
                    .collect();
                for b in spread(&bounds, 3) {
                    cuts.push(ContentMode::Torn {
                        write: j,
                        keep: usize::try_from(b - offset).unwrap_or(0),
                    });
                }
            }
        }
        spread(&cuts, max)
    }

    /// The images worth checking for this crash: every combination of "all applied / all
    /// dropped" for directories and files, each file torn (up to `max_torn` ways), zero-grown,
    /// applied or dropped alone, and each directory's unsynced operations applied in prefixes.
    pub fn specs(&self, max_torn: usize) -> Vec<ImageSpec> {
        let mut out = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut push = |s: ImageSpec| {
            if seen.insert(s.clone()) {
                out.push(s);
            }
        };
        let files = self.files_with_pending();
        let dirs = self.dirs_with_pending();
        for dirs_applied in [true, false] {
            for m in [ContentMode::Apply, ContentMode::Drop, ContentMode::ZeroGrow] {
                push(ImageSpec {
                    dirs_applied,
                    dir_prefixes: Vec::new(),
                    files: m,
                    file_overrides: Vec::new(),
                });
            }
            if files.len() > 1 || !dirs.is_empty() || files.iter().any(|(_, f)| f.pending.len() > 1)
            {
                for &(ino, f) in &files {
                    let mut modes = Self::torn_modes(f, max_torn);
                    modes.extend([
                        ContentMode::Apply,
                        ContentMode::Drop,
                        ContentMode::ZeroGrow,
                        ContentMode::Sectors { seed: 1 },
                        ContentMode::Sectors { seed: 2 },
                    ]);
                    for m in modes {
                        for others in [ContentMode::Apply, ContentMode::Drop] {
                            push(ImageSpec {
                                dirs_applied,
                                dir_prefixes: Vec::new(),
                                files: others,
                                file_overrides: vec![(ino, m)],
                            });
                        }
                    }
                }
            } else {
                for &(ino, f) in &files {
                    let mut modes = Self::torn_modes(f, max_torn);
                    modes.extend([
                        ContentMode::Sectors { seed: 1 },
                        ContentMode::Sectors { seed: 2 },
                    ]);
                    for m in modes {
                        push(ImageSpec {
                            dirs_applied,
                            dir_prefixes: Vec::new(),
                            files: ContentMode::Apply,
                            file_overrides: vec![(ino, m)],
                        });
                    }
                }
            }
        }
        for &(ino, n) in &dirs {
            for k in 0..=n {
                for dirs_applied in [true, false] {
                    for files in [ContentMode::Apply, ContentMode::Drop, ContentMode::ZeroGrow] {
                        push(ImageSpec {
                            dirs_applied,
                            dir_prefixes: vec![(ino, k)],
                            files,
                            file_overrides: Vec::new(),
                        });
                    }
                }
            }
        }
        out
    }

    /// `n` images where every file with unsynced writes and every directory with unsynced
    /// operations independently takes a random fate (file: dropped, applied, zero-grown or one
    /// of up to `max_torn` tears; directory: a random prefix), from `seed`: combinations
    /// [`CrashState::specs`] does not reach, such as a torn table beside a zero-grown chunk
    /// whose name did not reach the disk.
    pub fn random_specs(&self, seed: u64, n: usize, max_torn: usize) -> Vec<ImageSpec> {
        let files = self.files_with_pending();
        let dirs = self.dirs_with_pending();
        if files.is_empty() && dirs.is_empty() {
            return Vec::new();
        }
        let modes: Vec<(Ino, Vec<ContentMode>)> = files
            .iter()
            .map(|&(ino, f)| {
                let mut m = Self::torn_modes(f, max_torn);
                m.extend([ContentMode::Apply, ContentMode::Drop, ContentMode::ZeroGrow]);
                m.extend((0..4).map(|k| ContentMode::Sectors {
                    seed: mix(seed ^ k),
                }));
                (ino, m)
            })
            .collect();
        let mut x = seed;
        let mut next = move |below: usize| {
            x = x.wrapping_add(1);
            usize::try_from(mix(x) % below.max(1) as u64).unwrap_or(0)
        };
        (0..n)
            .map(|_| ImageSpec {
                dirs_applied: true,
                dir_prefixes: dirs
                    .iter()
                    .map(|&(ino, len)| (ino, next(len + 1)))
                    .collect(),
                files: ContentMode::Apply,
                file_overrides: modes
                    .iter()
                    .filter_map(|(ino, m)| m.get(next(m.len())).map(|&m| (*ino, m)))
                    .collect(),
            })
            .collect()
    }

    fn content(f: &FileNode, mode: ContentMode) -> Vec<u8> {
        match mode {
            ContentMode::Drop => f.durable.clone(),
            ContentMode::Apply => f.data.clone(),
            ContentMode::ZeroGrow => {
                let mut v = f.durable.clone();
                v.resize(f.data.len(), 0);
                v
            }
            ContentMode::Sectors { seed } => {
                let mut v = f.durable.clone();
                v.resize(f.data.len(), 0);
                for (j, p) in f.pending.iter().enumerate() {
                    let Pending::Write { offset, bytes } = p else {
                        continue;
                    };
                    let mut at = *offset;
                    let mut rest: &[u8] = bytes;
                    let mut piece = 0u64;
                    while !rest.is_empty() {
                        let room = (SECTOR_BYTES - at % SECTOR_BYTES) as usize;
                        let (head, tail) = rest.split_at(room.min(rest.len()));
                        if mix(seed ^ mix(j as u64 ^ mix(piece))) & 1 == 1 {
                            write_into(&mut v, at, head);
                        }
                        at += head.len() as u64;
                        rest = tail;
                        piece += 1;
                    }
                }
                v.truncate(f.data.len());
                v
            }
            ContentMode::Torn { write, keep } => {
                let mut v = f.durable.clone();
                for (j, p) in f.pending.iter().enumerate() {
                    if j > write {
                        break;
                    }
                    match p {
                        Pending::Write { offset, bytes } => {
                            let n = if j == write { keep } else { bytes.len() };
                            write_into(&mut v, *offset, bytes.get(..n).unwrap_or(bytes));
                        }
                        Pending::SetLen(len) if j < write => {
                            v.resize(usize::try_from(*len).unwrap_or(usize::MAX), 0);
                        }
                        Pending::SetLen(_) => {}
                    }
                }
                v
            }
        }
    }

    /// Builds the image of the tree under `root` (a directory that was durable before the
    /// workload began).
    pub fn image(&self, spec: &ImageSpec, root: &Path) -> Result<Image> {
        let entries_of = |ino: Ino| -> BTreeMap<String, Ino> {
            let Some(Node::Dir(d)) = self.nodes.get(ino) else {
                return BTreeMap::new();
            };
            let mut e = d.durable.clone();
            let n = match spec.dir_prefixes.iter().find(|(i, _)| *i == ino) {
                Some(&(_, k)) => k,
                None if spec.dirs_applied => d.pending.len(),
                None => 0,
            };
            for op in d.pending.iter().take(n) {
                apply_op(&mut e, op);
            }
            e
        };
        let mut ino = ROOT;
        for name in SimState::names(root).map_err(|e| io_error(root, "image", e))? {
            ino = *entries_of(ino)
                .get(&name)
                .ok_or_else(|| io_error(root, "image", errno(libc::ENOENT)))?;
        }
        let mut image = Image::default();
        let mut stack = vec![(PathBuf::new(), ino)];
        while let Some((rel, dir)) = stack.pop() {
            for (name, child) in entries_of(dir) {
                let p = rel.join(&name);
                match self.nodes.get(child) {
                    Some(Node::Dir(_)) => {
                        image.entries.insert(p.clone(), None);
                        stack.push((p, child));
                    }
                    Some(Node::File(f)) => {
                        let mode = spec
                            .file_overrides
                            .iter()
                            .find(|(i, _)| *i == child)
                            .map_or(spec.files, |&(_, m)| m);
                        image.entries.insert(p, Some(Self::content(f, mode)));
                    }
                    None => {}
                }
            }
        }
        Ok(image)
    }
}

// ---------------------------------------------------------------------------------------------
// Fault injection.

/// A failure to inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// `EIO` from any operation.
    Eio,
    /// `ENOSPC` from an operation that allocates: a write, a create, a rename, a truncate, an
    /// fsync.
    Enospc,
    /// A write that writes only the first half of its bytes (and reports so).
    ShortWrite,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpClass {
    Read,
    Write,
    Alloc,
}

#[derive(Debug, Default)]
struct Plan {
    ops: u64,
    crash_at: Option<u64>,
    fault: Option<(u64, FaultKind, bool)>,
    fired: u64,
    crashed: bool,
}

/// Wraps a [`Vfs`]: numbers every operation and injects a crash or a failure.
#[derive(Clone, Debug)]
pub struct FaultFs {
    inner: Arc<dyn Vfs>,
    plan: Arc<Mutex<Plan>>,
    /// While true, file writes and syncs wait (see [`FaultFs::hold_writes`]).
    held: Arc<(Mutex<bool>, std::sync::Condvar)>,
    /// Operations waiting at the gate.
    waiting: Arc<std::sync::atomic::AtomicUsize>,
}

enum Go {
    Run,
    Short,
}

impl FaultFs {
    /// Wraps `inner` with nothing injected.
    pub fn new(inner: Arc<dyn Vfs>) -> FaultFs {
        FaultFs {
            inner,
            plan: Arc::new(Mutex::new(Plan::default())),
            held: Arc::new((Mutex::new(false), std::sync::Condvar::new())),
            waiting: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
        }
    }

    /// Operations waiting because writes are held.
    pub fn held_waiters(&self) -> usize {
        self.waiting.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// With `true`, every file write and sync waits until called again with `false`: a disk that
    /// stopped answering, for tests of backpressure and cancellation.
    pub fn hold_writes(&self, hold: bool) {
        let (lock, cv) = &*self.held;
        *lock_state(lock) = hold;
        cv.notify_all();
    }

    /// Waits while writes are held.
    fn pass_gate(&self) {
        let (lock, cv) = &*self.held;
        let mut held = lock_state(lock);
        if !*held {
            return;
        }
        self.waiting
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        while *held {
            held = cv.wait(held).unwrap_or_else(|e| e.into_inner());
        }
        self.waiting
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Operations started so far.
    pub fn ops(&self) -> u64 {
        lock_state(&self.plan).ops
    }

    /// Faults that fired so far (a crash counts once).
    pub fn fired(&self) -> u64 {
        lock_state(&self.plan).fired
    }

    /// True once the crash point was reached.
    pub fn crashed(&self) -> bool {
        lock_state(&self.plan).crashed
    }

    /// Operation `at` and every later one fail with `EIO` and have no effect, as if the machine
    /// stopped just before operation `at`.
    pub fn crash_at(&self, at: u64) {
        lock_state(&self.plan).crash_at = Some(at);
    }

    /// Operation `at` fails with `kind` (if it applies to that operation); with `permanent`,
    /// so does every later operation it applies to.
    pub fn fail_at(&self, at: u64, kind: FaultKind, permanent: bool) {
        lock_state(&self.plan).fault = Some((at, kind, permanent));
    }

    /// Removes every crash and fault; the counter keeps running.
    pub fn clear(&self) {
        let mut p = lock_state(&self.plan);
        p.crash_at = None;
        p.fault = None;
        p.crashed = false;
    }

    fn begin(&self, class: OpClass, path: &Path, op: &'static str) -> Result<Go> {
        let mut p = lock_state(&self.plan);
        let k = p.ops;
        p.ops += 1;
        if p.crash_at.is_some_and(|c| k >= c) {
            if !p.crashed {
                p.fired += 1;
            }
            p.crashed = true;
            return Err(io_error(path, op, std::io::Error::other("simulated crash")));
        }
        let Some((at, kind, permanent)) = p.fault else {
            return Ok(Go::Run);
        };
        if !(k == at || (permanent && k > at)) {
            return Ok(Go::Run);
        }
        let applies = match kind {
            FaultKind::Eio => true,
            FaultKind::Enospc => class != OpClass::Read,
            FaultKind::ShortWrite => class == OpClass::Write,
        };
        if !applies {
            return Ok(Go::Run);
        }
        p.fired += 1;
        match kind {
            FaultKind::Eio => Err(io_error(path, op, errno(libc::EIO))),
            FaultKind::Enospc => Err(io_error(path, op, errno(libc::ENOSPC))),
            FaultKind::ShortWrite => Ok(Go::Short),
        }
    }

    fn wrap(&self, f: Box<dyn VfsFile>) -> Box<dyn VfsFile> {
        Box::new(FaultFile {
            fs: self.clone(),
            inner: f,
        })
    }
}

/// A file of [`FaultFs`].
#[derive(Debug)]
pub struct FaultFile {
    fs: FaultFs,
    inner: Box<dyn VfsFile>,
}

impl VfsFile for FaultFile {
    fn path(&self) -> &Path {
        self.inner.path()
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<usize> {
        self.fs.pass_gate();
        match self.fs.begin(OpClass::Write, self.path(), "write")? {
            Go::Run => self.inner.write_at(buf, offset),
            Go::Short => self
                .inner
                .write_at(buf.get(..buf.len() / 2).unwrap_or_default(), offset),
        }
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.fs.begin(OpClass::Read, self.path(), "read")?;
        self.inner.read_exact_at(buf, offset)
    }

    fn len(&self) -> Result<u64> {
        self.fs.begin(OpClass::Read, self.path(), "stat")?;
        self.inner.len()
    }

    fn set_len(&self, len: u64) -> Result<()> {
        self.fs.begin(OpClass::Alloc, self.path(), "truncate")?;
        self.inner.set_len(len)
    }

    fn sync_data(&self) -> Result<()> {
        self.fs.pass_gate();
        self.fs.begin(OpClass::Alloc, self.path(), "fdatasync")?;
        self.inner.sync_data()
    }

    fn sync_all(&self) -> Result<()> {
        self.fs.begin(OpClass::Alloc, self.path(), "fsync")?;
        self.inner.sync_all()
    }

    fn map_prefix(&self, len: u64) -> Result<Prefix> {
        self.fs.begin(OpClass::Read, self.path(), "mmap")?;
        self.inner.map_prefix(len)
    }

    fn start_writeback(&self, offset: u64, len: u64) {
        // A hint with no effect on what is durable: not an operation of the crash model.
        self.inner.start_writeback(offset, len);
    }
}

impl Vfs for FaultFs {
    fn open_read(&self, path: &Path) -> Result<Box<dyn VfsFile>> {
        self.begin(OpClass::Read, path, "open")?;
        Ok(self.wrap(self.inner.open_read(path)?))
    }

    fn open_rw(&self, path: &Path) -> Result<Box<dyn VfsFile>> {
        self.begin(OpClass::Read, path, "open")?;
        Ok(self.wrap(self.inner.open_rw(path)?))
    }

    fn create_new(&self, path: &Path) -> Result<Box<dyn VfsFile>> {
        self.begin(OpClass::Alloc, path, "create")?;
        Ok(self.wrap(self.inner.create_new(path)?))
    }

    fn create_truncate(&self, path: &Path) -> Result<Box<dyn VfsFile>> {
        self.begin(OpClass::Alloc, path, "create")?;
        Ok(self.wrap(self.inner.create_truncate(path)?))
    }

    fn read(&self, path: &Path) -> Result<Vec<u8>> {
        self.begin(OpClass::Read, path, "read")?;
        self.inner.read(path)
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        self.begin(OpClass::Read, path, "stat")?;
        self.inner.exists(path)
    }

    fn read_dir(&self, dir: &Path) -> Result<Vec<String>> {
        self.begin(OpClass::Read, dir, "list")?;
        self.inner.read_dir(dir)
    }

    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        self.begin(OpClass::Alloc, dir, "create directory")?;
        self.inner.create_dir_all(dir)
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        self.begin(OpClass::Alloc, path, "remove")?;
        self.inner.remove_file(path)
    }

    fn remove_dir_all(&self, dir: &Path) -> Result<()> {
        self.begin(OpClass::Alloc, dir, "remove directory")?;
        self.inner.remove_dir_all(dir)
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.begin(OpClass::Alloc, to, "rename")?;
        self.inner.rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.begin(OpClass::Alloc, dir, "fsync directory")?;
        self.inner.sync_dir(dir)
    }

    fn lock(&self, path: &Path) -> Result<Box<dyn VfsLock>> {
        self.begin(OpClass::Alloc, path, "lock")?;
        self.inner.lock(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sim() -> SimFs {
        let fs = SimFs::new();
        fs.mkdir_durable(Path::new("/d")).unwrap();
        fs
    }

    #[test]
    fn unsynced_writes_and_names_are_not_durable() {
        let fs = sim();
        let f = fs.create_new(Path::new("/d/a")).unwrap();
        f.write_all_at(&[7u8; 1500], 0).unwrap();
        let st = fs.crash_state();
        let all = ImageSpec {
            dirs_applied: true,
            dir_prefixes: Vec::new(),
            files: ContentMode::Apply,
            file_overrides: Vec::new(),
        };
        let img = st.image(&all, Path::new("/d")).unwrap();
        assert_eq!(img.entries[Path::new("a")].as_ref().unwrap().len(), 1500);
        let none = ImageSpec {
            dirs_applied: false,
            ..all.clone()
        };
        assert!(st.image(&none, Path::new("/d")).unwrap().entries.is_empty());
        let zero = ImageSpec {
            files: ContentMode::ZeroGrow,
            ..all.clone()
        };
        let img = st.image(&zero, Path::new("/d")).unwrap();
        assert_eq!(img.entries[Path::new("a")], Some(vec![0u8; 1500]));
        let torn = ImageSpec {
            files: ContentMode::Torn {
                write: 0,
                keep: 512,
            },
            ..all.clone()
        };
        let img = st.image(&torn, Path::new("/d")).unwrap();
        assert_eq!(img.entries[Path::new("a")], Some(vec![7u8; 512]));
        // Sectors persisted out of order: each 512-byte piece is old (here: zeros) or new.
        let mut seen = BTreeSet::new();
        for seed in 0..16 {
            let spec = ImageSpec {
                files: ContentMode::Sectors { seed },
                ..all.clone()
            };
            let img = st.image(&spec, Path::new("/d")).unwrap();
            let bytes = img.entries[Path::new("a")].clone().unwrap();
            assert_eq!(bytes.len(), 1500);
            let pieces: Vec<bool> = bytes.chunks(512).map(|c| c[0] == 7).collect();
            for (c, &new) in bytes.chunks(512).zip(&pieces) {
                assert!(c.iter().all(|&b| b == if new { 7 } else { 0 }));
            }
            seen.insert(pieces);
        }
        assert!(seen.len() > 2, "the pieces should vary with the seed");
        // Synced: every image keeps it.
        f.sync_data().unwrap();
        fs.sync_dir(Path::new("/d")).unwrap();
        let st = fs.crash_state();
        assert_eq!(st.specs(8).len(), 3 * 2);
        for s in st.specs(8) {
            let img = st.image(&s, Path::new("/d")).unwrap();
            assert_eq!(img.entries[Path::new("a")], Some(vec![7u8; 1500]));
        }
        drop(f);
        assert_eq!(fs.open_handles(), 0);
    }

    #[test]
    fn rename_is_durable_after_directory_sync() {
        let fs = sim();
        let f = fs.create_new(Path::new("/d/new")).unwrap();
        f.write_all_at(b"new", 0).unwrap();
        f.sync_all().unwrap();
        fs.rename(Path::new("/d/new"), Path::new("/d/cur")).unwrap();
        let st = fs.crash_state();
        let names: BTreeSet<Vec<PathBuf>> = st
            .specs(4)
            .iter()
            .map(|s| {
                st.image(s, Path::new("/d"))
                    .unwrap()
                    .entries
                    .keys()
                    .cloned()
                    .collect()
            })
            .collect();
        assert!(names.contains(&vec![]));
        assert!(names.contains(&vec![PathBuf::from("new")]));
        assert!(names.contains(&vec![PathBuf::from("cur")]));
    }

    #[test]
    fn faults_fire_at_their_operation() {
        let sim = sim();
        let fs = FaultFs::new(Arc::new(sim.clone()));
        fs.fail_at(1, FaultKind::ShortWrite, false);
        let f = fs.create_new(Path::new("/d/a")).unwrap();
        f.write_all_at(b"abcdefgh", 0).unwrap(); // op 1 short, op 2 the rest
        assert_eq!(sim.current(Path::new("/d/a")).unwrap(), b"abcdefgh");
        assert_eq!(fs.fired(), 1);
        fs.fail_at(3, FaultKind::Enospc, true);
        assert!(f.len().is_ok()); // op 3: a read, ENOSPC does not apply
        assert!(f.sync_data().is_err());
        fs.crash_at(5);
        assert!(f.write_all_at(b"x", 0).is_err());
        assert!(fs.crashed());
        drop(f);
        assert_eq!(sim.open_handles(), 0);
    }
}
