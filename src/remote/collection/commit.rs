//! Committing parts to a collection on an object store: each part is either a dataset already
//! pushed under `<url>/parts/<id>` (a distributed writer's task pushed it there itself), taken
//! in place, or a local dataset directory, pushed there first. Then the next manifest is
//! created with a conditional `PUT`, rebasing on the latest when another committer took the
//! number (`store/collection/append.rs`, shared with local collections). All of it under a
//! lease (`lease.rs`) that keeps `gc` off the parts (`gc.rs` argues why).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::lease::{removing, HeldLease, LeasedManifests};
use super::RemoteManifests;
use crate::error::{Error, Result};
use crate::format::collection::{
    valid_part_id, Manifest as CollectionManifest, ManifestField, PartMeta,
};
use crate::format::lease::LeaseKind;
use crate::format::meta::Meta;
use crate::format::source::{candidate_id, PartSource, SOURCE_FILE};
use crate::remote::manifest::{latest, slot_key, Manifest};
use crate::remote::push::{honours_conditional_create, push_with, Stack, TransferOptions};
use crate::remote::store::{block_on, Create, Store};
use crate::store::collection::append::{append_parts, Collection};
use crate::store::collection::manifests::{ManifestStore, Step};
use crate::store::collection::options::stepper;
use crate::store::collection::place::hold_writer_lock;
use crate::store::collection::source;
use crate::store::collection::{id_of, schema_difference, CommitOptions, CommitReport, CommitStep};
use crate::store::location::local_path;
use crate::store::snapshot::read_meta;

/// Where a given part is.
enum Source {
    /// Pushed under `parts/<id>` already.
    Pushed { id: String },
    /// A local dataset directory, with the exact text of its `meta.json` and its writer lock,
    /// held until the commit returns.
    Local {
        dir: PathBuf,
        meta_text: Vec<u8>,
        _lock: Box<dyn crate::io::vfs::VfsLock>,
    },
}

/// A part as given, checked.
struct Given {
    /// What names it in errors: its URL or directory.
    name: PathBuf,
    source: Source,
    meta: Meta,
}

/// Commits `parts` to the collection at `url` (`s3://bucket/prefix`, `gs://…`, `az://…`),
/// creating it if there is none: their records follow the collection's in the order given.
///
/// A part is the URL of a dataset pushed under `<url>/parts/<id>` (taken in place, pinned at its
/// latest commit's generation and length), or a local dataset directory, pushed to
/// `<url>/parts/<id>` first (`id` from the directory's name as locally; another part there
/// already makes the id take a suffix; a part there with this directory's provenance record,
/// `parts/<id>/_source`, and the same commit, from an earlier attempt, is taken as it is). Every part is checked first (a dataset with the
/// collection's schema: the first commit's first part sets it). Then manifest N+1 is created
/// with the latest manifest's parts followed by the given ones with a conditional `PUT`
/// (`If-None-Match: *`); if another committer took N+1, the commit rebases on it and tries
/// N+2, and so on. A part already listed at the same generation is not added twice: a retried
/// commit adds nothing and creates no manifest.
///
/// `gc` never removes a part this commit pushes or takes, whatever its limit: after reading the
/// latest manifest the commit writes a lease, `_collection/leases/commit-<nonce>.json`, naming
/// each part's id before anything is pushed under it or taken from it, keeps it fresh (every
/// [`LEASE_TTL`]` / 4`) and deletes it once the manifest exists. A part a `gc` is removing (its
/// own lease names it) is not taken: a local part goes under its next suffixed id, a part
/// given by URL is [`Error::NotADataset`]. A lease not written again for [`LEASE_TTL`]` / 2`
/// is lost, and the commit creates no manifest then ([`Error::Remote`] naming the lease).
///
/// The store is probed first, as [`push`] does: one that ignores conditional creates (Garage
/// 2.5.0) is refused unless [`TransferOptions::single_writer`] says one committer writes to
/// this collection. `options.on_step` is told [`CommitStep::PartsChecked`], each
/// [`CommitStep::PartPlaced`] and [`CommitStep::ManifestLinked`] (a manifest is created in one
/// request: there is no `ManifestWritten` step).
///
/// # Errors
/// [`Error::PartOutsideCollection`] for a part URL elsewhere than `<url>/parts/<id>`;
/// [`Error::NotADataset`] for a part that holds no (committed) dataset; [`Error::WriterBusy`]
/// for a local part a writer has open (its lock is held from the check to the end of the
/// commit);
/// [`Error::PartMismatch`] naming the part and the first differing field; [`Error::PartChanged`]
/// for a part listed at another generation; [`Error::ConditionalCreateIgnored`] as above;
/// [`Error::MetaCorrupt`] naming a damaged manifest's URL, or a live lease under
/// `_collection/leases/` that cannot be read; [`Error::InvalidConfig`] for a first
/// commit without parts, or a URL or options that do not work; [`Error::Remote`] for requests
/// that failed after their retries.
///
/// [`push`]: crate::remote::push
/// [`LEASE_TTL`]: crate::collection::LEASE_TTL
pub fn commit_url(
    url: &str,
    parts: &[impl AsRef<str>],
    options: CommitOptions,
    transfer: &TransferOptions,
) -> Result<CommitReport> {
    transfer.check()?;
    let step = stepper(&options);
    let store = Store::open(url, &transfer.store)?;
    let root = PathBuf::from(store.url());
    if !transfer.single_writer {
        let s = Arc::clone(&store);
        if !block_on(async move { honours_conditional_create(&s).await })?? {
            return Err(Error::ConditionalCreateIgnored {
                url: store.url().to_string(),
                reason: "this object store ignores conditional creates (a probe created one \
                         key twice with If-None-Match: *; Garage 2.5.0 does), so two \
                         committers racing to one collection could both create a manifest \
                         and one commit would be lost without an error. If only one committer \
                         ever writes to this collection, commit with --single-writer \
                         (TransferOptions::single_writer)"
                    .into(),
            });
        }
    }
    let manifests = RemoteManifests::new(Arc::clone(&store));
    let latest_manifest = manifests.latest()?;

    // The lease before anything else: no object under parts/ is written, and no part found
    // there is taken, before a lease naming its id exists (gc.rs argues why that keeps gc off
    // them). It names each part's first id now; a suffixed id is added before it is tried.
    let ids: Vec<String> = parts
        .iter()
        .filter_map(|p| first_id(&store, p.as_ref()))
        .collect();
    let lease = HeldLease::take(&store, LeaseKind::Commit, ids)?;
    let leased = LeasedManifests::new(&manifests, &lease);
    let out = commit_leased(
        &store,
        &root,
        parts,
        latest_manifest,
        &leased,
        transfer,
        &step,
    );
    // Deleted once the manifest exists, or when no manifest can have been created: a failed
    // commit's parts are garbage then. A commit that failed after it tried to create its
    // manifest leaves its lease to die (a create whose answer was lost may still land).
    if out.is_ok() || !leased.tried() {
        if let Err(e) = lease.release() {
            tracing::debug!("deleting a commit's lease: {e}");
        }
    }
    out
}

/// The rest of [`commit_url`], under `leased`'s lease.
fn commit_leased(
    store: &Arc<Store>,
    root: &Path,
    parts: &[impl AsRef<str>],
    latest_manifest: Option<CollectionManifest>,
    leased: &LeasedManifests<'_>,
    transfer: &TransferOptions,
    step: Step<'_>,
) -> Result<CommitReport> {
    // The lease names each part's first id already.
    let first_ids = parts
        .iter()
        .filter_map(|p| first_id(store, p.as_ref()))
        .collect();
    let mut guard = Guard::new(store, leased.lease(), first_ids)?;

    // 1. Check every part before pushing any.
    let mut given = Vec::with_capacity(parts.len());
    // A part given twice is one part, taken where it is first given (a local one's writer lock
    // is held once: a second lock on it would be refused as busy).
    let mut seen: Vec<String> = Vec::with_capacity(parts.len());
    for p in parts {
        let p = p.as_ref();
        let key = match local_path(p) {
            None => p.trim_end_matches('/').to_string(),
            Some(local) => {
                let dir = Path::new(local);
                let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
                dir.display().to_string()
            }
        };
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        given.push(check_part(store, p, &mut guard)?);
    }
    let fields = crate::store::collection::collection_fields(
        root,
        latest_manifest.as_ref().map(|m| m.fields.as_slice()),
        given.first().map(|g| g.meta.fields.as_slice()),
    )?;
    let check = |fields: &[ManifestField]| -> Result<()> {
        given.iter().try_for_each(|g| check_schema(fields, g))
    };
    check(&fields)?;
    step(CommitStep::PartsChecked);

    // 2. Push the local parts under parts/.
    let mut placed: Vec<PartMeta> = Vec::with_capacity(given.len());
    // Ids this call placed: a second local part with the same commit is another part.
    let mut placed_now: HashSet<String> = HashSet::new();
    for (index, g) in given.iter().enumerate() {
        let part = match &g.source {
            Source::Pushed { id } => PartMeta {
                path: crate::format::collection::part_path(id),
                id: id.clone(),
                len: g.meta.len,
                generation: g.meta.generation,
            },
            Source::Local { dir, meta_text, .. } => {
                place(store, dir, meta_text, &placed_now, transfer, &mut guard)?
            }
        };
        placed_now.insert(part.id.clone());
        if !placed.iter().any(|p| p.id == part.id) {
            placed.push(part);
        }
        step(CommitStep::PartPlaced { index });
    }

    // 3. Manifest N+1 on top of the latest; rebase and retry when it is taken. Each create
    // is tried only while the lease is held.
    let parts_url = |id: &str| PathBuf::from(store.object_url(&format!("parts/{id}")));
    append_parts(
        Collection {
            store: leased,
            root,
            part_path: &parts_url,
        },
        latest_manifest,
        fields,
        &placed,
        &check,
        step,
    )
}

/// The id a given part is first tried under: its id in `<url>/parts/<id>`, or a local
/// directory's name as a part id; `None` for a URL elsewhere (refused by its check).
fn first_id(store: &Arc<Store>, part: &str) -> Option<String> {
    match local_path(part) {
        None => id_in(store.url(), part),
        Some(local) => Some(id_of(Path::new(local))),
    }
}

/// What the `gc` leases of a collection name, read after this commit's lease named the ids
/// asked about: a `gc` that did not see this commit's lease wrote its own before that read, so
/// a part it is removing is seen here (gc.rs).
struct Guard<'a> {
    store: &'a Arc<Store>,
    lease: &'a HeldLease,
    /// The ids the lease named when `removing` was read.
    named: HashSet<String>,
    /// The parts live `gc` leases name.
    removing: HashSet<String>,
}

impl<'a> Guard<'a> {
    /// Reads the `gc` leases, `lease` being written already naming `named`.
    fn new(store: &'a Arc<Store>, lease: &'a HeldLease, named: Vec<String>) -> Result<Guard<'a>> {
        let mut g = Guard {
            store,
            lease,
            named: named.into_iter().collect(),
            removing: HashSet::new(),
        };
        g.read()?;
        Ok(g)
    }

    fn read(&mut self) -> Result<()> {
        self.removing = removing(self.store)?;
        Ok(())
    }

    /// Whether a live `gc` lease names part `id`: its prefix is being removed, and nothing
    /// under it may be taken or written. The lease names `id` when this returns.
    fn removing(&mut self, id: &str) -> Result<bool> {
        if !self.named.contains(id) {
            self.lease.hold(&[id.to_string()])?;
            self.named.insert(id.to_string());
            self.read()?;
        }
        Ok(self.removing.contains(id))
    }
}

/// Reads part `part` (a URL under `<store>/parts/<id>`, or a local dataset directory). A part
/// given by URL that a `gc` is removing is no dataset.
fn check_part(store: &Arc<Store>, part: &str, guard: &mut Guard<'_>) -> Result<Given> {
    let Some(local) = local_path(part) else {
        let id = id_in(store.url(), part).ok_or_else(|| Error::PartOutsideCollection {
            part: part.to_string(),
            collection: store.url().to_string(),
        })?;
        if guard.removing(&id)? {
            return Err(Error::NotADataset {
                path: PathBuf::from(part),
                reason: "zrecord gc is removing it (a part pushed under parts/ is protected by \
                         gc's --older-than limit alone until a commit takes it)"
                    .into(),
            });
        }
        let meta = pushed_meta(store, &id)?.ok_or_else(|| Error::NotADataset {
            path: PathBuf::from(part),
            reason: "no commit under it: push the part there before committing it".into(),
        })?;
        return Ok(Given {
            name: PathBuf::from(part.trim_end_matches('/')),
            source: Source::Pushed { id },
            meta,
        });
    };
    let dir = Path::new(local);
    let not_a_dataset = || Error::NotADataset {
        path: dir.to_path_buf(),
        reason: "a part must be a zrecord dataset (it holds no meta.json)".to_string(),
    };
    if !crate::format::layout::meta(dir).exists() {
        return Err(not_a_dataset());
    }
    // No writer may have the part open while it is pushed and committed.
    let lock = hold_writer_lock(dir)?;
    let (meta_text, meta) = read_meta(dir).map_err(|e| match e {
        Error::Io { ref source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            not_a_dataset()
        }
        e => e,
    })?;
    Ok(Given {
        name: dir.to_path_buf(),
        source: Source::Local {
            dir: dir.to_path_buf(),
            meta_text,
            _lock: lock,
        },
        meta,
    })
}

/// The part id of `part` if it is `<root>/parts/<id>` (a trailing `/` aside) with a valid id.
fn id_in(root: &str, part: &str) -> Option<String> {
    let rest = part
        .trim_end_matches('/')
        .strip_prefix(root)?
        .strip_prefix("/parts/")?;
    valid_part_id(rest).then(|| rest.to_string())
}

/// The latest commit's text and meta of the dataset pushed under `parts/<id>`; `None` if none.
fn pushed(store: &Arc<Store>, id: &str) -> Result<Option<(String, Meta)>> {
    let child = store.child(&format!("parts/{id}"))?;
    let c = Arc::clone(&child);
    let Some((slot, bytes)) = block_on(async move { latest(&c).await })?? else {
        return Ok(None);
    };
    let (m, meta) = Manifest::decode(&child.object_url(&slot_key(slot)), &bytes)?;
    Ok(Some((m.meta, meta)))
}

/// The meta of the latest commit of the dataset pushed under `parts/<id>`; `None` if none.
fn pushed_meta(store: &Arc<Store>, id: &str) -> Result<Option<Meta>> {
    Ok(pushed(store, id)?.map(|(_, meta)| meta))
}

/// Checks a part's schema against the collection's.
fn check_schema(fields: &[ManifestField], g: &Given) -> Result<()> {
    match schema_difference(fields, &g.meta.fields) {
        None => Ok(()),
        Some((field, reason)) => Err(Error::PartMismatch {
            part: g.name.display().to_string(),
            path: g.name.clone(),
            field,
            reason,
        }),
    }
}

/// Pushes the local dataset `dir` (whose `meta.json` read `meta_text`) under `parts/<id>`: `id`
/// from its name, or with a suffix derived from its provenance record if another part (or
/// another part of this call, `placed_now`) is there, the same suffixes in the same order on
/// every attempt. Before it pushes, it claims the id by creating `parts/<id>/_source` (the
/// record: this host, `dir`'s path, the nonce written once into `dir`) with a conditional
/// create. A part found under an id is this part's earlier push only by the rule every commit
/// uses ([`source::is_earlier_copy`]: the same record, the same `meta.json` text); a claim of
/// ours without a dataset yet (a push cut short) is pushed again. An id is tried only once the
/// commit's lease names it, and one a `gc` is removing is skipped. Returns the part as the
/// store has it.
fn place(
    store: &Arc<Store>,
    dir: &Path,
    meta_text: &[u8],
    placed_now: &HashSet<String>,
    transfer: &TransferOptions,
    guard: &mut Guard<'_>,
) -> Result<PartMeta> {
    let mine = source::ensure(dir, false)?;
    let base = id_of(dir);
    // The store was probed (or declared single-writer) once for the whole commit.
    let options = transfer.clone().single_writer(true);
    for attempt in 0..64 {
        let id = candidate_id(&base, &mine, attempt);
        if placed_now.contains(&id) || guard.removing(&id)? {
            continue;
        }
        let ours = match pushed(store, &id)? {
            Some((text, _)) => source::is_earlier_copy(
                &mine,
                meta_text,
                remote_source(store, &id)?.as_ref(),
                text.as_bytes(),
            ),
            None if !claim(store, &id, &mine)? => false,
            // Never on top of a commit found there by then: a part is named by its id, so
            // another dataset's commit under it would be read in this one's place.
            None => match push_with(
                dir,
                &store.object_url(&format!("parts/{id}")),
                &options,
                Stack::Never,
            ) {
                Ok(_) => true,
                // A dataset pushed there at the same moment by a writer that claims nothing
                // (a task pushing its own part): not ours, and neither is the record we left.
                Err(Error::PublishConflict { .. }) => {
                    let (s, key) = (Arc::clone(store), source_key(&id));
                    block_on(async move { s.delete(&key).await })??;
                    false
                }
                Err(e) => return Err(e),
            },
        };
        if ours {
            // What the store holds now: the commit pushed.
            let meta = pushed_meta(store, &id)?.ok_or_else(|| {
                Error::internal(format!("part {id} has no commit right after its push"))
            })?;
            return Ok(PartMeta {
                path: crate::format::collection::part_path(&id),
                id,
                len: meta.len,
                generation: meta.generation,
            });
        }
    }
    Err(Error::internal(format!(
        "no free part id for {} under {}/parts",
        dir.display(),
        store.url()
    )))
}

/// The key of part `id`'s provenance record.
fn source_key(id: &str) -> String {
    format!("parts/{id}/{SOURCE_FILE}")
}

/// Part `id`'s provenance record on the store; `None` if it has none (or an unreadable one).
fn remote_source(store: &Arc<Store>, id: &str) -> Result<Option<PartSource>> {
    let (s, key) = (Arc::clone(store), source_key(id));
    let bytes = block_on(async move {
        match s.head(&key).await? {
            Some(_) => s.get(&key).await.map(Some),
            None => Ok(None),
        }
    })??;
    Ok(bytes.and_then(|b| PartSource::decode(&b).ok()))
}

/// Claims id `id` for a part from `mine`: creates `parts/<id>/_source` unless it exists. True if
/// this call created it, or it holds `mine` already (an earlier attempt's claim).
fn claim(store: &Arc<Store>, id: &str, mine: &PartSource) -> Result<bool> {
    let (s, key) = (Arc::clone(store), source_key(id));
    let body = bytes::Bytes::from(mine.encode());
    let created = block_on(async move { s.create(&key, body).await })??;
    Ok(match created {
        Create::Created => true,
        Create::Exists | Create::Maybe => remote_source(store, id)?.as_ref() == Some(mine),
    })
}
