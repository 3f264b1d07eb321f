//! The chunk book: the chunk ids and working sizes a writer and its append tasks share.

use crate::error::{Error, Result};
use crate::format::MAX_CHUNKS;
use crate::io::vfs::Vfs;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

/// The chunk ids and sizes the append tasks and the writer share.
#[derive(Debug, Default)]
pub(crate) struct Book {
    /// Working chunk sizes: committed sizes plus bytes appended since.
    pub sizes: BTreeMap<u16, u64>,
    /// Per append task, where the search for a free chunk id starts.
    hints: Vec<u32>,
    /// A chunk file was created since the last commit: the chunk directory needs an `fsync`.
    pub created_chunk_file: bool,
    /// Chunks sealed since the last commit, still to be synced. Their descriptors were closed at
    /// sealing (a task may seal thousands of chunks between commits); the commit reopens each
    /// to `fdatasync` it, which flushes the file's dirty pages whichever descriptor wrote them,
    /// and since Linux 4.16 reports a writeback error no descriptor has seen yet.
    pub sealed: Vec<PathBuf>,
}

impl Book {
    /// A book of the committed chunks `sizes`.
    pub fn new(sizes: BTreeMap<u16, u64>) -> Book {
        Book {
            sizes,
            ..Book::default()
        }
    }

    /// Takes a free chunk id for append task `class` of `stride` tasks: the lowest free id at
    /// or after the task's last one among the ids `≡ class (mod stride)`, wrapping, else any free
    /// id. Each task draws from its own residue class, so which ids a task gets does not depend
    /// on how the tasks' rollovers interleave: the same appends give the same files.
    pub fn take_id(&mut self, class: u32, stride: u32) -> Result<u16> {
        let stride = stride.max(1);
        let class = class % stride;
        let slot = class as usize;
        if self.hints.len() <= slot {
            self.hints.resize(slot + 1, 0);
        }
        // Ids of the class are `class + m * stride`; the hint is the next `m`.
        let per_class = MAX_CHUNKS.div_ceil(stride);
        let hint = self.hints.get(slot).copied().unwrap_or(0);
        let own = (0..per_class)
            .map(|k| (hint + k) % per_class)
            .map(|m| (m, class + m * stride))
            .filter(|&(_, i)| i < MAX_CHUNKS)
            .filter_map(|(m, i)| u16::try_from(i).ok().map(|i| (m, i)))
            .find(|(_, i)| !self.sizes.contains_key(i));
        let id = match own {
            Some((m, id)) => {
                if let Some(h) = self.hints.get_mut(slot) {
                    *h = (m + 1) % per_class;
                }
                id
            }
            None => (0..MAX_CHUNKS)
                .filter_map(|i| u16::try_from(i).ok())
                .find(|i| !self.sizes.contains_key(i))
                .ok_or(Error::TooManyChunks { max: MAX_CHUNKS })?,
        };
        self.sizes.insert(id, 0);
        Ok(id)
    }
}

/// What every append task and the writer share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub vfs: Arc<dyn Vfs>,
    pub dir: PathBuf,
    pub chunk_size_bytes: u64,
    pub write_buffer_bytes: usize,
    pub book: Mutex<Book>,
}

impl Shared {
    /// The book, even if a thread panicked while holding it (its state is still consistent:
    /// every update is a single map insert or push).
    pub fn book(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_task_takes_ids_of_its_own_class() {
        let mut b = Book::new(BTreeMap::from([(0, 10), (3, 10)]));
        assert_eq!(b.take_id(0, 2).unwrap(), 2);
        assert_eq!(b.take_id(1, 2).unwrap(), 1);
        assert_eq!(b.take_id(1, 2).unwrap(), 5);
        assert_eq!(b.take_id(0, 2).unwrap(), 4);
        assert_eq!(b.take_id(0, 1).unwrap(), 6);
        // A full class falls back to any free id.
        let mut full = Book::new(
            (0..MAX_CHUNKS)
                .filter(|i| i % 2 == 0)
                .map(|i| (i as u16, 1))
                .collect(),
        );
        assert_eq!(full.take_id(0, 2).unwrap(), 1);
    }
}
