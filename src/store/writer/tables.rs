//! The offset tables as the writer sees them: each field's committed table plus the changes
//! not yet committed, behind the lock a commit takes.

use crate::error::Result;
use crate::format::entry::Entry;
use crate::format::layout;
use crate::format::meta::{FieldMeta, Meta, TableMeta};
use crate::io::vfs::{Vfs, VfsFile, VfsLock};
use crate::store::snapshot::FieldTable;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A field's offset table as the writer sees it: the committed table plus pending changes.
#[derive(Debug)]
pub(super) struct WriterField {
    /// Committed table; its `patches` also holds the pending patches.
    pub(super) committed: FieldTable,
    pub(super) table_file: Box<dyn VfsFile>,
    pub(super) patch_file: Box<dyn VfsFile>,
    /// Entries for indices `table_len..`, not yet written to the table file.
    pub(super) appended: Vec<Entry>,
    /// Patches not yet written to the patch log, in order.
    pub(super) pending: Vec<(u64, Entry)>,
}

impl WriterField {
    pub(super) fn table(&self) -> TableMeta {
        self.committed.meta.table
    }

    pub(super) fn entry(&self, index: u64) -> Result<Entry> {
        let t = self.table();
        if index < t.table_len {
            return self.committed.entry(index);
        }
        usize::try_from(index - t.table_len)
            .ok()
            .and_then(|k| self.appended.get(k).copied())
            .ok_or_else(|| {
                self.committed
                    .corrupt(index, "no entry for this index".to_string())
            })
    }

    pub(super) fn set(&mut self, index: u64, e: Entry) {
        let t = self.table();
        if index < t.table_len {
            self.committed.patches.insert(index, e);
            self.pending.push((index, e));
            return;
        }
        let k = usize::try_from(index - t.table_len).unwrap_or(usize::MAX);
        match self.appended.get_mut(k) {
            Some(slot) => *slot = e,
            None => self.appended.push(e),
        }
    }
}

/// What a commit needs: the offset tables, the last commit's meta, the lock. Behind a mutex so
/// [`super::Writer::commit_async`] can finish a commit on a thread of its own.
#[derive(Debug)]
pub(super) struct Core {
    /// Every file operation goes through this seam (see [`crate::io::vfs`]).
    pub(super) vfs: Arc<dyn Vfs>,
    pub(super) dir: PathBuf,
    pub(super) _lock: Box<dyn VfsLock>,
    pub(super) meta: Meta,
    /// The attributes the next commit writes ([`super::Writer::set_attribute`]).
    pub(super) attributes: crate::format::meta::Attributes,
    pub(super) fields: Vec<WriterField>,
    /// Compact every table at the next commit (tests).
    pub(super) force_compaction: bool,
}

impl Core {
    /// Applies a swap-remove of `index` while the last record is `last`.
    pub(super) fn apply_delete(&mut self, index: u64, last: u64) -> Result<()> {
        if index != last {
            let moved = self
                .fields
                .iter()
                .map(|wf| wf.entry(last))
                .collect::<Result<Vec<_>>>()?;
            for (wf, e) in self.fields.iter_mut().zip(moved) {
                wf.set(index, e);
            }
        }
        for wf in &mut self.fields {
            let t = wf.table().table_len;
            let keep = usize::try_from(last.saturating_sub(t)).unwrap_or(usize::MAX);
            wf.appended.truncate(keep);
        }
        Ok(())
    }
}

/// Opens a field's committed table and patch log for appending.
pub(super) fn open_field(vfs: &dyn Vfs, dir: &Path, f: &FieldMeta) -> Result<WriterField> {
    let committed = FieldTable::load(vfs, dir, f)?;
    let table_file = vfs.open_rw(&committed.table_path)?;
    let ppath = layout::patches(dir, &f.name, f.table.generation);
    let patch_file = vfs.open_rw(&ppath)?;
    Ok(WriterField {
        committed,
        table_file,
        patch_file,
        appended: Vec::new(),
        pending: Vec::new(),
    })
}
