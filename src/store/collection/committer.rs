//! Committing parts to a collection: check each part (a dataset with the collection's schema),
//! move it under `parts/`, then create manifest N+1 = manifest N's parts + the new ones with a
//! create-only write. A committer that finds N+1 taken re-reads the latest manifest and rebases
//! (appending parts commutes), so racing committers all land, each part once.
//!
//! Crash safety: a part is moved (renamed, or copied and fsynced, the original removed only
//! once a manifest names the copy) and its directory fsynced before any manifest names it; a manifest is written and fsynced under a hidden name, then
//! linked to its number (the only step a reader sees). A committer killed at any step leaves
//! the last complete manifest, every part of which is present; a moved part no manifest names
//! yet is taken by a retry of the same commit, found by its provenance record (`source.rs`), or
//! left for `gc`. A commit that fails puts back what it placed; the commit lock (held shared)
//! keeps `gc` from running beside it.

use super::append::{append_parts, Collection};
use super::manifests::{LocalManifests, ManifestStore};
use super::options::{stepper, CommitOptions, CommitReport, CommitStep};
use super::place::{
    hold_writer_lock, move_back, move_part, remove_part, sync_placed, touch, writer_lock_if_free,
    Placed,
};
use super::schema_difference;
use super::source;
use crate::error::{Error, Result};
use crate::format::collection::{
    part_path, valid_part_id, ManifestField, PartMeta, MAX_PART_ID_BYTES,
};
use crate::format::meta::Meta;
use crate::format::source::candidate_id;
use crate::io::fs;
use crate::store::snapshot::read_meta;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// A part as given, checked.
struct Given {
    /// Where it is now.
    src: PathBuf,
    /// Its id, if it is under `parts/` already.
    inside: Option<String>,
    meta: Meta,
}

/// Commits `parts` (dataset directories, in this order: their records follow the collection's
/// in that order) to the collection at `root`, creating the collection if there is none.
///
/// The collection's commit lock is held shared for the whole commit: a `gc` of the collection
/// waits for it, and never removes what the commit placed.
///
/// Each part is checked first: no writer has it open ([`Error::WriterBusy`] naming its lock
/// file otherwise; its lock is held until the commit returns), a dataset ([`Error::NotADataset`] otherwise) with the
/// collection's schema ([`Error::PartMismatch`] naming the part and the first differing field;
/// the first commit's first part sets the schema), not a part of another collection
/// ([`Error::PartOfAnotherCollection`]), not given by a symbolic link nor holding one
/// ([`Error::NotADataset`] naming the link). Then each part outside `<root>/parts/` is
/// moved there under its directory's name (characters other than `[A-Za-z0-9_.-]` become `_`)
/// or, if a different part has that name, under the name with a unique suffix; a part already
/// under `<root>/parts/` stays where it is. Then manifest N+1 is created with the latest
/// manifest's parts followed by the given ones; a part already in it at the same generation is
/// not added twice (a retried commit adds nothing and creates no manifest), one at another
/// generation is [`Error::PartChanged`]. If another committer created N+1 first, the commit
/// rebases on it and tries N+2, and so on. A part on another file system is copied (held by
/// its writer lock from its first byte) and its original removed once the manifest names the
/// copy. A commit that fails after placing parts puts them back where they were given (renamed
/// back, or the copy removed), unless a manifest names them.
///
/// Before a part is placed, a provenance record (`_source`: this host, the part's absolute
/// path, a nonce drawn once for the dataset there) is written into it, so it goes wherever the
/// part goes. A part given by a path that is gone was moved under `<root>/parts/` by an earlier
/// attempt: it is taken from there, found by its record (the newest part whose record names
/// this path, under its plain id or a suffixed one). A path that holds only what is left of a
/// zrecord dataset (no `meta.json`: an earlier attempt's copy was placed and the original's
/// removal cut short) is taken from there too if no manifest names the part yet, and the rest
/// removed. A directory holding anything else is never removed: it is
/// [`Error::NotADataset`]. A part under `<root>/parts/` is taken as a given part's copy only if
/// it holds the given part's record and `meta.json` text, whatever else their bytes say.
///
/// # Errors
/// As above; [`Error::WriterBusy`] for a part a writer has open; [`Error::InvalidConfig`] for
/// a root that is a dataset, a first commit without
/// parts, or a part name that cannot be made an id; the manifest's errors
/// ([`Error::MetaCorrupt`], [`Error::UnsupportedVersion`]); I/O errors naming the file.
pub fn commit(
    root: impl AsRef<Path>,
    parts: &[impl AsRef<Path>],
    options: CommitOptions,
) -> Result<CommitReport> {
    let root = root.as_ref();
    let step = stepper(&options);
    let store = LocalManifests::new(root);
    prepare_root(root, &store)?;
    let _commits = super::commit_lock(root, crate::io::lock::Mode::Shared)?;
    let parts_dir = root.join("parts");
    let latest = store.latest()?;

    // 1. Check every part before moving any.
    let mut given: Vec<Given> = Vec::with_capacity(parts.len());
    // Each part's writer lock, held to the end: no writer may have a part open while it is
    // moved and committed (a part given twice is locked once).
    let mut locks: Vec<(PathBuf, Box<dyn crate::io::vfs::VfsLock>)> = Vec::new();
    // A part given twice is one part, taken where it is first given: the second mention would
    // find it moved already.
    let mut seen: Vec<PathBuf> = Vec::with_capacity(parts.len());
    for p in parts {
        let p = p.as_ref();
        let key = p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let g = check_part(&parts_dir, p)?;
        let at = g.src.canonicalize().unwrap_or_else(|_| g.src.clone());
        if !locks.iter().any(|(p, _)| *p == at) {
            let lock = hold_writer_lock(&g.src)?;
            locks.push((at, lock));
        }
        given.push(g);
    }
    let fields = super::collection_fields(
        root,
        latest.as_ref().map(|m| m.fields.as_slice()),
        given.first().map(|g| g.meta.fields.as_slice()),
    )?;
    for g in &given {
        check_schema(&fields, g, g.inside.as_deref())?;
    }
    step(CommitStep::PartsChecked);

    // 2. Place every part under parts/, then 3. manifest N+1 on top of the latest (rebasing
    // and retrying when it is taken). What this attempt placed is undone if a later step fails
    // before a manifest names it.
    let mut placed_here: Vec<Placement> = Vec::new();
    let result = (|| {
        let mut placed: Vec<PartMeta> = Vec::with_capacity(given.len());
        // Ids placed by this attempt: never taken again for another given part.
        let mut placed_now: HashSet<String> = HashSet::new();
        for (index, g) in given.iter().enumerate() {
            let id = match &g.inside {
                Some(id) => id.clone(),
                None => {
                    let (id, lock) = place(&g.src, &parts_dir, &placed_now, &mut placed_here)?;
                    if let Some(lock) = lock {
                        locks.push((parts_dir.join(&id), lock));
                    }
                    placed_now.insert(id.clone());
                    id
                }
            };
            let (_, meta) = read_meta(&parts_dir.join(&id))?;
            if !placed.iter().any(|p| p.id == id) {
                placed.push(PartMeta {
                    path: part_path(&id),
                    id,
                    len: meta.len,
                    generation: meta.generation,
                });
            }
            step(CommitStep::PartPlaced { index });
        }
        let ids: Vec<String> = placed.iter().map(|p| p.id.clone()).collect();
        let report = append_parts(
            Collection {
                store: &store,
                root,
                part_path: &|id| parts_dir.join(id),
            },
            latest,
            fields,
            &placed,
            &|fields| given.iter().try_for_each(|g| check_schema(fields, g, None)),
            &step,
        )?;
        Ok(CommitReport { ids, ..report })
    })();
    match result {
        Ok(report) => {
            // The manifest names every part: the originals of copies can go now. One that
            // cannot be removed is only a leftover (committing it again adds nothing).
            for p in placed_here.iter().filter(|p| p.how != How::Renamed) {
                if let Err(e) = remove_part(&p.src) {
                    tracing::warn!(part = %p.id, source = %p.src.display(), error = %e,
                        "the part is committed, but its original (copied from another file system) could not be removed");
                }
            }
            Ok(report)
        }
        Err(e) => {
            undo(&store, &parts_dir, &placed_here);
            Err(e)
        }
    }
}

/// A part's writer lock, held by the commit.
type PartLock = Box<dyn crate::io::vfs::VfsLock>;

/// How a part got under `parts/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum How {
    /// Renamed there: gone from where it was given.
    Renamed,
    /// Copied there from another file system: the original is still where it was given.
    Copied,
    /// Found there, copied by an earlier attempt: the original is still where it was given.
    EarlierCopy,
}

/// A part this attempt placed.
struct Placement {
    id: String,
    /// Where it was given.
    src: PathBuf,
    how: How,
}

/// After a failed commit: puts each part this attempt placed back where it was given (a
/// renamed part renamed back, a copy removed; an earlier attempt's copy stays as it was), unless
/// a manifest names one of them (the manifest was linked and a later step failed: the commit
/// happened) or the manifests cannot be read (a retry then finds the parts by their records).
/// Runs with the commit lock and every part's lock held, so no other commit can name them.
fn undo(store: &LocalManifests, parts_dir: &Path, placed: &[Placement]) {
    if placed.is_empty() {
        return;
    }
    let named: HashSet<String> = match store.latest() {
        Ok(latest) => latest
            .into_iter()
            .flat_map(|m| m.parts.into_iter().map(|p| p.id))
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, "a failed commit's parts stay under parts/ (the manifests cannot be read); committing them again takes them from there");
            return;
        }
    };
    if placed.iter().any(|p| named.contains(&p.id)) {
        return;
    }
    for p in placed.iter().rev() {
        let at = parts_dir.join(&p.id);
        let undone = match p.how {
            How::Renamed => move_back(&at, &p.src),
            How::Copied => remove_part(&at),
            How::EarlierCopy => Ok(()),
        };
        if let Err(e) = undone {
            tracing::warn!(part = %p.id, source = %p.src.display(), error = %e,
                "a failed commit's part stays under parts/; committing it again takes it from there");
        }
    }
}

/// Creates the collection's directories if missing (fsyncing what it creates); refuses a root
/// that is a dataset.
pub(crate) fn prepare_root(root: &Path, store: &LocalManifests) -> Result<()> {
    if crate::format::layout::meta(root).exists() {
        return Err(Error::InvalidConfig {
            reason: format!(
                "{} is a dataset, not a collection: commit parts to a new directory",
                root.display()
            ),
        });
    }
    let parts = root.join("parts");
    if store.dir().is_dir() && parts.is_dir() {
        return Ok(());
    }
    for dir in [store.dir(), parts.as_path()] {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, "create directory", e))?;
    }
    fs::sync_dir(root)?;
    if let Some(parent) = root.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::sync_dir(parent)?;
    }
    Ok(())
}

/// Reads part `path`'s meta: where it is and whether it is under `parts/` already.
fn check_part(parts_dir: &Path, path: &Path) -> Result<Given> {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        // Renaming would move the link and leave the data where it is; give the data's path.
        return Err(Error::NotADataset {
            path: path.to_path_buf(),
            reason: format!(
                "a part given by a symbolic link is refused (the link, not the data, would be \
                 moved): give the dataset's own path ({})",
                path.canonicalize().map_or_else(
                    |_| "a dangling link".to_string(),
                    |p| p.display().to_string()
                )
            ),
        });
    }
    let raw = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let inside = match (path.parent(), parts_dir.canonicalize()) {
        (Some(parent), Ok(parts)) => {
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            parent.canonicalize().is_ok_and(|p| p == parts)
        }
        _ => false,
    };
    // Moved (or copied, its original then partly removed, `meta.json` first) by an earlier
    // attempt that did not finish: the part is the one under parts/ whose record says it came
    // from this path (under its plain id or a suffixed one), and the path is gone, or holds
    // only what is left of a zrecord dataset (a commit killed while it removed the original of
    // a copy its manifest names, or, in a build that removed originals before the manifest,
    // one no manifest names yet). Never anything else: a directory that is not recognisably the
    // rest of a copied part is not touched, and is `NotADataset`.
    let mut id = if inside { raw.to_string() } else { id_of(path) };
    let mut src = path.to_path_buf();
    let mut inside = inside;
    if !inside && !crate::format::layout::meta(path).exists() {
        let gone = std::fs::symlink_metadata(path).is_err();
        if gone || is_rest_of_a_dataset(path) {
            if let Some(found) = earlier_placement(parts_dir, path, gone)? {
                if !gone {
                    remove_part(path)?;
                }
                src = parts_dir.join(&found);
                id = found;
                inside = true;
            }
        }
    }
    if !inside {
        refuse_other_collections_part(parts_dir, &src)?;
    }
    refuse_links_inside(&src)?;
    let name = id.as_str();
    if inside && !valid_part_id(name) {
        return Err(Error::InvalidConfig {
            reason: format!(
                "{}: {name:?} is not a valid part id (1-{MAX_PART_ID_BYTES} characters of \
                 A-Z, a-z, 0-9, '_', '-' or '.', not starting with '.')",
                path.display()
            ),
        });
    }
    let meta = match read_meta(&src) {
        Ok((_, meta)) => meta,
        Err(Error::Io {
            path: p, source, ..
        }) if p == crate::format::layout::meta(&src)
            && source.kind() == std::io::ErrorKind::NotFound =>
        {
            return Err(Error::NotADataset {
                path: src,
                reason: "a part must be a zrecord dataset (it holds no meta.json)".to_string(),
            })
        }
        Err(e) => return Err(e),
    };
    Ok(Given {
        src,
        inside: inside.then(|| name.to_string()),
        meta,
    })
}

/// Refuses a part that lies under another local collection's `parts/`: moving it out would
/// break that collection (its manifests name the part). [`Error::PartOfAnotherCollection`]
/// names both.
fn refuse_other_collections_part(parts_dir: &Path, src: &Path) -> Result<()> {
    let Some(parent) = std::path::absolute(src)
        .ok()
        .and_then(|a| a.parent().and_then(|p| p.canonicalize().ok()))
    else {
        return Ok(());
    };
    if parent.file_name().is_none_or(|n| n != "parts") {
        return Ok(());
    }
    let Some(other) = parent.parent().filter(|r| super::is_collection(r)) else {
        return Ok(());
    };
    let ours = parts_dir.parent().and_then(|r| r.canonicalize().ok());
    if ours.as_deref() == Some(other) {
        return Ok(());
    }
    Err(Error::PartOfAnotherCollection {
        part: src.to_path_buf(),
        collection: other.to_path_buf(),
        target: parts_dir.parent().unwrap_or(parts_dir).to_path_buf(),
    })
}

/// Refuses a part holding a symbolic link or another special file where a dataset has its
/// files (its top directory and `chunk/`): a rename would move the link, not what it names,
/// and a copy could not copy it.
fn refuse_links_inside(dir: &Path) -> Result<()> {
    for d in [dir.to_path_buf(), dir.join("chunk")] {
        let Ok(list) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in list.flatten() {
            let kind = e
                .file_type()
                .map_err(|err| Error::io(e.path(), "stat", err))?;
            if !kind.is_file() && !kind.is_dir() {
                return Err(super::place::not_a_plain_file(&e.path()));
            }
        }
    }
    Ok(())
}

/// The part under `parts_dir` that an earlier attempt placed from `path` (which is `gone`, or
/// holds only the rest of a dataset whose copy was placed): the newest part whose record names
/// this host and path (and the rest's nonce, if its record is still there), named by a manifest
/// or not (a commit of a part a manifest names adds nothing). A part placed by a build that
/// wrote no record is found by its plain id, as that build found it, if it has no record.
fn earlier_placement(parts_dir: &Path, path: &Path, gone: bool) -> Result<Option<String>> {
    let left = if gone { None } else { source::read(path) };
    if let Some(id) = source::find_placed(parts_dir, path, left.as_ref().map(|r| r.nonce.as_str()))?
    {
        return Ok(Some(id));
    }
    let plain = id_of(path);
    let dir = parts_dir.join(&plain);
    let old = crate::format::layout::meta(&dir).exists()
        && !dir.join(crate::format::source::SOURCE_FILE).exists();
    Ok(old.then_some(plain))
}

/// Checks a part's schema against the collection's.
fn check_schema(fields: &[ManifestField], g: &Given, id: Option<&str>) -> Result<()> {
    match schema_difference(fields, &g.meta.fields) {
        None => Ok(()),
        Some((field, reason)) => Err(Error::PartMismatch {
            part: id.map_or_else(|| g.src.display().to_string(), str::to_string),
            path: g.src.clone(),
            field,
            reason,
        }),
    }
}

/// True if `dir` holds nothing but the files of a zrecord dataset (its chunks, tables, patch
/// logs, dictionaries, lock, temporary meta) and no `meta.json`: what a copy's removal of its
/// original leaves when it is cut short.
fn is_rest_of_a_dataset(dir: &Path) -> bool {
    use crate::format::layout;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().all(|e| {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
        match is_dir {
            true if name == "chunk" => std::fs::read_dir(e.path()).is_ok_and(|c| {
                c.flatten()
                    .all(|f| layout::parse_chunk(&f.file_name().to_string_lossy()).is_some())
            }),
            true => false,
            false => {
                layout::is_table_file(&name)
                    || name.ends_with(".zdict")
                    || name == layout::LOCK
                    || name == layout::META_TMP
                    || name == crate::format::source::SOURCE_FILE
                    || name == source::SOURCE_TMP
            }
        }
    })
}

/// Moves the part at `src` under `parts_dir`: under its name, or (taken by a different part)
/// under its name with a suffix derived from its provenance record (written into `src` first,
/// so it goes with the part: `_source`), the same suffixes in the same order on every attempt.
/// Returns its id, the lock of a copy (held until the commit returns), and how it got there
/// (the original of a copy stays until the manifest names it). A taken id is this part's own
/// copy, placed by an earlier attempt cut short before it removed the original, only by the rule every commit uses
/// ([`source::is_earlier_copy`]: the same record and the same `meta.json` text), and only if
/// this attempt did not place it (`placed_now`) and no other commit holds it (its writer lock
/// is free; it is then held until the commit returns, and returned): otherwise it is another
/// part, whatever bytes it holds.
fn place(
    src: &Path,
    parts_dir: &Path,
    placed_now: &HashSet<String>,
    placed_here: &mut Vec<Placement>,
) -> Result<(String, Option<PartLock>)> {
    let mine = source::ensure(src, true)?;
    let meta_file = crate::format::layout::meta(src);
    let my_meta = std::fs::read(&meta_file).map_err(|e| Error::io(&meta_file, "read", e))?;
    let base = id_of(src);
    for attempt in 0..64 {
        let id = candidate_id(&base, &mine, attempt);
        let target = parts_dir.join(&id);
        // Each placement is recorded before anything fallible follows it: a commit that fails
        // from here on puts the part back.
        let mut record = |how| {
            placed_here.push(Placement {
                id: id.clone(),
                src: src.to_path_buf(),
                how,
            });
        };
        match move_part(src, parts_dir, &target)? {
            Placed::Moved => {
                record(How::Renamed);
                sync_placed(src, parts_dir, true)?;
                touch(&target);
                return Ok((id, None));
            }
            Placed::Copied(lock) => {
                record(How::Copied);
                sync_placed(src, parts_dir, false)?;
                touch(&target);
                return Ok((id, Some(Box::new(lock))));
            }
            Placed::Taken if !placed_now.contains(&id) => {
                // Tried once: a part found held is another commit's (or, for a moment, a
                // spawned child's copy: this part then goes under the next id, and the copy
                // stays unnamed until gc removes it).
                let Some(lock) = writer_lock_if_free(&target)? else {
                    continue;
                };
                let found_meta =
                    std::fs::read(crate::format::layout::meta(&target)).unwrap_or_default();
                let found = source::read(&target);
                if source::is_earlier_copy(&mine, &my_meta, found.as_ref(), &found_meta) {
                    record(How::EarlierCopy);
                    touch(&target);
                    return Ok((id, Some(Box::new(lock))));
                }
            }
            Placed::Taken => {}
        }
    }
    Err(Error::internal(format!(
        "no free part id for {} under {}",
        src.display(),
        parts_dir.display()
    )))
}

/// A part id from a directory's name: characters outside `[A-Za-z0-9_.-]` become `_`, a
/// leading `.` too, cut to leave room for a unique suffix.
pub(crate) fn id_of(src: &Path) -> String {
    let name = src
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut id: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(MAX_PART_ID_BYTES - 17)
        .collect();
    if id.is_empty() || id.starts_with('.') {
        id.insert(0, 'p');
    }
    id
}
