//! What copying a whole collection (`push.rs` to a store, `pull.rs` from one) finds at its
//! target: the target's latest manifest against the source's. A copy makes the target list
//! exactly the source's parts, in order, and only by appending (appends commute with other
//! committers; replacing a list would lose their parts): a target that lists a prefix of the
//! source's parts gets the rest, one that lists anything else is refused.

use crate::format::collection::Manifest;

/// The target's latest manifest, against the source's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Target {
    /// It lists exactly the source's parts (ids, generations, lengths, in order) with the same
    /// fields: nothing to do.
    Same,
    /// It lists the first `n` of the source's parts (0: there is no manifest yet): the others
    /// are appended.
    Prefix(usize),
    /// It lists something else: what differs first, as text.
    Diverged(String),
}

/// Compares `target` (the target's latest manifest; `None`: it has none) with `source`.
pub(super) fn compare(source: &Manifest, target: Option<&Manifest>) -> Target {
    let Some(target) = target else {
        return Target::Prefix(0);
    };
    if target.fields != source.fields {
        let names = |m: &Manifest| {
            m.fields
                .iter()
                .map(|f| format!("{} {}", f.name, f.dtype))
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Target::Diverged(format!(
            "its fields are [{}], the source's [{}]",
            names(target),
            names(source)
        ));
    }
    for (k, theirs) in target.parts.iter().enumerate() {
        match source.parts.get(k) {
            Some(ours) if ours == theirs => {}
            Some(ours) => {
                return Target::Diverged(format!(
                    "its part #{k} is {:?} (generation {}, {} records), the source's is {:?} \
                     (generation {}, {} records)",
                    theirs.id, theirs.generation, theirs.len, ours.id, ours.generation, ours.len
                ))
            }
            None => {
                return Target::Diverged(format!(
                    "it lists {} parts, the source {}: its part #{k} {:?} is not the source's",
                    target.parts.len(),
                    source.parts.len(),
                    theirs.id
                ))
            }
        }
    }
    if target.parts.len() == source.parts.len() {
        Target::Same
    } else {
        Target::Prefix(target.parts.len())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use crate::format::collection::{part_path, ManifestField, PartMeta};
    use crate::{Codec, DType};

    fn manifest(parts: &[(&str, u64)]) -> Manifest {
        Manifest {
            format: crate::format::collection::COLLECTION_FORMAT.into(),
            version: crate::format::collection::COLLECTION_VERSION,
            number: 7,
            fields: vec![ManifestField {
                name: "x".into(),
                dtype: DType::U8,
                shape: None,
                codec: Codec::Raw,
            }],
            parts: parts
                .iter()
                .map(|(id, generation)| PartMeta {
                    id: (*id).into(),
                    path: part_path(id),
                    len: 10,
                    generation: *generation,
                })
                .collect(),
        }
    }

    #[test]
    fn a_prefix_is_appended_to_and_anything_else_refused() {
        let source = manifest(&[("a", 1), ("b", 1), ("c", 2)]);
        assert_eq!(compare(&source, None), Target::Prefix(0));
        assert_eq!(compare(&source, Some(&manifest(&[]))), Target::Prefix(0));
        assert_eq!(
            compare(&source, Some(&manifest(&[("a", 1)]))),
            Target::Prefix(1)
        );
        // The manifest's number is the target's own: only the list counts.
        let mut same = source.clone();
        same.number = 1;
        assert_eq!(compare(&source, Some(&same)), Target::Same);
        for (target, names) in [
            (manifest(&[("b", 1)]), ["\"b\"", "\"a\""]),
            (manifest(&[("a", 2)]), ["generation 2", "generation 1"]),
            (
                manifest(&[("a", 1), ("b", 1), ("c", 2), ("d", 1)]),
                ["\"d\"", "lists 4 parts"],
            ),
        ] {
            match compare(&source, Some(&target)) {
                Target::Diverged(why) => {
                    assert!(names.iter().all(|n| why.contains(n)), "{why}");
                }
                other => panic!("{other:?}"),
            }
        }
        let mut other_fields = manifest(&[("a", 1)]);
        other_fields.fields[0].dtype = DType::I32;
        assert!(matches!(
            compare(&source, Some(&other_fields)),
            Target::Diverged(_)
        ));
    }
}
