//! Recovery at open: what a crash left behind is removed (a stale `meta.json.tmp`, files no
//! commit names), and committed files are truncated back to their committed sizes.

#![deny(clippy::arithmetic_side_effects)]

use crate::error::{Error, Result};
use crate::format::entry::{ENTRY_BYTES, PATCH_BYTES};
use crate::format::layout;
use crate::format::meta::Meta;
use crate::io::vfs::Vfs;
use crate::store::snapshot::FieldTable;
use std::path::{Path, PathBuf};

/// Removes what a crash left behind and truncates committed files to their committed sizes.
pub(super) fn clean_orphans(vfs: &dyn Vfs, dir: &Path, meta: &Meta) -> Result<()> {
    let mut changed_dir = false;
    let tmp = dir.join(layout::META_TMP);
    if vfs.exists(&tmp)? {
        vfs.remove_file(&tmp)?;
        changed_dir = true;
    }
    let live: Vec<(String, u64)> = meta
        .fields
        .iter()
        .flat_map(|f| {
            let t = f.table;
            [
                // Meta::validate bounds both lengths, so neither product can overflow; a
                // saturated size would only mean "truncate nothing".
                (
                    format!("{}.{}.offsets", f.name, t.generation),
                    t.table_len.saturating_mul(ENTRY_BYTES as u64),
                ),
                (
                    format!("{}.{}.patches", f.name, t.generation),
                    t.patch_len.saturating_mul(PATCH_BYTES as u64),
                ),
            ]
        })
        .collect();
    let mut names = vfs.read_dir(dir)?;
    names.sort_unstable();
    for name in names {
        if !layout::is_table_file(&name) {
            continue;
        }
        let path = dir.join(&name);
        match live.iter().find(|(n, _)| *n == name) {
            Some((_, size)) => truncate_past(vfs, &path, *size)?,
            None => {
                vfs.remove_file(&path)?;
                changed_dir = true;
            }
        }
    }
    if changed_dir {
        vfs.sync_dir(dir)?;
    }
    let cdir = layout::chunk_dir(dir);
    let mut changed_chunks = false;
    let mut names = vfs.read_dir(&cdir)?;
    names.sort_unstable();
    let mut orphans = Vec::new();
    for name in names {
        let Some(id) = layout::parse_chunk(&name) else {
            continue;
        };
        let path = cdir.join(&name);
        match meta.chunks.iter().find(|c| c.id == id) {
            Some(c) => truncate_past(vfs, &path, c.size)?,
            None => orphans.push((id, path)),
        }
    }
    // A chunk the meta does not list is deleted only once every committed entry is known to
    // point elsewhere: a damaged meta must be refused, never "repaired" by deleting the bytes
    // its tables still reference.
    if !orphans.is_empty() {
        check_unreferenced(vfs, dir, meta, &orphans)?;
    }
    for (_, path) in &orphans {
        vfs.remove_file(path)?;
        changed_chunks = true;
    }
    if changed_chunks {
        vfs.sync_dir(&cdir)?;
    }
    Ok(())
}

/// Fails unless no committed entry of any field is stored in one of `orphans` (chunks on disk
/// that the meta does not list).
fn check_unreferenced(
    vfs: &dyn Vfs,
    dir: &Path,
    meta: &Meta,
    orphans: &[(u16, PathBuf)],
) -> Result<()> {
    let mut orphan = vec![false; 1 << 16];
    for (id, _) in orphans {
        if let Some(o) = orphan.get_mut(usize::from(*id)) {
            *o = true;
        }
    }
    for f in &meta.fields {
        let table = FieldTable::load(vfs, dir, f)?;
        for index in 0..meta.len {
            let e = table.entry(index)?;
            if e.physical_len > 0 && orphan.get(usize::from(e.chunk)).copied().unwrap_or(false) {
                return Err(Error::MetaCorrupt {
                    path: layout::meta(dir),
                    reason: format!(
                        "record {index} of field {:?} is stored in chunk {}, which the meta \
                         does not list; the writer refuses to open the dataset (nothing was \
                         deleted)",
                        f.name, e.chunk
                    ),
                });
            }
        }
    }
    Ok(())
}

/// Truncates a file to `size` if it is longer (bytes past a committed size are leftovers of an
/// interrupted commit). A file shorter than `size` is left for the open checks to report.
fn truncate_past(vfs: &dyn Vfs, path: &Path, size: u64) -> Result<()> {
    let file = vfs.open_rw(path)?;
    if file.len()? > size {
        file.set_len(size)?;
        file.sync_data()?;
    }
    Ok(())
}
