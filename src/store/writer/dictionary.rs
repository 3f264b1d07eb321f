//! zstd dictionaries: each `zstd_dict` field's sample of its first records, training, and
//! installing a dictionary (its file written and fsynced, then named by the next commit).
//!
//! A dictionary's file `<field>.<number>.zdict` is written with a temporary name, fsynced and
//! renamed into place before any record compressed with it is handed to an append task, and
//! the commit that makes those records visible names it in `meta.json` (number, length,
//! CRC32C). A crash before that commit leaves a file no commit names: the next dictionary of
//! the field takes the same number and replaces it. Dictionaries are never removed, so every
//! record keeps the dictionary it names.

use super::Writer;
use crate::error::{Error, Result};
use crate::format::codec::Dictionary;
use crate::format::dtype::Codec;
use crate::format::layout;
use crate::format::meta::DictionaryMeta;
use crate::io::vfs;
use std::sync::Arc;

/// The records a `zstd_dict` field without a dictionary has seen so far, back to back.
#[derive(Debug, Default)]
pub(super) struct Sample {
    bytes: Vec<u8>,
    sizes: Vec<usize>,
    /// Set once the sample has been trained on (or training found nothing): no more copying.
    done: bool,
}

impl Writer {
    /// Copies `value` of field `f` into the field's sample while the field needs one.
    pub(super) fn sample(&mut self, f: usize, value: &[u8]) {
        let limit = self.config.dictionary_sample_bytes;
        let needs = limit > 0
            && matches!(
                self.field_metas.get(f).map(|m| m.codec),
                Some(Codec::ZstdDict { .. })
            )
            && self.dictionaries.get(f).is_none_or(|d| d.is_none());
        if !needs || value.is_empty() {
            return;
        }
        if self.samples.len() <= f {
            self.samples
                .resize_with(self.field_metas.len(), Sample::default);
        }
        if let Some(s) = self.samples.get_mut(f) {
            if !s.done && !sample_full(s, limit) {
                s.bytes.extend_from_slice(value);
                s.sizes.push(value.len());
            }
        }
    }

    /// Trains and installs the dictionary of every field whose sample is complete. Runs before
    /// an append takes its record, so an error (writing the file, which poisons the writer)
    /// leaves nothing half-taken.
    pub(super) fn train_ready(&mut self) -> Result<()> {
        let limit = self.config.dictionary_sample_bytes;
        for f in 0..self.samples.len() {
            let Some(s) = self.samples.get_mut(f) else {
                continue;
            };
            if s.done || !sample_full(s, limit) {
                continue;
            }
            s.done = true;
            let (bytes, sizes) = (std::mem::take(&mut s.bytes), std::mem::take(&mut s.sizes));
            let samples = split_samples(&bytes, &sizes);
            if let Some(dict) = Dictionary::train(&samples, self.config.dictionary_bytes) {
                self.install_dictionary(f, dict)?;
            }
        }
        Ok(())
    }

    /// Trains a dictionary for `field` (a `zstd_dict` field) on `samples` and makes it the one
    /// its next records are compressed with; returns its number. Records already appended keep
    /// theirs. Fails with [`Error::InvalidConfig`] if zstd finds nothing worth a dictionary in
    /// `samples` (too few or too small), or the field already has 255 dictionaries.
    pub fn train_dictionary<B: AsRef<[u8]>>(&mut self, field: &str, samples: &[B]) -> Result<u8> {
        super::wait::wait(self.ready())?;
        let f = self.field_position(field)?;
        if !matches!(
            self.field_metas.get(f).map(|m| m.codec),
            Some(Codec::ZstdDict { .. })
        ) {
            return Err(Error::InvalidConfig {
                reason: format!("field {field:?} is not a zstd_dict field"),
            });
        }
        let samples: Vec<&[u8]> = samples.iter().map(|s| s.as_ref()).collect();
        let dict = Dictionary::train(&samples, self.config.dictionary_bytes).ok_or_else(|| {
            Error::InvalidConfig {
                reason: format!(
                    "{} samples of {} bytes train no dictionary for field {field:?} (zstd \
                     needs at least 8 and a few KiB)",
                    samples.len(),
                    samples.iter().map(|s| s.len()).sum::<usize>()
                ),
            }
        })?;
        if let Some(s) = self.samples.get_mut(f) {
            s.done = true;
            s.bytes = Vec::new();
            s.sizes = Vec::new();
        }
        self.install_dictionary(f, dict)
    }

    /// Writes dictionary bytes `dict` for field `f` under the field's next number, then hands
    /// it to the next jobs and to the next commit. An error writing it poisons the writer, like
    /// every I/O error of the writer: what reached the disk is unknown.
    fn install_dictionary(&mut self, f: usize, dict: Vec<u8>) -> Result<u8> {
        let r = self.install_dictionary_unpoisoned(f, dict);
        self.poison_on(r)
    }

    fn install_dictionary_unpoisoned(&mut self, f: usize, dict: Vec<u8>) -> Result<u8> {
        let fm = self
            .field_metas
            .get(f)
            .ok_or_else(|| Error::internal(format!("no field {f}")))?;
        let number = match fm.dictionaries.iter().map(|d| d.number).max() {
            None => 1,
            Some(255) => {
                return Err(Error::InvalidConfig {
                    reason: format!("field {:?} already has 255 dictionaries", fm.name),
                })
            }
            Some(n) => n + 1,
        };
        let (meta, prepared) =
            write_dictionary(&*self.shared.vfs, &self.shared.dir, &fm.name, number, dict)?;
        if let Some(m) = self.core().meta.fields.get_mut(f) {
            m.dictionaries.push(meta);
        }
        if let Some(m) = self.field_metas.get_mut(f) {
            m.dictionaries.push(meta);
        }
        let mut current: Vec<Option<Arc<Dictionary>>> = self.dictionaries.to_vec();
        current.resize(self.field_metas.len(), None);
        if let Some(slot) = current.get_mut(f) {
            *slot = Some(prepared);
        }
        // The open job is handed its dictionaries when it closes: it is compressed with this one.
        self.dictionaries = current.into();
        Ok(number)
    }
}

/// Records `sizes` long, back to back in `bytes`, as slices.
pub(super) fn split_samples<'a>(bytes: &'a [u8], sizes: &[usize]) -> Vec<&'a [u8]> {
    let mut at = 0usize;
    sizes
        .iter()
        .filter_map(|&n| {
            let r = bytes.get(at..at.checked_add(n)?);
            at = at.saturating_add(n);
            r
        })
        .collect()
}

/// Writes dictionary `dict` of field `field` as number `number` in `dir` (a temporary name,
/// fsynced, renamed into place, the directory fsynced), and prepares it: what a commit names
/// and what the encoders compress with.
pub(super) fn write_dictionary(
    fs: &dyn vfs::Vfs,
    dir: &std::path::Path,
    field: &str,
    number: u8,
    dict: Vec<u8>,
) -> Result<(DictionaryMeta, Arc<Dictionary>)> {
    let path = layout::dictionary(dir, field, number);
    let tmp = path.with_extension("zdict.tmp");
    vfs::replace_atomically(fs, dir, &tmp, &path, &dict)?;
    let meta = DictionaryMeta {
        number,
        bytes: dict.len() as u64,
        crc32c: crate::checksum::crc32c(&dict),
    };
    let prepared = Dictionary::new(number, dict).map_err(|reason| Error::DictionaryCorrupt {
        path,
        field: field.to_string(),
        number,
        reason,
    })?;
    Ok((meta, prepared))
}

fn sample_full(s: &Sample, limit: usize) -> bool {
    s.bytes.len() >= limit || s.sizes.len() >= super::config::DICTIONARY_SAMPLE_RECORDS
}
