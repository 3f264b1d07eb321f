//! Recovery at open: what a crash left behind is removed (a stale `meta.json.tmp`, files no
//! commit names), and committed files are truncated back to their committed sizes.

use crate::error::Result;
use crate::format::entry::{ENTRY_BYTES, PATCH_BYTES};
use crate::format::meta::Meta;
use crate::io::vfs::Vfs;
use crate::store::layout;
use std::path::Path;

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
                (
                    format!("{}.{}.offsets", f.name, t.generation),
                    t.table_len * ENTRY_BYTES as u64,
                ),
                (
                    format!("{}.{}.patches", f.name, t.generation),
                    t.patch_len * PATCH_BYTES as u64,
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
    for name in names {
        let Some(id) = layout::parse_chunk(&name) else {
            continue;
        };
        let path = cdir.join(&name);
        match meta.chunks.iter().find(|c| c.id == id) {
            Some(c) => truncate_past(vfs, &path, c.size)?,
            None => {
                vfs.remove_file(&path)?;
                changed_chunks = true;
            }
        }
    }
    if changed_chunks {
        vfs.sync_dir(&cdir)?;
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
