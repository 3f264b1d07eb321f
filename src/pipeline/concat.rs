//! [`Concat`]: several sources served as one, part after part, in the index space a
//! [`super::Mix`] samples from.
//!
//! The rest of this documentation is on [`Concat`], where rustdoc shows it: the module is private
//! and `zrecord::pipeline` re-exports its public items.

use std::sync::Arc;

use super::source::Source;
use crate::hash::hash;
use crate::{Error, Result};

/// A batch type that can be put together from the batches of several parts.
pub trait Concatenate: Sized {
    /// One batch whose record `i` is record `picks[i].1` of the batch at position `picks[i].0`
    /// of `batches`, and whose record index is `indices[i]` (the concatenated index). Each of
    /// `batches` is `(part number, batch)`: the part numbers name parts in errors. Every
    /// record of every batch is picked exactly once.
    ///
    /// # Errors
    /// [`Error::SchemaMismatch`] if the parts' batches cannot be put together (different fields
    /// or field shapes of a [`crate::Batch`]); [`Error::Internal`] for a pick that names no
    /// record.
    fn concatenate(
        batches: Vec<(usize, Self)>,
        picks: &[(usize, usize)],
        indices: &[u64],
    ) -> Result<Self>;
}

/// Zero-copy: the result shares the parts' slabs and mappings, and [`crate::Batch::indices`]
/// are the concatenated indices. The parts must gather the same fields (names, dtypes and fixed
/// shapes, in order).
impl Concatenate for crate::Batch {
    fn concatenate(
        batches: Vec<(usize, Self)>,
        picks: &[(usize, usize)],
        indices: &[u64],
    ) -> Result<Self> {
        crate::store::read::batch::concatenate(batches, picks, indices.to_vec())
    }
}

/// One element per record (as [`super::MemorySource`] gathers): the elements are moved, not
/// copied.
impl<T> Concatenate for Vec<T> {
    fn concatenate(
        batches: Vec<(usize, Self)>,
        picks: &[(usize, usize)],
        _indices: &[u64],
    ) -> Result<Self> {
        let mut slots: Vec<Vec<Option<T>>> = batches
            .into_iter()
            .map(|(_, b)| b.into_iter().map(Some).collect())
            .collect();
        picks
            .iter()
            .map(|&(b, r)| {
                slots
                    .get_mut(b)
                    .and_then(|batch| batch.get_mut(r))
                    .and_then(Option::take)
                    .ok_or_else(|| Error::Internal {
                        reason: format!(
                            "concatenating batches: record {r} of batch {b} is not there"
                        ),
                    })
            })
            .collect()
    }
}

/// Several sources as one.
///
/// [`Concat`]: several sources served as one, part after part, in the index space a
/// [`super::Mix`] samples from.
///
/// Part `s` of `K` owns the indices `[offset_s, offset_s + len_s)`, the offsets being the prefix
/// sums of the part lengths ([`Source::part_lens`] reports them, so a loader built with
/// [`super::LoaderBuilder::mix`] weights the parts). A gather splits its indices by part,
/// gathers each part once (its indices in the caller's relative order) and puts the records
/// back together into one batch in the caller's order, through [`Concatenate`].
///
/// `S` may be unsized: `Concat<dyn Source<Batch = B>>` concatenates sources of different types
/// that gather the same batch type.
pub struct Concat<S: Source + ?Sized> {
    parts: Vec<Arc<S>>,
    offsets: Vec<u64>,
    len: u64,
}

impl<S: Source + ?Sized> std::fmt::Debug for Concat<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Concat")
            .field("part_offsets", &self.offsets)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl<S: Source + ?Sized> Concat<S> {
    /// Concatenates `parts`, in order.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if there is no part or the lengths overflow `u64`.
    pub fn new(parts: Vec<Arc<S>>) -> Result<Self> {
        if parts.is_empty() {
            return Err(Error::InvalidConfig {
                reason: "concat: at least one part is needed".into(),
            });
        }
        let mut offsets = Vec::with_capacity(parts.len());
        let mut len = 0u64;
        for (s, p) in parts.iter().enumerate() {
            offsets.push(len);
            len = len
                .checked_add(p.len())
                .ok_or_else(|| Error::InvalidConfig {
                    reason: format!("concat: the lengths overflow u64 at part {s}"),
                })?;
        }
        Ok(Self {
            parts,
            offsets,
            len,
        })
    }

    /// The parts, in order.
    pub fn parts(&self) -> &[Arc<S>] {
        &self.parts
    }

    /// Where each part starts in the concatenated index space.
    pub fn part_offsets(&self) -> &[u64] {
        &self.offsets
    }

    /// The part holding `index` and the index within it.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] (naming `index`) past the end.
    pub fn locate(&self, index: u64) -> Result<(usize, u64)> {
        let out = Error::IndexOutOfRange {
            index,
            len: self.len,
        };
        if index >= self.len {
            return Err(out);
        }
        // The last part starting at or before `index`: it is not empty, since a later part
        // starting at the same offset would be found first only if it held `index`.
        let s = self.offsets.partition_point(|&o| o <= index);
        (0..s)
            .rev()
            .find_map(|s| {
                let (o, p) = (self.offsets.get(s)?, self.parts.get(s)?);
                (index - o < p.len()).then(|| (s, index - o))
            })
            .ok_or(out)
    }
}

impl<S> Source for Concat<S>
where
    S: Source + ?Sized,
    S::Batch: Concatenate,
{
    type Batch = S::Batch;

    fn len(&self) -> u64 {
        self.len
    }

    fn item_len(&self, index: u64) -> Result<u64> {
        let (s, local) = self.locate(index)?;
        match self.parts.get(s) {
            Some(p) => p.item_len(local),
            None => Err(Error::IndexOutOfRange {
                index,
                len: self.len,
            }),
        }
    }

    /// `concat(KEY_0; KEY_1; …)`, the parts' key descriptions joined by `; `.
    fn key_description(&self) -> String {
        let keys: Vec<String> = self.parts.iter().map(|p| p.key_description()).collect();
        format!("concat({})", keys.join("; "))
    }

    fn gather(&self, indices: &[u64]) -> Result<Self::Batch> {
        // Per part: its local indices in the caller's relative order; per index: (part, rank).
        let mut local: Vec<Vec<u64>> = vec![Vec::new(); self.parts.len()];
        let mut routes = Vec::with_capacity(indices.len());
        for &i in indices {
            let (s, l) = self.locate(i)?;
            let list = local.get_mut(s).ok_or(Error::IndexOutOfRange {
                index: i,
                len: self.len,
            })?;
            routes.push((s, list.len()));
            list.push(l);
        }
        // Gather each part with indices once, in part order; an empty request gathers the
        // first part (for an empty batch of the right shape).
        let mut position = vec![usize::MAX; self.parts.len()];
        let mut batches = Vec::new();
        for (s, (part, list)) in self.parts.iter().zip(&local).enumerate() {
            if list.is_empty() && !(indices.is_empty() && s == 0) {
                continue;
            }
            if let Some(p) = position.get_mut(s) {
                *p = batches.len();
            }
            batches.push((s, part.gather(list)?));
        }
        let picks: Vec<(usize, usize)> = routes
            .into_iter()
            .map(|(s, r)| (position.get(s).copied().unwrap_or(usize::MAX), r))
            .collect();
        S::Batch::concatenate(batches, &picks, indices)
    }

    /// A hash of the parts' generations, in order.
    fn generation(&self) -> u64 {
        let mut words: Vec<u64> = self.parts.iter().map(|p| p.generation()).collect();
        words.push(self.parts.len() as u64);
        hash(&words)
    }

    /// The parts' lengths, in order.
    fn part_lens(&self) -> Vec<u64> {
        self.parts.iter().map(|p| p.len()).collect()
    }

    /// Each part's indices, announced to that part.
    fn lookahead(&self, session: u64, indices: &[u64]) {
        let mut local: Vec<Vec<u64>> = vec![Vec::new(); self.parts.len()];
        for &i in indices {
            if let Some(list) = self
                .locate(i)
                .ok()
                .and_then(|(s, l)| Some((local.get_mut(s)?, l)))
            {
                list.0.push(list.1);
            }
        }
        for (part, list) in self.parts.iter().zip(&local) {
            if !list.is_empty() {
                part.lookahead(session, list);
            }
        }
    }

    fn end_lookahead(&self, session: u64) {
        for part in &self.parts {
            part.end_lookahead(session);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::pipeline::MemorySource;

    fn mem(records: &[&[u8]]) -> Arc<MemorySource> {
        Arc::new(MemorySource::new(
            records.iter().map(|r| r.to_vec()).collect(),
        ))
    }

    #[test]
    fn gathers_in_caller_order_across_parts() {
        let c = Concat::new(vec![
            mem(&[b"a", b"bb"]),
            mem(&[]),
            mem(&[b"c", b"dd", b"e"]),
        ])
        .unwrap();
        assert_eq!(c.len(), 5);
        assert_eq!(c.part_lens(), vec![2, 0, 3]);
        assert_eq!(c.item_len(3).unwrap(), 2);
        let got = c.gather(&[4, 0, 2, 1, 4]).unwrap();
        assert_eq!(
            got,
            vec![
                b"e".to_vec(),
                b"a".to_vec(),
                b"c".to_vec(),
                b"bb".to_vec(),
                b"e".to_vec()
            ]
        );
        assert!(c.gather(&[]).unwrap().is_empty());
        assert!(matches!(
            c.gather(&[1, 5]),
            Err(Error::IndexOutOfRange { index: 5, len: 5 })
        ));
        assert_eq!(c.key_description(), "concat(item_len; item_len; item_len)");
        assert!(Concat::<MemorySource>::new(vec![]).is_err());
    }

    #[test]
    fn dyn_parts_and_generations() {
        let a: Arc<dyn Source<Batch = Vec<Vec<u8>>>> = mem(&[b"x"]);
        let b: Arc<dyn Source<Batch = Vec<Vec<u8>>>> =
            Arc::new(MemorySource::new(vec![b"y".to_vec()]).with_generation(3));
        let c = Concat::new(vec![Arc::clone(&a), Arc::clone(&b)]).unwrap();
        assert_eq!(
            c.gather(&[1, 0]).unwrap(),
            vec![b"y".to_vec(), b"x".to_vec()]
        );
        let d = Concat::new(vec![a, mem(&[b"y"]) as Arc<dyn Source<Batch = _>>]).unwrap();
        assert_ne!(c.generation(), d.generation());
    }
}
