//! Rebalance (`docs/FORMAT.md`, "Rebalance"): every live record rewritten, in index order, into
//! fresh chunks, every offset table written as a new generation, and both committed by one
//! `meta.json` rename; then the old chunks are unlinked. Reported as a [`RebalanceReport`].
//!
//! A zstd record is decoded while copied, so its checksum (of the logical bytes) is checked.
//! With [`RebalanceOptions::retrain_dictionaries`], each `zstd_dict` field gets a dictionary
//! trained on records sampled across the whole dataset, written (and fsynced) before the copy,
//! and every record of the field is compressed again with it; the commit names only the new
//! dictionary, and the old files are unlinked after it, like the old chunks.

use super::appender::Appender;
use super::book::Shared;
use super::commit::sync_sealed;
use super::dictionary::{split_samples, write_dictionary};
use super::tables::Core;
use super::task::Msg;
use super::wait::wait;
use super::{task_gone, Writer};
use crate::error::{Error, Result};
use crate::format::codec::{Dictionary, Encoder, ZstdDecoder};
use crate::format::dtype::{Codec, StoredCodec};
use crate::format::entry::{Entry, ENTRY_BYTES};
use crate::format::layout;
use crate::format::meta::{ChunkMeta, DictionaryMeta, TableMeta};
use crate::io::vfs::VfsFile;
use futures::channel::oneshot;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Old chunks a rebalance keeps open at once.
const MAX_OPEN_READERS: usize = 64;

/// How [`Writer::rebalance_with`] rewrites the dataset. The default is [`Writer::rebalance`]'s:
/// stored bytes copied as they are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RebalanceOptions {
    /// Train a new dictionary for every `zstd_dict` field on records sampled across the whole
    /// dataset (up to [`WriterConfig::dictionary_sample_bytes`](crate::WriterConfig) and
    /// [`DICTIONARY_SAMPLE_RECORDS`](crate::DICTIONARY_SAMPLE_RECORDS), evenly spaced), and
    /// compress every record of the field with it: records written before the field had a
    /// dictionary, or with one trained on the first records only, get the new one. The commit
    /// names only the new dictionary; the old files are removed after it. A field whose records
    /// train no dictionary (too few) keeps its records and dictionaries as they are. Default:
    /// false.
    pub retrain_dictionaries: bool,
}

impl RebalanceOptions {
    /// Sets [`RebalanceOptions::retrain_dictionaries`].
    pub fn retrain_dictionaries(mut self, retrain: bool) -> Self {
        self.retrain_dictionaries = retrain;
        self
    }
}

/// A field's dictionary trained for a rebalance: written, not yet named by a commit.
#[derive(Clone, Debug)]
pub(super) struct Retrained {
    dictionary: Arc<Dictionary>,
    meta: DictionaryMeta,
    level: i32,
}

/// What copying records needs besides the dataset: open old chunks, buffers, codecs.
struct Copier {
    readers: BTreeMap<u16, Box<dyn VfsFile>>,
    stored: Vec<u8>,
    logical: Vec<u8>,
    decoder: Option<ZstdDecoder>,
    encoder: Encoder,
}

/// What [`Writer::rebalance`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RebalanceReport {
    /// The generation of the rebalanced commit.
    pub generation: u64,
    /// Records rewritten.
    pub records: u64,
    /// Stored bytes of every live record and field after the rebalance (what the chunks must
    /// hold at least). The same as before unless records were compressed again
    /// ([`RebalanceOptions::retrain_dictionaries`]).
    pub live_bytes: u64,
    /// Stored bytes of every live record and field before the rebalance.
    pub live_bytes_before: u64,
    /// Whether the dataset was rewritten and committed. A rebalance that would reclaim nothing
    /// (every byte in the chunks is live, and no dictionary is retrained) rewrites and commits
    /// nothing: the generation stays, and the report's before and after are equal.
    pub rewritten: bool,
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
        ratio(self.live_bytes_before, self.chunk_bytes_before)
    }

    /// Live stored bytes / bytes held in chunk files, after: 1.0 (every byte is live).
    pub fn utilization_after(&self) -> f64 {
        ratio(self.live_bytes, self.chunk_bytes_after)
    }

    /// The seed's measure, before: live stored bytes / (`chunk_size_bytes` × chunks), which also
    /// counts the unused tail of every chunk.
    pub fn capacity_utilization_before(&self) -> f64 {
        ratio(
            self.live_bytes_before,
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
    pub(super) fn rebalance_all(&mut self, options: &RebalanceOptions) -> Result<RebalanceReport> {
        wait(async {
            self.ready().await?;
            self.finish_jobs().await
        })?;
        if self.has_pending() {
            self.commit()?;
        }
        // Nothing to reclaim: no commit (a part of a collection, or a dataset a reader pins,
        // keeps its generation).
        let r = self.core().live_stored_bytes(self.len);
        let live_before = self.poison_on(r)?;
        if !options.retrain_dictionaries {
            let core = self.core();
            let chunks = &core.meta.chunks;
            let held: u64 = chunks.iter().map(|c| c.size).sum();
            if live_before == held {
                return Ok(RebalanceReport {
                    generation: self.generation,
                    records: self.len,
                    live_bytes: live_before,
                    live_bytes_before: live_before,
                    rewritten: false,
                    chunk_bytes_before: held,
                    chunk_bytes_after: held,
                    chunks_before: chunks.len(),
                    chunks_after: chunks.len(),
                    chunk_size_bytes: core.meta.chunk_size_bytes,
                });
            }
        }
        let r = wait(self.ask_tasks(|tx: oneshot::Sender<Result<()>>| Msg::Seal(tx)));
        self.poison_on(r)?;
        // The sealed chunks were synced by the last commit and nothing was appended since.
        self.shared.book().sealed.clear();
        let retrained = match options.retrain_dictionaries {
            true => {
                let r = self.retrain();
                self.poison_on(r)?
            }
            false => vec![None; self.field_metas.len()],
        };
        let deflate_level = self.config.deflate_level;
        let r = self.core().rebalance(
            &self.shared,
            self.len,
            live_before,
            &retrained,
            deflate_level,
        );
        let (report, resume) = self.poison_on(r)?;
        // Later appends compress with the new dictionaries.
        if retrained.iter().any(Option::is_some) {
            let mut current: Vec<Option<Arc<Dictionary>>> = self.dictionaries.to_vec();
            current.resize(self.field_metas.len(), None);
            for (f, r) in retrained.iter().enumerate() {
                if let (Some(r), Some(slot), Some(m)) =
                    (r, current.get_mut(f), self.field_metas.get_mut(f))
                {
                    *slot = Some(Arc::clone(&r.dictionary));
                    m.dictionaries = vec![r.meta];
                }
            }
            self.dictionaries = current.into();
        }
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

impl Writer {
    /// Trains and writes a new dictionary for every `zstd_dict` field on records sampled across
    /// the committed dataset; `None` for other fields and for one whose records train nothing.
    fn retrain(&mut self) -> Result<Vec<Option<Retrained>>> {
        let (limit, dict_bytes) = (
            self.config.dictionary_sample_bytes,
            self.config.dictionary_bytes,
        );
        let max_records = super::config::DICTIONARY_SAMPLE_RECORDS as u64;
        let len = self.len;
        let mut out = Vec::with_capacity(self.field_metas.len());
        for f in 0..self.field_metas.len() {
            let Some(Codec::ZstdDict { level }) = self.field_metas.get(f).map(|m| m.codec) else {
                out.push(None);
                continue;
            };
            let core = self.core();
            let chunks = core.meta.chunks.clone();
            let mut copier = Copier::new(0);
            let (mut bytes, mut sizes) = (Vec::new(), Vec::new());
            // Evenly spaced over the dataset, so the sample is not only its first records.
            let step = (len / max_records.max(1)).max(1);
            let mut index = 0;
            while index < len && bytes.len() < limit && (sizes.len() as u64) < max_records {
                let logical = core.logical(f, index, &chunks, &mut copier)?;
                if !logical.is_empty() {
                    bytes.extend_from_slice(logical);
                    sizes.push(logical.len());
                }
                index += step;
            }
            let samples = split_samples(&bytes, &sizes);
            let Some(dict) = Dictionary::train(&samples, dict_bytes) else {
                tracing::info!(
                    field = f,
                    "too few records to train a dictionary; the field keeps its own"
                );
                out.push(None);
                continue;
            };
            let fm = core
                .meta
                .fields
                .get(f)
                .ok_or_else(|| Error::internal(format!("no field {f}")))?;
            // A number no live dictionary has: the next one, or the lowest free one.
            let used: Vec<u8> = fm.dictionaries.iter().map(|d| d.number).collect();
            let number = match used.iter().max() {
                None => Some(1),
                Some(&n) if n < 255 => Some(n + 1),
                Some(_) => (1..=255u8).find(|n| !used.contains(n)),
            }
            .ok_or_else(|| Error::InvalidConfig {
                reason: format!("field {:?} already has 255 dictionaries", fm.name),
            })?;
            let (meta, dictionary) =
                write_dictionary(&*core.vfs, &core.dir, &fm.name, number, dict)?;
            out.push(Some(Retrained {
                dictionary,
                meta,
                level,
            }));
        }
        Ok(out)
    }
}

impl Copier {
    fn new(deflate_level: i32) -> Copier {
        Copier {
            readers: BTreeMap::new(),
            stored: Vec::new(),
            logical: Vec::new(),
            decoder: None,
            encoder: Encoder::new(deflate_level),
        }
    }
}

impl Core {
    /// The rebalance itself, on a committed writer whose tasks hold no open chunk. Returns the
    /// report and the last new chunk if it has room (for a task to continue).
    fn rebalance(
        &mut self,
        shared: &Arc<Shared>,
        len: u64,
        live_bytes_before: u64,
        retrained: &[Option<Retrained>],
        deflate_level: i32,
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
        let mut copier = Copier::new(deflate_level);
        let mut live_bytes = 0u64;
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
                    let retrain = retrained.get(f).and_then(Option::as_ref);
                    let e =
                        self.copy_record(f, index, &old, retrain, &mut copier, &mut appender)?;
                    live_bytes += u64::from(e.physical_len);
                    block.extend_from_slice(&e.encode(index));
                }
            }
            for ((_, table, _), block) in tables.iter().zip(&blocks) {
                table.write_all_at(block, start * ENTRY_BYTES as u64)?;
            }
            start = end;
        }
        drop(copier);
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
        // A retrained field's commit names its new dictionary only; the old files go after it.
        let mut stale_dictionaries = Vec::new();
        for (fm, r) in self.meta.fields.iter_mut().zip(retrained) {
            if let Some(r) = r {
                for d in &fm.dictionaries {
                    stale_dictionaries.push(layout::dictionary(&self.dir, &fm.name, d.number));
                }
                fm.dictionaries = vec![r.meta];
            }
        }
        let generation = self.publish(shared, &metas, len)?;
        for p in stale_dictionaries {
            if let Err(e) = self.vfs.remove_file(&p) {
                tracing::warn!(path = %p.display(), error = %e, "could not remove a dictionary the rebalanced commit no longer uses");
            }
        }
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
            live_bytes_before,
            rewritten: true,
            chunk_bytes_before,
            chunk_bytes_after,
            chunks_before: old.len(),
            chunks_after: self.meta.chunks.len(),
            chunk_size_bytes: self.meta.chunk_size_bytes,
        };
        Ok((report, resume))
    }

    /// Stored bytes of the first `len` records of every field, from the offset tables (what a
    /// rebalance keeps; the rest of the chunks' bytes are dead).
    fn live_stored_bytes(&self, len: u64) -> Result<u64> {
        let mut live = 0u64;
        for wf in &self.fields {
            for index in 0..len {
                live = live.saturating_add(u64::from(wf.entry(index)?.physical_len));
            }
        }
        Ok(live)
    }

    /// Reads the stored bytes of field `f` of record `index` into `c.stored` (checked to lie in
    /// a committed chunk); returns its entry. Nothing is checked against the CRC here.
    fn read_stored(
        &self,
        f: usize,
        index: u64,
        chunks: &[ChunkMeta],
        c: &mut Copier,
    ) -> Result<Entry> {
        let wf = self.fields.get(f).ok_or_else(|| Error::UnknownField {
            field: format!("#{f}"),
        })?;
        let e = wf.entry(index)?;
        if e.physical_len == 0 {
            c.stored.clear();
            return Ok(e);
        }
        let size = chunks.iter().find(|c| c.id == e.chunk).map(|c| c.size);
        if size.is_none_or(|s| e.end() > s) {
            return Err(wf.committed.corrupt(
                index,
                format!("record ends past committed chunk {}", e.chunk),
            ));
        }
        let path = layout::chunk(&self.dir, e.chunk);
        if c.readers.len() >= MAX_OPEN_READERS && !c.readers.contains_key(&e.chunk) {
            // Bounded descriptors, whatever the number of chunks (index order visits chunks
            // mostly in the order they were written, so few are reopened).
            c.readers.clear();
        }
        let file = match c.readers.entry(e.chunk) {
            std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::btree_map::Entry::Vacant(v) => v.insert(self.vfs.open_read(&path)?),
        };
        c.stored.resize(e.physical_len as usize, 0);
        file.read_exact_at(&mut c.stored, e.offset)?;
        Ok(e)
    }

    /// Checks record `index`'s field `f`, read into `c.stored` with entry `e`, against its
    /// CRC32C: of the stored bytes, or for zstd of the logical bytes, which are then in
    /// `c.logical`. True if the logical bytes are in `c.logical`.
    fn check(&self, f: usize, index: u64, e: &Entry, c: &mut Copier) -> Result<bool> {
        let wf = self.fields.get(f).ok_or_else(|| Error::UnknownField {
            field: format!("#{f}"),
        })?;
        let field = &wf.committed.meta.name;
        let path = layout::chunk(&self.dir, e.chunk);
        let zstd = matches!(e.codec, StoredCodec::Zstd | StoredCodec::ZstdDict(_));
        let bytes = match zstd {
            false => &c.stored,
            true => {
                let dictionary = match e.codec {
                    StoredCodec::ZstdDict(n) => {
                        Some(wf.committed.dictionary(n).ok_or_else(|| {
                            wf.committed.corrupt(
                                index,
                                format!("names dictionary {n}, which the commit lacks"),
                            )
                        })?)
                    }
                    _ => None,
                };
                if c.decoder.is_none() {
                    c.decoder = ZstdDecoder::new();
                }
                let decompress = |reason: String| Error::Decompress {
                    path: path.clone(),
                    field: field.clone(),
                    index,
                    offset: e.offset,
                    reason,
                };
                let decoder = c
                    .decoder
                    .as_mut()
                    .ok_or_else(|| decompress("zstd could not allocate a context".to_string()))?;
                c.logical.resize(e.logical_len as usize, 0);
                decoder
                    .decode(dictionary.map(|d| &**d), &c.stored, &mut c.logical)
                    .map_err(decompress)?;
                &c.logical
            }
        };
        let crc = crate::checksum::crc32c(bytes);
        if crc != e.data_crc {
            return Err(Error::ChecksumMismatch {
                path,
                field: field.clone(),
                index,
                offset: e.offset,
                expected: e.data_crc,
                actual: crc,
            });
        }
        Ok(zstd)
    }

    /// The logical bytes of field `f` of record `index`, checked (a `zstd_dict` field's
    /// records are raw or zstd).
    fn logical<'c>(
        &self,
        f: usize,
        index: u64,
        chunks: &[ChunkMeta],
        c: &'c mut Copier,
    ) -> Result<&'c [u8]> {
        let e = self.read_stored(f, index, chunks, c)?;
        if e.physical_len == 0 {
            return Ok(&[]);
        }
        match self.check(f, index, &e, c)? {
            true => Ok(&c.logical),
            false => Ok(&c.stored),
        }
    }

    /// Copies field `f` of record `index` into `appender`'s chunk, checked against its CRC32C;
    /// returns the record's new entry. With `retrain`, the record is compressed again with the
    /// field's new dictionary; otherwise its stored bytes are copied as they are.
    fn copy_record(
        &mut self,
        f: usize,
        index: u64,
        old: &[ChunkMeta],
        retrain: Option<&Retrained>,
        c: &mut Copier,
        appender: &mut Appender,
    ) -> Result<Entry> {
        let e = self.read_stored(f, index, old, c)?;
        if e.physical_len == 0 {
            return Ok(e);
        }
        let decoded = self.check(f, index, &e, c)?;
        let recode = matches!(
            e.codec,
            StoredCodec::Raw | StoredCodec::Zstd | StoredCodec::ZstdDict(_)
        );
        let Some(r) = retrain.filter(|_| recode) else {
            let (chunk, offset) = appender.place(&c.stored)?;
            return Ok(Entry { chunk, offset, ..e });
        };
        let Copier {
            stored,
            logical,
            encoder,
            ..
        } = c;
        let logical: &[u8] = if decoded { logical } else { stored };
        let (codec, bytes) = encoder.encode(
            Codec::ZstdDict { level: r.level },
            f,
            Some(&r.dictionary),
            logical,
        );
        // A zstd entry's CRC32C covers the logical bytes, a raw one's its stored (the same).
        let data_crc = crate::checksum::crc32c(logical);
        let physical_len = u32::try_from(bytes.len()).map_err(|_| {
            Error::internal(format!(
                "record {index} compressed to {} bytes",
                bytes.len()
            ))
        })?;
        let (chunk, offset) = appender.place(bytes)?;
        Ok(Entry {
            chunk,
            offset,
            physical_len,
            codec,
            data_crc,
            logical_len: e.logical_len,
        })
    }
}
