//! Committed parts are immutable: a manifest pins each part's generation, so a new commit of a
//! part (a writer's, a rebalance's) would make every reader of the collection refuse it
//! ([`Error::PartChanged`]). A writer opened on a part that a manifest names is refused instead,
//! before it changes anything.

use super::manifests::{LocalManifests, ManifestStore};
use crate::error::{Error, Result};
use std::path::Path;

/// Refuses the dataset at `dir` if it is a part of a local collection (`<root>/parts/<id>` of a
/// root holding `_collection/`) that the latest manifest names ([`Error::PartCommitted`]; a
/// manifest lists every part of the one before it, so the latest names every committed part).
/// A dataset under `parts/` that no manifest names yet (one a task writes in place, to commit it
/// later) may be written. The caller holds the dataset's writer lock, which a commit takes
/// before it names a part, so the answer holds while the lock is held.
///
/// # Errors
/// [`Error::PartCommitted`]; the manifests' errors ([`Error::MetaCorrupt`], I/O errors naming
/// the file).
pub(crate) fn refuse_committed_part(dir: &Path) -> Result<()> {
    // The directory may be gone (a `Writer::create` at a committed part's path): its parent's
    // canonical path and its name.
    let at = match dir.canonicalize() {
        Ok(at) => at,
        Err(_) => match (
            std::path::absolute(dir)
                .ok()
                .and_then(|a| a.parent().map(Path::to_path_buf)),
            dir.file_name(),
        ) {
            (Some(parent), Some(name)) => match parent.canonicalize() {
                Ok(p) => p.join(name),
                Err(_) => return Ok(()),
            },
            _ => return Ok(()),
        },
    };
    let (Some(parts), Some(id)) = (at.parent(), at.file_name().and_then(|n| n.to_str())) else {
        return Ok(());
    };
    if parts.file_name().is_none_or(|n| n != "parts") {
        return Ok(());
    }
    let Some(root) = parts.parent().filter(|r| super::is_collection(r)) else {
        return Ok(());
    };
    let latest = LocalManifests::new(root).latest()?;
    if latest.is_some_and(|m| m.parts.iter().any(|p| p.id == id)) {
        return Err(Error::PartCommitted {
            part: id.to_string(),
            path: dir.to_path_buf(),
            collection: root.to_path_buf(),
        });
    }
    Ok(())
}
