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
