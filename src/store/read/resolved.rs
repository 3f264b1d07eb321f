//! A resolved batch, the read engine's input: every (index, field) of the request as a checked
//! offset entry ([`Want`]), with what later stages need to read it and to name it in an error
//! (its field, its chunk, its dictionary), so planning and finishing never go back to the
//! tables. The store resolves (`store/resolve.rs`); nothing here names the snapshot.

use super::chunks::{ChunkHandle, ChunkSet};
use super::plan::ChunkKey;
use crate::error::{Error, Result};
use crate::format::codec::Dictionary;
use crate::format::dtype::{DType, StoredCodec};
use crate::format::entry::Entry;
use std::path::PathBuf;
use std::sync::Arc;

/// One value to produce: record `index` (global), field `field` (a position in
/// [`Resolved::fields`]), whose entry is in part `part` (a position in [`Resolved::parts`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Want {
    pub(crate) field: usize,
    pub(crate) index: u64,
    pub(crate) part: u32,
    pub(crate) e: Entry,
}

impl Want {
    /// The chunk holding the value's stored bytes, as the plan names it.
    pub(crate) fn key(&self) -> ChunkKey {
        ChunkKey {
            part: self.part,
            chunk: self.e.chunk,
        }
    }
}

/// What a batch reads of one part (of a collection; a plain dataset is its own one part): its
/// chunks, and its fields' zstd dictionaries.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PartRes<'a> {
    pub(crate) chunks: &'a ChunkSet,
    pub(crate) dictionaries: &'a dyn Dictionaries,
}

/// A part's zstd dictionaries, by field number (the numbers of [`Resolved::field_ids`]): the
/// one thing finishing asks of a part's tables, answered by whoever resolved the batch.
pub(crate) trait Dictionaries: std::fmt::Debug + Sync {
    /// Dictionary number `n` of field `field`, if the commit holds it.
    fn dictionary(&self, field: usize, n: u8) -> Option<&Arc<Dictionary>>;
}

/// A batch's values in caller order (record-major, then field), checked against the commit.
#[derive(Debug)]
pub(crate) struct Resolved<'a> {
    pub(crate) wants: Vec<Want>,
    /// The batch's fields: name and dtype, by position.
    pub(crate) fields: Arc<[(String, DType)]>,
    /// The parts the batch's records are in, in order of first use: one for a plain dataset.
    pub(crate) parts: Vec<PartRes<'a>>,
    /// The batch's fields' numbers in the dataset (its schema's order), by position.
    pub(crate) field_ids: Vec<usize>,
}

impl Resolved<'_> {
    /// The chunk `key` names (resolving checked that the commit names it).
    pub(crate) fn chunk_at(&self, key: ChunkKey) -> Option<&Arc<ChunkHandle>> {
        self.parts
            .get(key.part as usize)
            .and_then(|p| p.chunks.get(key.chunk))
    }

    /// The chunk holding `w`'s stored bytes (resolving checked that the commit names it).
    pub(crate) fn chunk(&self, w: &Want) -> Result<&Arc<ChunkHandle>> {
        self.chunk_at(w.key()).ok_or_else(|| {
            Error::internal(format!(
                "record {} names chunk {}, which resolving found",
                w.index, w.e.chunk
            ))
        })
    }

    /// The zstd dictionary `w`'s entry names (resolving checked the commit holds it).
    pub(crate) fn dictionary(&self, w: &Want) -> Result<Option<&Arc<Dictionary>>> {
        let StoredCodec::ZstdDict(n) = w.e.codec else {
            return Ok(None);
        };
        self.parts
            .get(w.part as usize)
            .and_then(|p| p.dictionaries.dictionary(*self.field_ids.get(w.field)?, n))
            .map(Some)
            .ok_or_else(|| {
                Error::internal(format!(
                    "record {} names dictionary {n}, which resolving found",
                    w.index
                ))
            })
    }

    /// The name of `w`'s field.
    pub(crate) fn field_name(&self, w: &Want) -> String {
        self.fields
            .get(w.field)
            .map(|(n, _)| n.clone())
            .unwrap_or_default()
    }

    /// The item size of `w`'s field's dtype.
    pub(crate) fn item_bytes(&self, w: &Want) -> usize {
        self.fields
            .get(w.field)
            .map_or(1, |(_, d)| d.item_bytes() as usize)
    }

    /// The path of `w`'s chunk.
    pub(crate) fn chunk_path(&self, w: &Want) -> PathBuf {
        self.parts
            .get(w.part as usize)
            .map(|p| p.chunks.path(w.e.chunk))
            .unwrap_or_default()
    }

    /// The error for a slot or slice that does not fit where planning put it: a bug, never
    /// the data's fault (every length was checked against the chunk when resolving).
    pub(crate) fn misplaced(&self, w: &Want, what: &str) -> Error {
        Error::internal(format!(
            "record {} of field {:?}: {what} does not fit where it was planned",
            w.index,
            self.field_name(w)
        ))
    }
}
