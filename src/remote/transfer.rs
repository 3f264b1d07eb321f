//! The public [`push`] and [`pull`]: of a dataset (`push.rs`, `pull.rs`) or of a whole
//! collection (`collection/push.rs`, `collection/pull.rs`), whichever the source is.

use std::path::Path;

use super::collection::probe::is_collection;
use super::collection::{pull_collection, push_collection};
use super::push::{TransferOptions, TransferReport};
use super::store::Store;
use crate::error::Result;

/// Publishes the latest commit of the local dataset at `local` to `url` (`s3://bucket/prefix`,
/// `gs://bucket/prefix`, `az://container/prefix`); or, if `local` is the root of a collection,
/// the collection's latest manifest (below, "Collections").
///
/// First the store is probed once: a conditional create (`If-None-Match: *`) of a fresh probe
/// key, twice; the second must be refused. A store that accepts it (Garage 2.5.0 does) would let
/// two racing pushes both commit and lose one update silently, so the push is refused there
/// unless [`TransferOptions::single_writer`] says one writer publishes to this prefix.
///
/// Data objects are uploaded next (several at once, large ones in parts), each under a key
/// that names its content (`data/<file>.<blake3>.<size>.<crc32c>`: a BLAKE3 hash of all its
/// bytes): one already on the store holds the same bytes and is skipped, so a push that was
/// killed and is run again uploads only what is missing and finishes the same generation. Each
/// file is opened when its upload starts (the descriptors held are bounded by the uploads in
/// flight, not by the number of chunks). The commit manifest is written last, into the next
/// free commit slot, with a conditional create: readers never see a partial generation, and
/// where the store's conditional create is atomic (AWS S3, GCS, Azure), of two pushes racing to
/// the same prefix exactly one takes the slot.
///
/// # Collections
///
/// A local collection (a directory holding `_collection/`) is published as a collection at
/// `url`: each part of its latest manifest is pushed as above to `<url>/parts/<id>`, then a
/// manifest listing exactly those parts, in the same order (the same ids, generations and
/// lengths), is created as the store's next manifest with a conditional create. What the
/// store's latest manifest lists decides what that takes:
///
/// - the same parts: nothing is uploaded or committed ([`TransferReport::already_done`]);
/// - a prefix of them (nothing yet, or an earlier push of this collection before it grew): the
///   parts it lacks are pushed and the manifest appended. A part already committed under
///   `<url>/parts/<id>` by an earlier attempt is skipped; one cut short uploads what is missing;
/// - anything else (another collection, or parts another committer added): refused with
///   [`Error::PublishConflict`] naming the URL and the first part that differs; nothing is
///   uploaded. Replacing the list would drop the other committer's parts; appending commutes.
///
/// Every part's commit under `<url>/parts/<id>` is compared whole with the local part's (its
/// files' sizes, CRC32C and BLAKE3 hashes): a manifest lists parts by id, generation and length
/// only, and ids are directory names, so another collection's part may match those. Another
/// dataset under a part's id is refused ([`Error::PublishConflict`] naming `<url>/parts/<id>`)
/// before anything of that part is uploaded, and never committed over. A rerun therefore reads
/// (hashes) every local part again; it uploads nothing that is there.
///
/// Two pushes of one collection at once both succeed where the conditional create is atomic:
/// one creates the manifest, the other finds it listing its parts and reports it as already
/// done; each part is listed once. [`TransferReport::generation`] is the local manifest's
/// number, [`TransferReport::slot`] the store's, and [`TransferReport::parts`] their count.
///
/// # Errors
/// [`Error::NotADataset`] if `local` holds no dataset (or a collection without a manifest);
/// [`Error::ConditionalCreateIgnored`] if the store ignores conditional creates and
/// `single_writer` is off; [`Error::PublishConflict`] if another push took the commit slot
/// first (or the store overwrote this push's manifest), if a collection there is not a prefix
/// of the local one, or if another dataset is pushed under a part's id; [`Error::PartChanged`]
/// for a local part no longer at the generation its manifest pins; [`Error::Remote`] for a
/// request that failed after its retries; [`Error::InvalidConfig`] for a URL or options that do
/// not work.
///
/// [`Error::NotADataset`]: crate::Error::NotADataset
/// [`Error::ConditionalCreateIgnored`]: crate::Error::ConditionalCreateIgnored
/// [`Error::PublishConflict`]: crate::Error::PublishConflict
/// [`Error::PartChanged`]: crate::Error::PartChanged
/// [`Error::Remote`]: crate::Error::Remote
/// [`Error::InvalidConfig`]: crate::Error::InvalidConfig
pub fn push(
    local: impl AsRef<Path>,
    url: &str,
    options: &TransferOptions,
) -> Result<TransferReport> {
    let local = local.as_ref();
    if crate::store::collection::is_collection(local) {
        return push_collection(local, url, options);
    }
    super::push::push(local, url, options)
}

/// Fetches the latest commit of the dataset at `url` into the local directory `local`, which
/// becomes an ordinary local dataset; or, if `url` holds a collection, the collection's latest
/// manifest (below, "Collections").
///
/// The pull holds the directory's writer lock throughout: several processes pulling into one
/// directory run one after the other, and the later ones find the files in place (a writer
/// opened meanwhile gets [`Error::WriterBusy`]; a pull waits for a writer to close). Every file
/// is downloaded under a temporary name of its own, synced, checked on disk against the size
/// and CRC32C its manifest records, and renamed into place; `meta.json` comes last, so an
/// interrupted pull leaves no dataset, and running it again downloads only the files that are
/// missing or fail their check. A directory that already holds this commit is checked file by
/// file the same way: [`TransferReport::already_done`] means every file checked; a damaged one
/// is downloaded again.
///
/// # Collections
///
/// A collection at `url` (a prefix holding `_collection/`) is pulled into `local` as a local
/// collection: each part of the store's latest manifest is pulled as above into
/// `local/parts/<id>`, then the local committer ([`crate::collection::commit`]: its part locks,
/// its numbering and its crash rules) appends the parts the local collection lacks, so its
/// latest manifest lists exactly the store's parts, in order. A local collection that lists a
/// prefix of them (an earlier pull, before the collection grew) is appended to; one that lists
/// anything else is refused ([`Error::InvalidConfig`]) and left unchanged. A pull killed
/// mid-way leaves the local manifest as it was (the manifest comes last); run again, it
/// downloads only what is missing. Pulls into one directory run one after the other (each
/// holds a lock on the directory itself), and each holds the local collection's commit lock
/// for its whole run, so no `gc` removes a part it pulled before its manifest names it; a part
/// directory a writer holds is [`Error::WriterBusy`] at once, never waited for (the wait would
/// hold up every `gc` of the collection). [`TransferReport::already_done`] means every file of
/// every part checked and no manifest was added; [`TransferReport::generation`] is the local
/// manifest's number (the local committer numbers its own), [`TransferReport::slot`] the
/// store's, and [`TransferReport::parts`] their count. A part whose commit on the store is not
/// the one the manifest pins (its generation, length and fields: another dataset pushed under
/// its id since) fails the pull ([`Error::PartChanged`], [`Error::RemoteCorrupt`] or
/// [`Error::PartMismatch`]) before any local manifest names it. A part object that does not match its checksum fails the pull with
/// [`Error::RemoteCorrupt`] naming it, before any manifest names the part.
///
/// # Errors
/// [`Error::NotADataset`] if `url` holds no commit; [`Error::RemoteCorrupt`] for an object that
/// does not match its manifest; [`Error::InvalidConfig`] if `local` holds another dataset, or a
/// collection where `url` holds a dataset (or the reverse), or another collection;
/// [`Error::PartChanged`] for a part on the store no longer at the generation its manifest
/// pins, [`Error::RemoteCorrupt`] for one of another length, [`Error::PartMismatch`] for one
/// with other fields; [`Error::WriterBusy`] for a collection's part a writer holds locally;
/// [`Error::Remote`] for a request that failed after its retries; [`Error::Io`] for local
/// file work that failed (a file that does not read back as written among them).
///
/// [`Error::WriterBusy`]: crate::Error::WriterBusy
/// [`Error::NotADataset`]: crate::Error::NotADataset
/// [`Error::RemoteCorrupt`]: crate::Error::RemoteCorrupt
/// [`Error::InvalidConfig`]: crate::Error::InvalidConfig
/// [`Error::PartChanged`]: crate::Error::PartChanged
/// [`Error::PartMismatch`]: crate::Error::PartMismatch
/// [`Error::Remote`]: crate::Error::Remote
/// [`Error::Io`]: crate::Error::Io
pub fn pull(
    url: &str,
    local: impl AsRef<Path>,
    options: &TransferOptions,
) -> Result<TransferReport> {
    options.check()?;
    let store = Store::open(url, &options.store)?;
    if is_collection(&store)? {
        return pull_collection(&store, local.as_ref(), options);
    }
    super::pull::pull(url, local, options)
}
