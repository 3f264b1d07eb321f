//! Whole-table scans: every checked offset entry of one field of a snapshot, in index order,
//! read from the table file with large sequential reads.
//!
//! Random record reads look entries up through a mapping advised `MADV_RANDOM`, which is right
//! for a batch of random indices and wrong for a pass over every entry: from a cold page cache
//! each 4 KiB page of the table is one page fault and one small read (a 10M-record table, 240
//! MB, took 8 s that way). A [`Scan`] instead reads the table in [`SCAN_BLOCK_BYTES`] blocks with
//! `pread`, tells the kernel the file is read sequentially, and asks for the next block while it
//! decodes the current one. `zrecord info` and `zrecord verify` scan this way.
//!
//! The table file is reopened by path: committed bytes of a table are never rewritten, and a
//! table generation's file name is never reused. If a later commit has already removed the
//! file, the scan reads the snapshot's own mapping instead (correct, only slower). A table on
//! an object store read on demand (`store/paged.rs`) is read from the store in blocks of the
//! same size, each split into reads of the largest request size issued together.

use crate::error::{Error, Result};
use crate::format::entry::{Entry, ENTRY_BYTES};
use crate::io::fs;
use crate::store::snapshot::{FieldTable, Snapshot};
use std::fs::File;

/// Bytes of offset table read per block: 4 MiB, 174,762 entries.
pub const SCAN_BLOCK_BYTES: usize = (4 << 20) / ENTRY_BYTES * ENTRY_BYTES;

/// Every checked offset entry of one field of a [`Snapshot`], in index order: made by
/// [`Snapshot::scan`]. Yields exactly [`Snapshot::len`] items; the `k`-th is record `k`'s entry,
/// with the checks a read makes (its own CRC, in a committed chunk). A damaged entry is an
/// [`Error::OffsetCorrupt`] item and the scan goes on with the next record; an I/O error
/// reading the table is the last item.
#[must_use = "iterators are lazy and do nothing unless consumed"]
#[derive(Debug)]
pub struct Scan<'a> {
    snap: &'a Snapshot,
    table: &'a FieldTable,
    /// The table file, or `None` to read the snapshot's mapping.
    file: Option<File>,
    /// Entries on disk that can be read: `min(len, table_len)`.
    readable: u64,
    /// Record count of the snapshot.
    len: u64,
    /// The next record index.
    next: u64,
    /// Bytes of the entries from `buf_first` on.
    buf: Vec<u8>,
    buf_first: u64,
    failed: bool,
}

impl Snapshot {
    /// Scans every offset entry of `field` in index order with large sequential reads of its
    /// table: for passes over a whole field (lengths, statistics, verification). A cold 10M-record
    /// table is read in a fraction of the time per-record lookups take.
    ///
    /// ```
    /// # use zrecord::{DType, Dataset, Field, Schema, Writer, WriterConfig};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let tmp = tempfile::tempdir()?;
    /// # let dir = tmp.path().join("ds");
    /// # let mut w = Writer::create(&dir, &Schema::new().field(Field::new("text", DType::Bytes)), WriterConfig::default())?;
    /// # for s in ["a", "", "ccc"] { w.append(&[s.as_bytes()])?; }
    /// # w.commit()?;
    /// # drop(w);
    /// let snap = Dataset::open(&dir)?.snapshot();
    /// let mut bytes = 0;
    /// for entry in snap.scan(snap.field_index("text")?)? {
    ///     bytes += u64::from(entry?.logical_len);
    /// }
    /// assert_eq!(bytes, 4);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::UnknownField`] for a field index out of range; [`Error::InvalidConfig`] for a
    /// collection (scan its parts).
    pub fn scan(&self, field: usize) -> Result<Scan<'_>> {
        if self.is_collection() {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "{} is a collection: scan each of its parts (Snapshot::parts)",
                    self.dir().display()
                ),
            });
        }
        let table = self.table(field)?;
        let readable = self.len().min(table.meta.table.table_len);
        let want = readable.saturating_mul(ENTRY_BYTES as u64);
        // The file only if it still holds the committed prefix; otherwise the mapping.
        // A paged table (on an object store) is read from its source in blocks.
        let file = (table.paged.is_none())
            .then(|| fs::open_read(&table.table_path).ok())
            .flatten()
            .filter(|f| fs::file_len(f, &table.table_path).is_ok_and(|n| n >= want));
        if let Some(f) = &file {
            fs::advise_sequential(f, 0, SCAN_BLOCK_BYTES as u64);
        }
        Ok(Scan {
            snap: self,
            table,
            file,
            readable,
            len: self.len(),
            next: 0,
            buf: Vec::new(),
            buf_first: 0,
            failed: false,
        })
    }
}

impl Scan<'_> {
    /// Reads the block of entries that starts at record `first` into `buf`.
    fn fill(&mut self, first: u64) -> Result<()> {
        let entries = (self.readable - first).min((SCAN_BLOCK_BYTES / ENTRY_BYTES) as u64);
        let start = first * ENTRY_BYTES as u64;
        let n = usize::try_from(entries).unwrap_or(0) * ENTRY_BYTES;
        self.buf.resize(n, 0);
        self.buf_first = first;
        match &self.file {
            Some(f) => {
                fs::read_exact_at(f, &self.table.table_path, &mut self.buf, start)?;
                // The kernel reads the next block while this one is decoded.
                fs::advise_sequential(f, start + n as u64, SCAN_BLOCK_BYTES as u64);
            }
            None if self.table.paged.is_some() => {
                if let Some(p) = &self.table.paged {
                    self.buf = p.read_entries(first, entries)?;
                }
            }
            None => {
                let from = usize::try_from(start).ok();
                let src = from
                    .and_then(|s| self.table.map.bytes().get(s..s + n))
                    .ok_or_else(|| {
                        self.table
                            .corrupt(first, "index past the committed table".to_string())
                    })?;
                self.buf.copy_from_slice(src);
            }
        }
        Ok(())
    }

    /// The checked entry of record `index`, `index < readable`, from the buffer.
    fn entry(&mut self, index: u64) -> Result<Entry> {
        if let Some(e) = self.table.patches.get(&index) {
            return self.snap.check_in_chunk(self.table, index, *e);
        }
        let in_buf = index
            .checked_sub(self.buf_first)
            .filter(|&k| k < (self.buf.len() / ENTRY_BYTES) as u64);
        let k = match in_buf {
            Some(k) => k,
            None => {
                self.fill(index)?;
                0
            }
        };
        let at = usize::try_from(k)
            .unwrap_or(usize::MAX)
            .saturating_mul(ENTRY_BYTES);
        let raw = self
            .buf
            .get(at..at.saturating_add(ENTRY_BYTES))
            .ok_or_else(|| {
                self.table
                    .corrupt(index, "entry past the table read".to_string())
            })?;
        let e = Entry::decode(index, raw).map_err(|reason| self.table.corrupt(index, reason))?;
        self.snap.check_in_chunk(self.table, index, e)
    }
}

impl Iterator for Scan<'_> {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Result<Entry>> {
        if self.failed || self.next >= self.len {
            return None;
        }
        let index = self.next;
        self.next += 1;
        if index >= self.readable {
            return Some(Err(self
                .table
                .corrupt(index, "index past the committed table".to_string())));
        }
        let item = self.entry(index);
        if let Err(Error::Io { .. }) = &item {
            self.failed = true;
        }
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = if self.failed {
            0
        } else {
            usize::try_from(self.len - self.next).unwrap_or(usize::MAX)
        };
        (left, Some(left))
    }
}

impl std::iter::FusedIterator for Scan<'_> {}
