//! Rebalance (`docs/FORMAT.md`, "Rebalance"): every live record rewritten, in index order, into
//! fresh chunks, every offset table written as a new generation, and both committed by one
//! `meta.json` rename; then the old chunks are unlinked. Reported as a [`RebalanceReport`].

use super::appender::Appender;
use super::book::Shared;
use super::commit::sync_sealed;
use super::tables::Core;
use super::task::Msg;
use super::wait::wait;
use super::{task_gone, Writer};
use crate::error::{Error, Result};
use crate::format::entry::{Entry, ENTRY_BYTES};
use crate::format::meta::{ChunkMeta, TableMeta};
use crate::io::vfs::VfsFile;
use crate::store::layout;
use futures::channel::oneshot;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Old chunks a rebalance keeps open at once.
const MAX_OPEN_READERS: usize = 64;

/// What [`Writer::rebalance`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RebalanceReport {
    /// The generation of the rebalanced commit.
    pub generation: u64,
    /// Records rewritten.
    pub records: u64,
    /// Stored bytes of every live record and field (what the chunks must hold at least).
    pub live_bytes: u64,
    /// Bytes held in chunk files before (their committed sizes).
    pub chunk_bytes_before: u64,
    /// Bytes held in chunk files after.
    pub chunk_bytes_after: u64,
    /// Chunk files before.
    pub chunks_before: usize,
    /// Chunk files after.
    pub chunks_after: usize,
    /// The dataset's chunk size (a chunk is sealed when the next record would pass it).
    pub chunk_size_bytes: u64,
}

impl RebalanceReport {
    /// Live stored bytes / bytes held in chunk files, before (1.0 when the chunks were empty).
    pub fn utilization_before(&self) -> f64 {
        ratio(self.live_bytes, self.chunk_bytes_before)
    }

    /// Live stored bytes / bytes held in chunk files, after: 1.0 (every byte is live).
    pub fn utilization_after(&self) -> f64 {
        ratio(self.live_bytes, self.chunk_bytes_after)
    }

    /// The seed's measure, before: live stored bytes / (`chunk_size_bytes` × chunks), which also
    /// counts the unused tail of every chunk.
    pub fn capacity_utilization_before(&self) -> f64 {
        ratio(
            self.live_bytes,
            self.chunk_size_bytes
                .saturating_mul(self.chunks_before as u64),
        )
    }

    /// The seed's measure, after: live stored bytes / (`chunk_size_bytes` × chunks).
    pub fn capacity_utilization_after(&self) -> f64 {
        ratio(
            self.live_bytes,
            self.chunk_size_bytes
                .saturating_mul(self.chunks_after as u64),
        )
    }
}

fn ratio(live: u64, held: u64) -> f64 {
    if held == 0 {
        1.0
    } else {
        live as f64 / held as f64
    }
}

impl Writer {
    /// [`Writer::rebalance`]: commit what is pending, seal every task's chunk, rewrite, and let
    /// task 0 continue the last new chunk.
    pub(super) fn rebalance_all(&mut self) -> Result<RebalanceReport> {
        wait(async {
            self.ready().await?;
            self.finish_jobs().await
        })?;
        if self.has_pending() {
            self.commit()?;
        }
        let r = wait(self.ask_tasks(|tx: oneshot::Sender<Result<()>>| Msg::Seal(tx)));
        self.poison_on(r)?;
        // The sealed chunks were synced by the last commit and nothing was appended since.
        self.shared.book().sealed.clear();
        let r = self.core().rebalance(&self.shared, self.len);
        let (report, resume) = self.poison_on(r)?;
        self.generation = report.generation;
        // Task 0 continues the last rebalanced chunk, if it has room.
        let mut sizes = vec![None; self.tasks.len()];
        if let Some((id, size)) = resume {
            let r = wait(async {
                let t = self.tasks.first_mut().ok_or_else(task_gone)?;
                futures::future::poll_fn(|cx| t.tx.poll_ready(cx))
                    .await
                    .map_err(|_| task_gone())?;
                t.tx.start_send(Msg::Resume(id, size))
                    .map_err(|_| task_gone())
            });
            self.poison_on(r)?;
            if let Some(s) = sizes.first_mut() {
                *s = Some(size);
            }
        }
        self.resync(sizes);
        Ok(report)
    }
}

impl Core {
    /// The rebalance itself, on a committed writer whose tasks hold no open chunk. Returns the
    /// report and the last new chunk if it has room (for a task to continue).
    fn rebalance(
        &mut self,
        shared: &Arc<Shared>,
        len: u64,
    ) -> Result<(RebalanceReport, Option<(u16, u64)>)> {
        let old: Vec<ChunkMeta> = self.meta.chunks.clone();
        let chunk_bytes_before: u64 = old.iter().map(|c| c.size).sum();
        // New table generations, written block by block as records are copied: memory stays
        // bounded by one block per field whatever the dataset's size.
        let mut tables = Vec::with_capacity(self.fields.len());
        for wf in &self.fields {
            let generation =
                wf.table()
                    .generation
                    .checked_add(1)
                    .ok_or(crate::Error::TooManyCommits {
                        generation: wf.table().generation,
                    })?;
            let name = &wf.committed.meta.name;
            let tpath = layout::table(&self.dir, name, generation);
            let ppath = layout::patches(&self.dir, name, generation);
            for p in [&tpath, &ppath] {
                // A leftover of a crashed compaction or rebalance is not named by any commit.
                if self.vfs.exists(p)? {
                    self.vfs.remove_file(p)?;
                }
            }
            let table = self.vfs.create_new(&tpath)?;
            let patches = self.vfs.create_new(&ppath)?;
            tables.push((generation, table, patches));
        }
        // A fresh chunk, not a continued old one: old chunks are all about to go.
        let mut appender = Appender::new(shared.clone(), 0, 1);
        let mut readers: BTreeMap<u16, Box<dyn VfsFile>> = BTreeMap::new();
        let mut live_bytes = 0u64;
        let mut stored = Vec::new();
        const BLOCK: u64 = 16 * 1024;
        let mut blocks: Vec<Vec<u8>> = vec![Vec::new(); self.fields.len()];
        let mut start = 0u64;
        while start < len {
            let end = (start + BLOCK).min(len);
            for b in &mut blocks {
                b.clear();
            }
            for index in start..end {
                for (f, block) in blocks.iter_mut().enumerate() {
                    let e =
                        self.copy_record(f, index, &old, &mut readers, &mut stored, &mut appender)?;
                    live_bytes += u64::from(e.physical_len);
                    block.extend_from_slice(&e.encode(index));
                }
            }
            for ((_, table, _), block) in tables.iter().zip(&blocks) {
                table.write_all_at(block, start * ENTRY_BYTES as u64)?;
            }
            start = end;
        }
        drop(readers);
        {
            let mut book = shared.book();
            for c in &old {
                book.sizes.remove(&c.id);
            }
        }
        appender.sync()?;
        let resume = appender
            .open_chunk()
            .filter(|&(_, size)| size < shared.chunk_size_bytes);
        drop(appender);
        sync_sealed(shared)?;
        for (_, table, patches) in &tables {
            table.sync_data()?;
            patches.sync_data()?;
        }
        self.vfs.sync_dir(&self.dir)?;
        let metas: Vec<TableMeta> = tables
            .iter()
            .map(|(generation, _, _)| TableMeta {
                generation: *generation,
                table_len: len,
                patch_len: 0,
            })
            .collect();
        drop(tables);
        let generation = self.publish(shared, &metas, len)?;
        // The new commit is durable; the old chunks are garbage. Open snapshots hold their own
        // descriptors (see `Snapshot`), so unlinking cannot disturb them.
        for c in &old {
            let p = layout::chunk(&self.dir, c.id);
            if let Err(e) = self.vfs.remove_file(&p) {
                tracing::warn!(path = %p.display(), error = %e, "could not remove a chunk the rebalanced commit no longer uses");
            }
        }
        let chunk_bytes_after: u64 = self.meta.chunks.iter().map(|c| c.size).sum();
        let report = RebalanceReport {
            generation,
            records: len,
            live_bytes,
            chunk_bytes_before,
            chunk_bytes_after,
            chunks_before: old.len(),
            chunks_after: self.meta.chunks.len(),
            chunk_size_bytes: self.meta.chunk_size_bytes,
        };
        Ok((report, resume))
    }

    /// Copies the stored bytes of field `f` of record `index` into `appender`'s chunk (checking
    /// them against their CRC32C); returns the record's new entry.
    fn copy_record(
        &mut self,
        f: usize,
        index: u64,
        old: &[ChunkMeta],
        readers: &mut BTreeMap<u16, Box<dyn VfsFile>>,
        buf: &mut Vec<u8>,
        appender: &mut Appender,
    ) -> Result<Entry> {
        let wf = self.fields.get(f).ok_or_else(|| Error::UnknownField {
            field: format!("#{f}"),
        })?;
        let e = wf.entry(index)?;
        if e.physical_len == 0 {
            return Ok(e);
        }
        let size = old.iter().find(|c| c.id == e.chunk).map(|c| c.size);
        if size.is_none_or(|s| e.end() > s) {
            return Err(wf.committed.corrupt(
                index,
                format!("record ends past committed chunk {}", e.chunk),
            ));
        }
        let path = layout::chunk(&self.dir, e.chunk);
        if readers.len() >= MAX_OPEN_READERS && !readers.contains_key(&e.chunk) {
            // Bounded descriptors, whatever the number of chunks (index order visits chunks
            // mostly in the order they were written, so few are reopened).
            readers.clear();
        }
        let file = match readers.entry(e.chunk) {
            std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::btree_map::Entry::Vacant(v) => v.insert(self.vfs.open_read(&path)?),
        };
        buf.resize(e.physical_len as usize, 0);
        file.read_exact_at(buf, e.offset)?;
        let crc = crate::checksum::crc32c(buf);
        if crc != e.data_crc {
            return Err(Error::ChecksumMismatch {
                path,
                field: wf.committed.meta.name.clone(),
                index,
                offset: e.offset,
                expected: e.data_crc,
                actual: crc,
            });
        }
        let (chunk, offset) = appender.place(buf)?;
        Ok(Entry { chunk, offset, ..e })
    }
}
