//! Where a collection's numbered manifests are kept: the [`ManifestStore`] seam (create a
//! numbered manifest only if it does not exist, list the numbers, read one), and the local
//! directory behind it ([`LocalManifests`]). An object-store prefix is one more implementation
//! (a conditional `PUT` with `If-None-Match: *`, a `LIST`, a `GET`); the committer and the
//! reader only see the trait.

use crate::error::{Error, Result};
use crate::format::collection::{Manifest, COLLECTION_VERSION};
use crate::format::meta::MetaError;
use crate::io::fs;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The directory of a collection's manifests, in its root.
pub(crate) const MANIFEST_DIR: &str = "_collection";

/// `<number>.json`, the number zero-padded to 20 digits (so names sort as numbers do).
pub(crate) fn manifest_name(number: u64) -> String {
    format!("{number:020}.json")
}

/// The number a manifest's file name holds, if it is one.
pub(crate) fn parse_manifest_name(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".json")?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok().filter(|&n| n > 0)
}

/// What happens at each step of creating a manifest (see [`ManifestStore::create_new`]).
pub(crate) type Step<'a> = &'a dyn Fn(super::CommitStep);

/// A collection's numbered manifests, wherever they are kept.
pub(crate) trait ManifestStore: fmt::Debug + Send + Sync {
    /// What names manifest `number` in errors (its file, or its URL).
    fn name_of(&self, number: u64) -> PathBuf;

    /// The numbers of the manifests there are, in any order.
    ///
    /// # Errors
    /// Listing failed.
    fn list(&self) -> Result<Vec<u64>>;

    /// The bytes of manifest `number`.
    ///
    /// # Errors
    /// Reading failed.
    fn read(&self, number: u64) -> Result<Vec<u8>>;

    /// Creates manifest `number` holding `bytes` if there is none yet: `Ok(true)` if this call
    /// created it (whole: a reader never sees part of it), `Ok(false)` if it was taken.
    /// `step` is told when the bytes are durable but not yet visible, and when they are visible.
    ///
    /// # Errors
    /// Writing failed; nothing is visible then.
    fn create_new(&self, number: u64, bytes: &[u8], step: Step<'_>) -> Result<bool>;

    /// The latest manifest, decoded and checked, with its number; `None` if there is none.
    ///
    /// # Errors
    /// [`Error::MetaCorrupt`] naming the manifest for damaged bytes or a number that differs
    /// from its name's; [`Error::UnsupportedVersion`] for another version; reading's.
    fn latest(&self) -> Result<Option<Manifest>> {
        let Some(number) = self.list()?.into_iter().max() else {
            return Ok(None);
        };
        let path = self.name_of(number);
        let bytes = self.read(number)?;
        let m = Manifest::decode(&bytes).map_err(|e| match e {
            MetaError::Corrupt(reason) => Error::MetaCorrupt {
                path: path.clone(),
                reason,
            },
            MetaError::Version(found) => Error::UnsupportedVersion {
                path: path.clone(),
                found,
                supported: COLLECTION_VERSION,
            },
        })?;
        if m.number != number {
            return Err(Error::MetaCorrupt {
                path,
                reason: format!("manifest number {} in the file named {number}", m.number),
            });
        }
        Ok(Some(m))
    }
}

/// The manifests of a collection in a local directory: `<root>/_collection/<number>.json`,
/// each written to a temporary file, fsynced, then hard-linked to its numbered name (`link(2)`
/// fails if the name exists: the create is exclusive) and the directory fsynced.
#[derive(Debug, Clone)]
pub(crate) struct LocalManifests {
    dir: PathBuf,
}

impl LocalManifests {
    /// The manifests of the collection at `root`.
    pub(crate) fn new(root: &Path) -> LocalManifests {
        LocalManifests {
            dir: root.join(MANIFEST_DIR),
        }
    }

    /// The manifest directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
}

impl ManifestStore for LocalManifests {
    fn name_of(&self, number: u64) -> PathBuf {
        self.dir.join(manifest_name(number))
    }

    fn list(&self) -> Result<Vec<u64>> {
        let entries = std::fs::read_dir(&self.dir).map_err(|e| Error::io(&self.dir, "list", e))?;
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&self.dir, "list", e))?;
            if let Some(n) = entry.file_name().to_str().and_then(parse_manifest_name) {
                out.push(n);
            }
        }
        Ok(out)
    }

    fn read(&self, number: u64) -> Result<Vec<u8>> {
        let path = self.name_of(number);
        std::fs::read(&path).map_err(|e| Error::io(path, "read", e))
    }

    fn create_new(&self, number: u64, bytes: &[u8], step: Step<'_>) -> Result<bool> {
        let target = self.name_of(number);
        // A temporary name no other committer uses (hidden: never parsed as a manifest).
        let tmp = self.dir.join(format!(
            ".{}.{}.{:x}.tmp",
            manifest_name(number),
            std::process::id(),
            super::unique_word()
        ));
        let result = (|| {
            let mut f = fs::create_new(&tmp)?;
            f.write_all(bytes)
                .map_err(|e| Error::io(&tmp, "write", e))?;
            f.sync_all().map_err(|e| Error::io(&tmp, "fsync", e))?;
            drop(f);
            step(super::CommitStep::ManifestWritten);
            match std::fs::hard_link(&tmp, &target) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(false),
                // The temporary file is what is missing (removed by hand, or by a `gc` of a
                // build that did not honour the commit lock): name it, not the manifest.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(Error::io(&tmp, "link the new manifest from", e))
                }
                Err(e) => return Err(Error::io(&target, "link", e)),
            }
            step(super::CommitStep::ManifestLinked);
            Ok(true)
        })();
        // The temporary name goes either way; the directory is synced so the new name (and
        // the removal) are durable before the commit is acknowledged.
        let _ = std::fs::remove_file(&tmp);
        let created = result?;
        if created {
            fs::sync_dir(&self.dir)?;
        }
        Ok(created)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names_round_trip_and_others_are_not_manifests() {
        assert_eq!(manifest_name(7), "00000000000000000007.json");
        assert_eq!(parse_manifest_name(&manifest_name(7)), Some(7));
        assert_eq!(
            parse_manifest_name(&manifest_name(u64::MAX)),
            Some(u64::MAX)
        );
        for bad in [
            "7.json",
            "00000000000000000000.json",
            ".00000000000000000001.json.1.2.tmp",
            "0000000000000000000a.json",
            "00000000000000000001.jso",
        ] {
            assert_eq!(parse_manifest_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_taken_number_is_not_overwritten() {
        let tmp = tempfile::tempdir().unwrap();
        let store = LocalManifests::new(tmp.path());
        std::fs::create_dir(store.dir()).unwrap();
        assert!(store.create_new(1, b"first", &|_| {}).unwrap());
        assert!(!store.create_new(1, b"second", &|_| {}).unwrap());
        assert_eq!(store.read(1).unwrap(), b"first");
        assert_eq!(store.list().unwrap(), vec![1]);
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(store.dir()).unwrap().count(), 1);
    }
}
