//! Offset tables read on demand in pages: a table a [`Location`](crate::Location) does not hand
//! over whole (a table object on an object store) is read in pages of a fixed number of
//! entries when a batch needs them, from a local page file or through a [`PageSource`].
//!
//! - Page `p` holds entries `[p·P, (p+1)·P)` (the last one shorter): bytes
//!   `[24·p·P, 24·(p+1)·P)` of the table.
//! - An entry is read from memory (pages fetched recently), else from the local page file
//!   (a sparse file the table's size) with one positioned read, and used only if its own
//!   `entry_crc`, which covers the index it stands for, checks. An entry the file lacks (a hole
//!   reads as zeros, which no entry's CRC accepts) or holds damaged has its page fetched from
//!   the source. A fetched page whose every entry checks is written to the file (repairing
//!   it); one that does not is kept in memory only, so its intact entries serve their records
//!   and each damaged one is `OffsetCorrupt` on use, as a damaged local table's.
//!   docs/ARCHITECTURE.md ("Offset tables on demand") says why no other check is needed for
//!   "never wrong bytes".
//! - At most [`RESIDENT_PAGES`] pages of a table stay in memory beyond those of the load in
//!   progress; a dropped page is read from the page file, or fetched again without one.
//! - A page file is opened (created the table's size) on first use and closed when least
//!   recently used under the process's descriptor budget, the one chunk files use
//!   (`store/read/chunks.rs`): a collection of thousands of parts holds at most that many
//!   descriptors, whatever its number of tables.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use crate::error::{Error, Result};
use crate::format::entry::{Entry, ENTRY_BYTES};
use crate::io::coalesce::{Coalesce, Runs};
use crate::io::fork::{take_unlocked, ForkLocal};
use crate::store::read::chunks::{
    enlist_file, release_descriptor, reserve_descriptor, BudgetedFile,
};

/// Pages of one table kept in memory after a load, at most (64 MiB at 64 KiB pages). A table
/// with a page file keeps them there too.
pub(crate) const RESIDENT_PAGES: usize = 1024;

/// One byte range of a table object to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PageRead {
    /// The object's key.
    pub(crate) object: String,
    /// The bytes wanted.
    pub(crate) range: Range<u64>,
}

/// Where the pages of a location's tables come from.
pub(crate) trait PageSource: Send + Sync + std::fmt::Debug {
    /// The bytes of every read of `reads`, in order: issued together (blocking the calling
    /// thread, never a runtime worker's).
    fn fetch(&self, reads: Vec<PageRead>) -> Result<Vec<bytes::Bytes>>;

    /// The largest read [`PageSource::fetch`] should be asked for.
    fn max_read(&self) -> u64;
}

/// One field's offset table, read in pages.
#[derive(Debug)]
pub(crate) struct PagedTable {
    /// What names the table in errors (its object's URL).
    path: PathBuf,
    /// The table object's key.
    object: String,
    /// Committed entries.
    table_len: u64,
    /// Entries per page.
    page_entries: u64,
    source: Arc<dyn PageSource>,
    /// The local page file (sparse, the table's size), if the table has one.
    file: Option<PageFile>,
    resident: RwLock<Resident>,
}

/// A table's page file: opened on use within the process's descriptor budget, closed by it
/// when least recently used.
#[derive(Debug)]
struct PageFile {
    path: PathBuf,
    /// The table's size in bytes: the file is made at least this long when opened.
    len: u64,
    held: Arc<HeldFile>,
}

/// The descriptor of a page file, while the budget lets it stay open.
#[derive(Debug, Default)]
struct HeldFile {
    /// The open file, per process (a child of `fork()` takes over the parent's unless a
    /// parent thread held the lock at the fork).
    file: ForkLocal<Mutex<Option<Arc<File>>>>,
    used: AtomicBool,
    /// The file cannot be made here (a read-only cache directory, say): the table's pages
    /// stay in memory only, as without a page file.
    refused: AtomicBool,
}

impl HeldFile {
    fn slot(&self) -> &Mutex<Option<Arc<File>>> {
        self.file
            .get_or_init(|parent| Mutex::new(parent.and_then(take_unlocked).flatten()))
    }
}

impl BudgetedFile for HeldFile {
    fn used(&self) -> &AtomicBool {
        &self.used
    }

    fn take(&self) -> Option<Arc<File>> {
        self.slot()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

impl Drop for HeldFile {
    fn drop(&mut self) {
        let held = self
            .slot()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if held.is_some() {
            release_descriptor();
        }
    }
}

impl PageFile {
    /// The open file, opened (and created or extended to the table's size) within the
    /// descriptor budget if it is not; `None` if it cannot be.
    fn get(&self) -> Option<Arc<File>> {
        self.held.used.store(true, Ordering::Release);
        let slot = self.held.slot();
        if let Some(f) = &*slot.lock().unwrap_or_else(PoisonError::into_inner) {
            return Some(Arc::clone(f));
        }
        if self.held.refused.load(Ordering::Acquire) {
            return None;
        }
        reserve_descriptor();
        let opened = self.open();
        let file = match opened {
            Ok(f) => Arc::new(f),
            Err(e) => {
                release_descriptor();
                // Out of descriptors is passing; anything else is this directory's for good.
                let passing = matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
                if !passing && !self.held.refused.swap(true, Ordering::AcqRel) {
                    tracing::debug!(path = %self.path.display(), error = %e,
                        "cannot keep offset-table pages in a file; they stay in memory");
                }
                return None;
            }
        };
        let mut guard = slot.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(theirs) = &*guard {
            let theirs = Arc::clone(theirs);
            drop(guard);
            release_descriptor();
            return Some(theirs);
        }
        *guard = Some(Arc::clone(&file));
        drop(guard);
        let held: Arc<dyn BudgetedFile> = Arc::clone(&self.held) as Arc<dyn BudgetedFile>;
        enlist_file(Arc::downgrade(&held));
        Some(file)
    }

    fn open(&self) -> std::io::Result<File> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.path)?;
        if f.metadata()?.len() < self.len {
            f.set_len(self.len)?;
        }
        crate::io::fs::advise_random(&f);
        Ok(f)
    }
}

/// The pages in memory, and the order they came in (the oldest is dropped first).
#[derive(Debug, Default)]
struct Resident {
    pages: HashMap<u64, Arc<[u8]>>,
    order: VecDeque<u64>,
}

impl PagedTable {
    /// The table of `table_len` entries in object `object` (named `path` in errors), read
    /// through `source` in pages of `page_bytes` (rounded down to whole entries, at least one),
    /// kept in the page file `file` if it can be opened or created there (on first use, within
    /// the descriptor budget). Made by the object-store backend only (feature `remote`).
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    pub(crate) fn new(
        path: PathBuf,
        object: String,
        table_len: u64,
        page_bytes: u64,
        source: Arc<dyn PageSource>,
        file: Option<&Path>,
    ) -> PagedTable {
        let page_entries = (page_bytes / ENTRY_BYTES as u64).max(1);
        let file = file.map(|p| PageFile {
            path: p.to_path_buf(),
            len: table_len.saturating_mul(ENTRY_BYTES as u64),
            held: Arc::new(HeldFile::default()),
        });
        PagedTable {
            path,
            object,
            table_len,
            page_entries,
            source,
            file,
            resident: RwLock::new(Resident::default()),
        }
    }

    /// What names the table in errors.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Committed entries.
    pub(crate) fn len(&self) -> u64 {
        self.table_len
    }

    /// The page holding entry `index`.
    pub(crate) fn page_of(&self, index: u64) -> u64 {
        index / self.page_entries
    }

    /// The entries of page `page`.
    fn entries(&self, page: u64) -> Range<u64> {
        let start = page.saturating_mul(self.page_entries).min(self.table_len);
        start..start.saturating_add(self.page_entries).min(self.table_len)
    }

    /// The bytes of entries `r` in the table.
    fn bytes(r: &Range<u64>) -> Range<u64> {
        r.start.saturating_mul(ENTRY_BYTES as u64)..r.end.saturating_mul(ENTRY_BYTES as u64)
    }

    /// True if page `page` is in memory.
    pub(crate) fn is_resident(&self, page: u64) -> bool {
        self.resident
            .read()
            .is_ok_and(|r| r.pages.contains_key(&page))
    }

    /// True if reading entry `index` needs its page fetched: the page is not in memory, and
    /// the page file does not hold the entry intact.
    pub(crate) fn needs_fetch(&self, index: u64) -> bool {
        !self.is_resident(self.page_of(index)) && self.entry_in_file(index).is_none()
    }

    /// The 24 bytes of entry `index` (< table_len): from memory, else from the page file if it
    /// holds the entry intact, else its page is fetched first.
    pub(crate) fn entry_bytes(&self, index: u64) -> Result<[u8; ENTRY_BYTES]> {
        let page = self.page_of(index);
        for _ in 0..2 {
            let found = self.resident.read().ok().and_then(|r| {
                let bytes = r.pages.get(&page)?;
                let at = usize::try_from(index.checked_sub(self.entries(page).start)?).ok()?;
                let at = at.checked_mul(ENTRY_BYTES)?;
                let raw = bytes.get(at..at.checked_add(ENTRY_BYTES)?)?;
                <[u8; ENTRY_BYTES]>::try_from(raw).ok()
            });
            if let Some(raw) = found.or_else(|| self.entry_in_file(index)) {
                return Ok(raw);
            }
            load(&[(self, index)])?;
        }
        Err(Error::internal(format!(
            "page {page} of {} was loaded and is not in memory",
            self.path.display()
        )))
    }

    /// True if every entry of `bytes`, page `page`'s, checks with the index it stands for.
    fn intact(&self, page: u64, bytes: &[u8]) -> bool {
        let r = self.entries(page);
        bytes.len() as u64 == (r.end - r.start).saturating_mul(ENTRY_BYTES as u64)
            && r.zip(bytes.chunks_exact(ENTRY_BYTES))
                .all(|(index, raw)| Entry::decode(index, raw).is_ok())
    }

    /// Entry `index` from the page file, if it is there and intact (its own CRC, with its
    /// index: a hole of the sparse file reads as zeros, which no entry's CRC accepts).
    fn entry_in_file(&self, index: u64) -> Option<[u8; ENTRY_BYTES]> {
        let pages = self.file.as_ref()?;
        let file = pages.get()?;
        let mut raw = [0u8; ENTRY_BYTES];
        let at = index.checked_mul(ENTRY_BYTES as u64)?;
        crate::io::fs::read_exact_at(&file, &pages.path, &mut raw, at).ok()?;
        Entry::decode(index, &raw).is_ok().then_some(raw)
    }

    /// Keeps `bytes` as page `page` (and in the page file if it is intact).
    fn keep(&self, page: u64, bytes: Vec<u8>) {
        if self.intact(page, &bytes) {
            if let Some((pages, file)) = self.file.as_ref().and_then(|p| Some((p, p.get()?))) {
                let at = Self::bytes(&self.entries(page)).start;
                // The file is a cache: a failed write costs a later fetch, never a result.
                let _ = crate::io::fs::write_all_at(&file, &pages.path, &bytes, at);
            }
        }
        if let Ok(mut r) = self.resident.write() {
            if r.pages.insert(page, bytes.into()).is_none() {
                r.order.push_back(page);
            }
        }
    }

    /// Drops the oldest pages until `room` more fit under [`RESIDENT_PAGES`].
    fn make_room(&self, room: usize) {
        if let Ok(mut r) = self.resident.write() {
            while r.pages.len().saturating_add(room) > RESIDENT_PAGES {
                let Some(old) = r.order.pop_front() else {
                    break;
                };
                r.pages.remove(&old);
            }
        }
    }

    /// Entries `first..first + count` of the table, read straight from the source in reads of
    /// at most its largest read, issued together (a scan's block: not kept in memory).
    pub(crate) fn read_entries(&self, first: u64, count: u64) -> Result<Vec<u8>> {
        let end = first.saturating_add(count).min(self.table_len);
        let r = Self::bytes(&(first.min(end)..end));
        let step = (self.source.max_read() / ENTRY_BYTES as u64).max(1) * ENTRY_BYTES as u64;
        let mut reads = Vec::new();
        let mut at = r.start;
        while at < r.end {
            let to = at.saturating_add(step).min(r.end);
            reads.push(PageRead {
                object: self.object.clone(),
                range: at..to,
            });
            at = to;
        }
        let want: Vec<u64> = reads.iter().map(|x| x.range.end - x.range.start).collect();
        let got = self.source.fetch(reads)?;
        let mut out = Vec::with_capacity(usize::try_from(r.end - r.start).unwrap_or(0));
        for (b, n) in got.iter().zip(want) {
            self.check_len(b.len(), n)?;
            out.extend_from_slice(b);
        }
        Ok(out)
    }

    /// A fetched range of `actual` bytes where `expected` were asked for: `Truncated`.
    fn check_len(&self, actual: usize, expected: u64) -> Result<()> {
        if actual as u64 != expected {
            return Err(Error::Truncated {
                path: self.path.clone(),
                expected,
                actual: actual as u64,
            });
        }
        Ok(())
    }
}

/// Fetches the pages of the entries `wanted` names (`(table, entry index)`, any order,
/// duplicates allowed) whose page is not in memory and whose entry the page file does not hold
/// intact: through their sources, adjacent pages of one table sharing a read, every read of a
/// source issued together. Blocking: one round trip for all of them. Each intact page fetched
/// is written to its table's page file, which repairs a damaged one.
pub(crate) fn load(wanted: &[(&PagedTable, u64)]) -> Result<()> {
    // Per table (by address), its pages to fetch, sorted.
    let mut by_table: Vec<(&PagedTable, Vec<u64>)> = Vec::new();
    for &(t, index) in wanted {
        if !t.needs_fetch(index) {
            continue;
        }
        let page = t.page_of(index);
        match by_table.iter_mut().find(|(x, _)| std::ptr::eq(*x, t)) {
            Some((_, pages)) => pages.push(page),
            None => by_table.push((t, vec![page])),
        }
    }
    // Per source (by address): its reads, and for each the table and pages it covers.
    type Plan<'a> = (Vec<PageRead>, Vec<(&'a PagedTable, Vec<u64>)>);
    let mut by_source: Vec<(*const (), Plan<'_>)> = Vec::new();
    for (t, mut pages) in by_table {
        pages.sort_unstable();
        pages.dedup();
        t.make_room(pages.len());
        let missing = pages;
        let key = Arc::as_ptr(&t.source).cast::<()>();
        let at = match by_source.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                by_source.push((key, (Vec::new(), Vec::new())));
                by_source.len() - 1
            }
        };
        let Some((_, (reads, covers))) = by_source.get_mut(at) else {
            continue;
        };
        // The one coalescing rule (`io/coalesce.rs`): adjacent pages share a read up to the
        // source's largest, a page never split.
        let spans: Vec<Range<u64>> = missing
            .iter()
            .map(|&p| PagedTable::bytes(&t.entries(p)))
            .collect();
        let page_bytes = spans.iter().map(|r| r.end - r.start).max().unwrap_or(0);
        let max = t.source.max_read().max(ENTRY_BYTES as u64).max(page_bytes);
        let mut runs = Runs::default();
        Coalesce::pages(max).runs(&spans, false, &mut runs);
        for run in runs.runs {
            let parts = runs.parts.get(run.parts).unwrap_or_default();
            reads.push(PageRead {
                object: t.object.clone(),
                range: run.range,
            });
            covers.push((
                t,
                parts
                    .iter()
                    .filter_map(|part| missing.get(part.read).copied())
                    .collect(),
            ));
        }
    }
    for (_, (reads, covers)) in by_source {
        let Some(source) = covers.first().map(|(t, _)| Arc::clone(&t.source)) else {
            continue;
        };
        let want: Vec<u64> = reads.iter().map(|r| r.range.end - r.range.start).collect();
        let got = source.fetch(reads)?;
        for ((body, n), (t, pages)) in got.iter().zip(want).zip(covers) {
            t.check_len(body.len(), n)?;
            let mut at = 0usize;
            for p in pages {
                let r = PagedTable::bytes(&t.entries(p));
                let len = usize::try_from(r.end - r.start).unwrap_or(0);
                let bytes = body
                    .get(at..at.saturating_add(len))
                    .ok_or_else(|| Error::internal(format!("page {p} past its read")))?;
                t.keep(p, bytes.to_vec());
                at = at.saturating_add(len);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Mutex;

    /// A source over bytes in memory that counts its reads and can damage bytes.
    #[derive(Debug, Default)]
    struct Mem {
        bytes: Mutex<Vec<u8>>,
        reads: AtomicU64,
        fetches: AtomicU64,
    }

    impl PageSource for Mem {
        fn fetch(&self, reads: Vec<PageRead>) -> Result<Vec<bytes::Bytes>> {
            self.fetches.fetch_add(1, Ordering::Relaxed);
            let b = self.bytes.lock().unwrap();
            Ok(reads
                .iter()
                .map(|r| {
                    self.reads.fetch_add(1, Ordering::Relaxed);
                    let (s, e) = (r.range.start as usize, r.range.end as usize);
                    bytes::Bytes::copy_from_slice(&b[s..e.min(b.len())])
                })
                .collect())
        }

        fn max_read(&self) -> u64 {
            4 * 240
        }
    }

    fn table(n: u64) -> Vec<u8> {
        (0..n)
            .flat_map(|i| {
                Entry {
                    chunk: 0,
                    offset: i * 10,
                    physical_len: 10,
                    logical_len: 10,
                    ..Entry::EMPTY
                }
                .encode(i)
            })
            .collect()
    }

    fn paged(src: &Arc<Mem>, n: u64, file: Option<&Path>) -> PagedTable {
        let source: Arc<dyn PageSource> = Arc::clone(src) as Arc<dyn PageSource>;
        PagedTable::new("t".into(), "obj".into(), n, 240, source, file)
    }

    #[test]
    fn entries_come_from_their_pages_in_one_fetch() {
        let src = Arc::new(Mem::default());
        *src.bytes.lock().unwrap() = table(105);
        let t = paged(&src, 105, None);
        let want: Vec<_> = [0u64, 3, 11, 12, 27, 104]
            .iter()
            .map(|&i| (&t, i))
            .collect();
        load(&want).unwrap();
        assert_eq!(src.fetches.load(Ordering::Relaxed), 1);
        // Pages 0, 1 and 2 are adjacent: one read; then 10 (the last, 5 entries).
        assert_eq!(src.reads.load(Ordering::Relaxed), 2);
        for i in [0u64, 3, 11, 12, 27, 104] {
            let e = Entry::decode(i, &t.entry_bytes(i).unwrap()).unwrap();
            assert_eq!(e.offset, i * 10);
        }
        assert_eq!(src.fetches.load(Ordering::Relaxed), 1, "all were resident");
    }

    #[test]
    fn a_damaged_page_file_is_fetched_again_and_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t.pages");
        let src = Arc::new(Mem::default());
        *src.bytes.lock().unwrap() = table(50);
        let t = paged(&src, 50, Some(&file));
        t.entry_bytes(23).unwrap();
        drop(t);
        let mut on_disk = std::fs::read(&file).unwrap();
        assert_eq!(on_disk.len(), 50 * 24);
        assert_eq!(on_disk[20 * 24..30 * 24], table(50)[20 * 24..30 * 24]);
        on_disk[22 * 24 + 3] ^= 0x10;
        std::fs::write(&file, &on_disk).unwrap();
        let t = paged(&src, 50, Some(&file));
        let e = Entry::decode(22, &t.entry_bytes(22).unwrap()).unwrap();
        assert_eq!(e.offset, 220);
        assert_eq!(src.fetches.load(Ordering::Relaxed), 2, "refetched");
        assert_eq!(
            std::fs::read(&file).unwrap()[20 * 24..30 * 24],
            table(50)[20 * 24..30 * 24]
        );
        // An intact page of the file needs no fetch.
        let t = paged(&src, 50, Some(&file));
        t.entry_bytes(25).unwrap();
        assert_eq!(src.fetches.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_damaged_page_of_the_source_is_an_error_only_for_its_damaged_entries() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t.pages");
        let src = Arc::new(Mem::default());
        let mut b = table(30);
        b[14 * 24 + 5] ^= 1;
        *src.bytes.lock().unwrap() = b;
        let t = paged(&src, 30, Some(&file));
        assert!(Entry::decode(14, &t.entry_bytes(14).unwrap()).is_err());
        assert!(Entry::decode(15, &t.entry_bytes(15).unwrap()).is_ok());
        // Not written to the file: a hole reads as zeros, which no entry's CRC accepts.
        assert!(std::fs::read(&file).unwrap()[10 * 24..20 * 24]
            .iter()
            .all(|&x| x == 0));
    }

    #[test]
    fn memory_holds_a_bounded_number_of_pages() {
        let src = Arc::new(Mem::default());
        let n = (RESIDENT_PAGES as u64 + 100) * 10;
        *src.bytes.lock().unwrap() = table(n);
        let t = paged(&src, n, None);
        for i in (0..n).step_by(10) {
            t.entry_bytes(i).unwrap();
        }
        assert!(t.resident.read().unwrap().pages.len() <= RESIDENT_PAGES);
        // Dropped pages are fetched again.
        assert_eq!(
            Entry::decode(0, &t.entry_bytes(0).unwrap()).unwrap().offset,
            0
        );
    }

    #[test]
    fn scans_read_ranges_in_reads_of_the_largest_size() {
        let src = Arc::new(Mem::default());
        *src.bytes.lock().unwrap() = table(100);
        let t = paged(&src, 100, None);
        let got = t.read_entries(5, 50).unwrap();
        assert_eq!(got, table(100)[5 * 24..55 * 24]);
        assert_eq!(src.reads.load(Ordering::Relaxed), 2);
        assert_eq!(t.read_entries(90, 50).unwrap().len(), 10 * 24);
    }
}
