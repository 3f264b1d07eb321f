//! Read-only mappings of committed file prefixes.

use crate::error::{Error, Result};
use std::fs::File;
use std::path::Path;

/// A read-only mapping of the first `len` bytes of a file.
///
/// zrecord maps only committed prefixes: a committed prefix is never overwritten or truncated
/// by zrecord (files grow past it, and cleanup truncates only bytes past the committed size), so
/// the mapping stays valid for as long as it lives. Another program truncating the file would
/// make reads fault (SIGBUS); that is outside zrecord's contract, as for every mmap-based store.
#[derive(Debug)]
pub struct Mapping {
    map: Option<memmap2::Mmap>,
}

impl Mapping {
    /// Maps `len` bytes of `file` (at `path`, for errors). `len == 0` maps nothing.
    pub fn new(file: &File, path: &Path, len: u64) -> Result<Mapping> {
        if len == 0 {
            return Ok(Mapping { map: None });
        }
        let len_usize = usize::try_from(len)
            .map_err(|_| Error::io(path, "mmap", std::io::Error::other("length exceeds usize")))?;
        // SAFETY: the mapping is read-only and covers a committed prefix of the file, which
        // zrecord never modifies or truncates while any snapshot can use it (see the type's docs
        // and the commit rule in docs/FORMAT.md). The caller checked `len <= file size` first.
        let map = unsafe { memmap2::MmapOptions::new().len(len_usize).map(file) }
            .map_err(|e| Error::io(path, "mmap", e))?;
        Ok(Mapping { map: Some(map) })
    }

    /// The mapped bytes.
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or_default()
    }

    /// Hints the kernel that accesses are random (no readahead).
    pub fn advise_random(&self) {
        if let Some(m) = &self.map {
            // Advice is a hint; failing to give it changes speed, never results.
            let _ = m.advise(memmap2::Advice::Random);
        }
    }
}

/// A read-only mapping of a chunk's committed prefix that hands out zero-copy [`bytes::Bytes`]
/// slices; each slice keeps the mapping alive. Advised `MADV_RANDOM`: a random record read must
/// not pull readahead around it.
#[derive(Debug, Clone)]
pub struct SharedMap {
    bytes: bytes::Bytes,
}

impl SharedMap {
    /// Maps the first `len` bytes of `file`. The same contract as [`Mapping::new`]: only a
    /// committed prefix, which zrecord never modifies or truncates.
    pub fn new(file: &File, path: &Path, len: u64) -> Result<SharedMap> {
        if len == 0 {
            return Ok(SharedMap {
                bytes: bytes::Bytes::new(),
            });
        }
        let len_usize = usize::try_from(len)
            .map_err(|_| Error::io(path, "mmap", std::io::Error::other("length exceeds usize")))?;
        // SAFETY: as in `Mapping::new`: read-only, a committed prefix that zrecord never modifies
        // or truncates; the snapshot checked `len <= file size` when it opened the file.
        let map = unsafe { memmap2::MmapOptions::new().len(len_usize).map(file) }
            .map_err(|e| Error::io(path, "mmap", e))?;
        let _ = map.advise(memmap2::Advice::Random);
        Ok(SharedMap {
            bytes: bytes::Bytes::from_owner(map),
        })
    }

    /// The whole mapping.
    pub fn bytes(&self) -> &bytes::Bytes {
        &self.bytes
    }

    /// True if every page holding `offset..offset + len` is in the page cache (`mincore(2)`),
    /// so reading it through the mapping will not block on the disk. False on any doubt.
    pub fn resident(&self, offset: u64, len: usize) -> bool {
        let page = page_size();
        let Ok(offset) = usize::try_from(offset) else {
            return false;
        };
        let Some(end) = offset.checked_add(len.max(1)) else {
            return false;
        };
        if end > self.bytes.len() {
            return false;
        }
        let start = offset - offset % page;
        let span = end - start;
        let pages = span.div_ceil(page);
        let mut vec = [0u8; 64];
        let Some(vec) = vec.get_mut(..pages) else {
            return false; // a record over 64 pages: treat as cold, io_uring reads it well
        };
        let addr = self.bytes.as_ptr().wrapping_add(start);
        // SAFETY: `addr` is page-aligned (the mapping starts on a page boundary and `start` is a
        // multiple of the page size) and `addr..addr + span` lies inside the mapping, which
        // `self.bytes` keeps alive; `vec` has one byte per page of the span.
        let r = unsafe { libc::mincore(addr.cast_mut().cast(), span, vec.as_mut_ptr()) };
        r == 0 && vec.iter().all(|v| v & 1 == 1)
    }
}

/// The system page size.
pub fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no memory-safety preconditions.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
    })
}
