//! The one public error type.
//!
//! Variants name the failure, not the module, and carry the context a user needs to find it:
//! the file, the field, the record index, the chunk and the byte offset. Corruption of bytes read
//! from disk is always one of these values, never a panic.

use std::path::PathBuf;

/// The result type of every fallible zrecord operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in zrecord.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O call failed.
    #[error("I/O error on {path}: {op}")]
    Io {
        /// The file or directory the call was about.
        path: PathBuf,
        /// What was being done (`open`, `read`, `fdatasync`, ...).
        op: &'static str,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// `meta.json` could not be parsed or failed its checksum.
    #[error("corrupt metadata in {path}: {reason}")]
    MetaCorrupt {
        /// The metadata file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },

    /// A field's zstd dictionary file (`<field>.<number>.zdict`) is short, fails its CRC32C, or
    /// zstd cannot prepare it.
    #[error("corrupt dictionary {number} of field {field:?} in {path}: {reason}")]
    DictionaryCorrupt {
        /// The dictionary file.
        path: PathBuf,
        /// The field.
        field: String,
        /// The dictionary's number.
        number: u8,
        /// What was wrong.
        reason: String,
    },

    /// `meta.json` names a format version this build does not understand.
    #[error(
        "{path}: unsupported format version {found} (this build reads versions 1 to {supported})"
    )]
    UnsupportedVersion {
        /// The metadata file.
        path: PathBuf,
        /// The version found on disk.
        found: u32,
        /// The version this build reads and writes.
        supported: u32,
    },

    /// A file is shorter than the committed metadata says it must be.
    #[error("{path} is truncated: committed size is {expected} bytes but the file has {actual}")]
    Truncated {
        /// The short file.
        path: PathBuf,
        /// The committed size in bytes.
        expected: u64,
        /// The size found.
        actual: u64,
    },

    /// An offset-table entry (or patch-log entry) failed its checksum or holds impossible values.
    #[error("corrupt offset entry in {path} at byte {offset} (field {field:?}, record {index}): {reason}")]
    OffsetCorrupt {
        /// The offset table or patch log.
        path: PathBuf,
        /// The field the table belongs to.
        field: String,
        /// The record index the entry describes (for a patch entry whose index is unreadable,
        /// the entry's position in the log).
        index: u64,
        /// Byte offset of the entry within the file.
        offset: u64,
        /// What was wrong.
        reason: String,
    },

    /// A record's stored bytes do not match the checksum in its offset entry.
    #[error("checksum mismatch in {path} at byte {offset} (field {field:?}, record {index}): stored {expected:#010x}, computed {actual:#010x}")]
    ChecksumMismatch {
        /// The chunk file.
        path: PathBuf,
        /// The field.
        field: String,
        /// The record index.
        index: u64,
        /// Byte offset of the record within the chunk file.
        offset: u64,
        /// The checksum recorded in the offset entry.
        expected: u32,
        /// The checksum of the bytes read.
        actual: u32,
    },

    /// A deflate record could not be decompressed to its recorded length.
    #[error("cannot decompress record in {path} at byte {offset} (field {field:?}, record {index}): {reason}")]
    Decompress {
        /// The chunk file.
        path: PathBuf,
        /// The field.
        field: String,
        /// The record index.
        index: u64,
        /// Byte offset of the record within the chunk file.
        offset: u64,
        /// What was wrong.
        reason: String,
    },

    /// A record index is not below the dataset's length.
    #[error("record index {index} is out of range: the dataset has {len} records")]
    IndexOutOfRange {
        /// The index asked for.
        index: u64,
        /// The dataset's length.
        len: u64,
    },

    /// A field name is not in the schema.
    #[error("unknown field {field:?}")]
    UnknownField {
        /// The name asked for.
        field: String,
    },

    /// A record gave the wrong number of fields.
    #[error("a record must give {expected} fields (one per schema field), got {actual}")]
    FieldCount {
        /// The schema's field count.
        expected: usize,
        /// The number given.
        actual: usize,
    },

    /// A field's bytes do not fit its dtype or item shape.
    #[error("field {field:?}: {reason}")]
    ShapeMismatch {
        /// The field.
        field: String,
        /// What was expected and what was given.
        reason: String,
    },

    /// The schema itself is invalid (duplicate or unsafe field names, no fields, ...).
    #[error("invalid schema: {reason}")]
    InvalidSchema {
        /// What was wrong.
        reason: String,
    },

    /// A record is larger than the format's 16 MiB − 1 limit (a u24 physical length).
    #[error("field {field:?}: record of {len} bytes exceeds the limit of {max} bytes")]
    RecordTooLarge {
        /// The field.
        field: String,
        /// The record's length in bytes.
        len: u64,
        /// The largest allowed length.
        max: u64,
    },

    /// A chunk would grow past the largest offset the format can address (2^40 bytes),
    /// or past the configured chunk size for a single record.
    #[error("chunk {chunk} would grow to {size} bytes, past the limit of {max} bytes")]
    ChunkTooLarge {
        /// The chunk id.
        chunk: u32,
        /// The size it would reach.
        size: u64,
        /// The limit.
        max: u64,
    },

    /// Every chunk id the format can express (u16) is in use.
    #[error("no free chunk id: a dataset holds at most {max} chunks")]
    TooManyChunks {
        /// The largest number of chunks.
        max: u32,
    },

    /// The dataset has more records than an index can hold.
    #[error("dataset would exceed {max} records")]
    TooManyRecords {
        /// The largest number of records.
        max: u64,
    },

    /// The dataset's commit generation (or a table's) is at its largest: no further commit can
    /// be numbered. Nothing was written.
    #[error("generation {generation} is the last a dataset can commit")]
    TooManyCommits {
        /// The generation reached.
        generation: u64,
    },

    /// Another writer holds the dataset's lock.
    #[error("{path}: another writer holds this dataset (lock file is busy)")]
    WriterBusy {
        /// The lock file.
        path: PathBuf,
    },

    /// An earlier I/O failure (typically a failed fsync) made this writer's state unknowable.
    /// Every call after it returns this error; reopen the dataset to recover the last commit.
    #[error("writer is poisoned by an earlier failure ({cause}); reopen the dataset to recover the last commit")]
    Poisoned {
        /// The first failure.
        cause: String,
    },

    /// The path already holds something and cannot be created as a dataset.
    #[error("{path} already exists and is not empty")]
    AlreadyExists {
        /// The path.
        path: PathBuf,
    },

    /// The path given as a dataset is not one: it does not exist, is not a directory, or holds
    /// no `meta.json`.
    #[error("{path} is not a zrecord dataset: {reason}")]
    NotADataset {
        /// The path given.
        path: PathBuf,
        /// Why not.
        reason: String,
    },

    /// A configuration value is out of range or inconsistent (a pipeline stage, a writer option).
    #[error("invalid configuration: {reason}")]
    InvalidConfig {
        /// What was wrong.
        reason: String,
    },

    /// A checkpoint cannot be resumed here: it was taken on another dataset generation, with
    /// another configuration, or it is malformed. Resuming anyway would silently drift.
    #[error("cannot resume from this checkpoint: {reason}")]
    ResumeMismatch {
        /// What differs.
        reason: String,
    },

    /// An input of an image or WebDataset conversion is not an image zrecord reads: not JPEG or
    /// PNG, or a header that does not decode. Names the file, and the tar member for a shard.
    #[error("{path}{}: not an image zrecord can read: {reason}", member.as_ref().map(|m| format!(" (member {m})")).unwrap_or_default())]
    NotAnImage {
        /// The image file, or the shard.
        path: PathBuf,
        /// The member of the shard, for a WebDataset shard.
        member: Option<String>,
        /// What is wrong.
        reason: String,
    },

    /// A WebDataset shard cannot be converted: not a readable tar archive, or a member that
    /// does not fit the dataset (a duplicate extension in one sample, a field name clash).
    #[error("cannot convert shard {path}{}: {reason}", member.as_ref().map(|m| format!(" (member {m})")).unwrap_or_default())]
    BadShard {
        /// The shard.
        path: PathBuf,
        /// The member, when one is to blame.
        member: Option<String>,
        /// What is wrong.
        reason: String,
    },

    /// A NumPy `.npy` input cannot be converted: it is malformed or truncated, or holds a dtype
    /// zrecord does not store (object arrays, structured dtypes, strings, ...). The source names
    /// the byte offset of the problem.
    #[error("cannot convert {path}")]
    Npy {
        /// The input file.
        path: PathBuf,
        /// What is wrong, and where.
        #[source]
        source: crate::format::npy::NpyError,
    },

    /// Inputs that become fields of one dataset have different numbers of rows.
    #[error("{path} has {rows} rows but {reference} has {expected}: every input must have the same number of rows")]
    RowCountMismatch {
        /// The input that differs.
        path: PathBuf,
        /// Its row count.
        rows: u64,
        /// The first input, whose row count the others must match.
        reference: PathBuf,
        /// The first input's row count.
        expected: u64,
    },

    /// A typed view was asked for with the wrong element type.
    /// A read of record bytes failed (after retries of interrupted and short reads).
    #[error("reading {path} at byte {offset} failed")]
    ReadFailed {
        /// The chunk file.
        path: PathBuf,
        /// Where the failed read started.
        offset: u64,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// A chunk file of a snapshot was removed or replaced by a later commit (a rebalance) before
    /// the snapshot opened it: the snapshot cannot read it any more. Refresh the dataset to read
    /// the current commit.
    #[error("{path} (chunk {chunk}) is gone from this snapshot: {reason}; refresh the dataset to read the current commit")]
    ChunkGone {
        /// The chunk file.
        path: PathBuf,
        /// Its id.
        chunk: u16,
        /// What happened to it.
        reason: String,
    },

    /// zrecord could not start a thread it needs.
    #[error("cannot start {what}: {reason}")]
    ThreadSpawn {
        /// The thread or pool.
        what: &'static str,
        /// The operating system's answer.
        reason: String,
    },

    /// A zrecord thread panicked while working for this call.
    #[error("{what} panicked: {message}")]
    WorkerPanicked {
        /// The thread.
        what: String,
        /// The panic's message.
        message: String,
    },

    /// A zrecord thread stopped before answering this call (it panicked, or its pool shut
    /// down).
    #[error("{what} stopped before answering")]
    WorkerGone {
        /// The thread.
        what: &'static str,
    },

    /// A request to an object store failed after its retries: the object, the byte range (if
    /// the request had one), the last HTTP status (if the server answered) and the reason.
    #[error("{object}{}: {}{reason}", range_text(range), status_text(*status))]
    Remote {
        /// The object's URL.
        object: String,
        /// The byte range asked for, `start..end`.
        range: Option<std::ops::Range<u64>>,
        /// The last HTTP status the server answered with.
        status: Option<u16>,
        /// What went wrong (the store client's message, or what zrecord found wrong).
        reason: String,
    },

    /// A dataset on an object store is damaged: a commit manifest that does not decode, an
    /// object whose size or checksum is not the one its manifest records.
    #[error("{object} is corrupt: {reason}")]
    RemoteCorrupt {
        /// The object's URL.
        object: String,
        /// What is wrong.
        reason: String,
    },

    /// A push lost a race: another push published to the same place first, or the store
    /// overwrote this push's commit.
    #[error("publishing to {url} failed: {reason}")]
    PublishConflict {
        /// The dataset URL.
        url: String,
        /// What the other push did.
        reason: String,
    },

    /// A push refused to publish: the object store does not honour conditional creates
    /// (`If-None-Match: *`; a probe created one key twice), so two pushes racing to one prefix
    /// could both commit and one update would be lost without an error. Publish there only
    /// with one writer per prefix, and say so (`zrecord push --single-writer`,
    /// `TransferOptions::single_writer`).
    #[error("publishing to {url} refused: {reason}")]
    ConditionalCreateIgnored {
        /// The dataset URL.
        url: String,
        /// What the probe found, and what to do.
        reason: String,
    },

    /// A transform's operation failed on one record ([`crate::transform::Map`]): a JPEG that
    /// does not decode, a value of the wrong kind for the operation. Another try cannot help.
    #[error("transform of field {field:?}, record {index}: {op} failed: {reason}")]
    Transform {
        /// The field.
        field: String,
        /// The record index.
        index: u64,
        /// The operation that failed (its name and arguments).
        op: String,
        /// Why.
        reason: String,
    },

    /// A broken internal invariant: a zrecord bug, never the data's fault. Please report it.
    #[error("internal error (a zrecord bug): {reason}")]
    Internal {
        /// What went wrong.
        reason: String,
    },

    #[error("field {field:?} has dtype {dtype}, not {requested}")]
    DtypeMismatch {
        /// The field.
        field: String,
        /// The field's dtype.
        dtype: String,
        /// The type asked for.
        requested: String,
    },

    /// A record batch's column names do not match the writer's fields
    /// (`Writer::append_record_batch`, feature `arrow`): every field needs a column of its name,
    /// and every column a field.
    #[error(
        "record batch columns do not match the schema: {}",
        columns_text(missing, extra, duplicated)
    )]
    ArrowColumns {
        /// Fields with no column of their name.
        missing: Vec<String>,
        /// Columns with no field of their name.
        extra: Vec<String>,
        /// Column names the batch holds more than once.
        duplicated: Vec<String>,
    },

    /// A record batch's column whose Arrow type does not fit its field (feature `arrow`).
    #[error("column {column:?} of Arrow type {arrow_type} does not fit field {column:?} ({dtype}): {reason}")]
    ArrowType {
        /// The column (and field) name.
        column: String,
        /// The column's Arrow data type.
        arrow_type: String,
        /// The field's dtype and shape, e.g. `u8[64]`, `u32[]` (one item) or `bytes[*]`
        /// (variable length).
        dtype: String,
        /// Why it does not fit.
        reason: String,
    },

    /// A value of a record batch that cannot be stored (feature `arrow`): a null item inside a
    /// list, or offsets outside the column's values.
    #[error("column {column:?}, row {row} of the record batch: {reason}")]
    ArrowValue {
        /// The column (and field) name.
        column: String,
        /// The row in the record batch (0 is its first row, whatever its offset in its buffers).
        row: u64,
        /// Why it cannot be stored.
        reason: String,
    },

    /// Batches of several parts (see `pipeline::Concat`) cannot be put together: their fields
    /// differ.
    #[error(
        "part {part} does not gather the fields of part {reference}: field {field:?}: {reason}"
    )]
    SchemaMismatch {
        /// The part whose batch differs.
        part: usize,
        /// The part it was compared with.
        reference: usize,
        /// The first field that differs (by position).
        field: String,
        /// How it differs.
        reason: String,
    },

    /// A collection's part is not at the generation its manifest pinned: parts are immutable
    /// once committed, and one written to since is refused rather than read as something the
    /// manifest never named.
    #[error("part {part:?} of the collection ({path}) changed after it was committed: the manifest pins generation {expected}, the part is at {found}")]
    PartChanged {
        /// The part's id.
        part: String,
        /// The part's directory.
        path: PathBuf,
        /// The generation the manifest names.
        expected: u64,
        /// The generation found.
        found: u64,
    },

    /// A part given to a collection on an object store by URL is not where the collection's
    /// parts are (`<collection>/parts/<id>`): a part is referenced in place, never copied
    /// between prefixes.
    #[error("part {part} is not under {collection}/parts/<id>: a part given by URL must be pushed under its collection's parts/ first (or given as a local directory, which is pushed there)")]
    PartOutsideCollection {
        /// The part's URL.
        part: String,
        /// The collection's URL.
        collection: String,
    },

    /// A part given to a local collection's commit lies under another collection's `parts/`:
    /// moving it would take it out of that collection, whose manifests name it. Commit a copy
    /// of it instead (or read both collections together with `Concat`).
    #[error("{part} is a part of the collection at {collection}: a commit to {target} would move it out of that collection; copy it first")]
    PartOfAnotherCollection {
        /// The part's directory, as given.
        part: PathBuf,
        /// The collection it belongs to.
        collection: PathBuf,
        /// The collection it was given to.
        target: PathBuf,
    },

    /// A writer (or a rebalance) was opened on a part that a manifest of its collection names:
    /// committed parts are immutable (the manifest pins their generation), so a new commit of
    /// the part would make the collection unreadable. Write a new part and commit it instead.
    #[error("part {part:?} ({path}) is committed to the collection at {collection}: committed parts are immutable; write a new part and commit it")]
    PartCommitted {
        /// The part's id.
        part: String,
        /// The part's directory.
        path: PathBuf,
        /// The collection's root.
        collection: PathBuf,
    },

    /// A part's schema differs from its collection's (the fields of the first commit).
    #[error(
        "part {part:?} ({path}) does not have the collection's schema: field {field:?}: {reason}"
    )]
    PartMismatch {
        /// The part's id (or its path, before it has one).
        part: String,
        /// The part's directory.
        path: PathBuf,
        /// The first field that differs (by position).
        field: String,
        /// How it differs.
        reason: String,
    },
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, op: &'static str, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            op,
            source,
        }
    }

    pub(crate) fn internal(reason: String) -> Self {
        Error::Internal { reason }
    }

    /// The [`Error::WorkerPanicked`] of a panic caught (by [`std::panic::catch_unwind`] or a
    /// joined thread) while `what` worked: its message is the panic's (the `&str` or `String`
    /// that `panic!` carries), or "a panic without a message" for any other payload. The one
    /// place zrecord, its Python package and its tests turn a panic's payload into words.
    pub fn from_panic(what: impl Into<String>, payload: &(dyn std::any::Any + Send)) -> Self {
        let message = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("a panic without a message");
        Error::WorkerPanicked {
            what: what.into(),
            message: message.to_string(),
        }
    }

    /// True if another try of the call that returned this error cannot help: it would fail the
    /// same way, or the layer that could retry it has (an object-store request is tried as
    /// `StoreOptions::retries` says, once for a permanent answer; a record failing its checksum
    /// in a cached copy is read again once from the store). The loader's workers return such an
    /// error at once instead of trying their batch again: corruption, an index out of range, a
    /// failed object-store request or damage on the store, a snapshot's chunk or part gone or
    /// changed, a panic.
    pub(crate) fn is_permanent(&self) -> bool {
        self.is_corruption()
            || matches!(
                self,
                Error::IndexOutOfRange { .. }
                    | Error::Remote { .. }
                    | Error::RemoteCorrupt { .. }
                    | Error::ChunkGone { .. }
                    | Error::PartChanged { .. }
                    | Error::WorkerPanicked { .. }
                    | Error::Transform { .. }
            )
    }

    /// True if the error means bytes on disk are damaged (as opposed to a usage or I/O error).
    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            Error::MetaCorrupt { .. }
                | Error::Truncated { .. }
                | Error::OffsetCorrupt { .. }
                | Error::ChecksumMismatch { .. }
                | Error::Decompress { .. }
                | Error::DictionaryCorrupt { .. }
        )
    }
}

fn columns_text(missing: &[String], extra: &[String], duplicated: &[String]) -> String {
    let mut parts = Vec::new();
    if !missing.is_empty() {
        parts.push(format!("no column for field(s) {missing:?}"));
    }
    if !extra.is_empty() {
        parts.push(format!("column(s) {extra:?} name no field"));
    }
    if !duplicated.is_empty() {
        parts.push(format!("column(s) {duplicated:?} appear more than once"));
    }
    parts.join("; ")
}

fn range_text(range: &Option<std::ops::Range<u64>>) -> String {
    match range {
        Some(r) => format!(" bytes {}..{}", r.start, r.end),
        None => String::new(),
    }
}

fn status_text(status: Option<u16>) -> String {
    match status {
        Some(s) => format!("HTTP {s}: "),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::Error;

    /// Each cause appears once in the chain `{e}: {source}: …` that anyhow's `{:#}` and the CLI
    /// print: a variant with a `#[source]` leaves it out of its own message.
    #[test]
    fn display_does_not_repeat_the_source() {
        let os = || std::io::Error::from_raw_os_error(libc::ENOENT);
        let text = os().to_string();
        let errors = [
            Error::io("/d/meta.json", "open", os()),
            Error::ReadFailed {
                path: "/d/chunk/00001.zr".into(),
                offset: 4096,
                source: os(),
            },
        ];
        for e in errors {
            let mut chain = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                chain = format!("{chain}: {s}");
                source = s.source();
            }
            assert_eq!(chain.matches(&text).count(), 1, "{chain}");
            assert!(!e.to_string().contains(&text), "{e}");
        }
    }

    /// A panic's message is its `&str` or `String` payload; any other payload says it has none.
    #[test]
    fn from_panic_words_every_payload() {
        let payloads: [(Box<dyn std::any::Any + Send>, &str); 3] = [
            (Box::new("static words"), "static words"),
            (Box::new(format!("formatted {}", 7)), "formatted 7"),
            (Box::new(7_u32), "a panic without a message"),
        ];
        for (payload, want) in payloads {
            let e = Error::from_panic("a worker", payload.as_ref());
            assert_eq!(e.to_string(), format!("a worker panicked: {want}"));
        }
        let caught = std::panic::catch_unwind(|| panic!("caught {}", "here"));
        let Err(payload) = caught else {
            unreachable!("the closure panics")
        };
        assert_eq!(
            Error::from_panic("a closure", payload.as_ref()).to_string(),
            "a closure panicked: caught here"
        );
    }
}
