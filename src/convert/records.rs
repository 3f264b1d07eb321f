//! The parallel, resumable record pipeline of the image and WebDataset converters.
//!
//! ```text
//! N worker threads ──blocks of records──► writer (caller's thread)
//!   (each claims the next block of        (reorders by block number, appends each record,
//!    source indices once it holds a        commits every `commit_every` indices with the
//!    token: read, check, scale)            progress attribute; N append tasks write)
//!        ▲                                        │
//!        └────────── a token per appended block ──┘
//! ```
//!
//! Tokens bound memory (a few blocks per worker) and how far workers run ahead.
//!
//! **Resume.** The dataset is built in `.NAME.zrecord-convert`, a stable hidden sibling of the
//! output. Each commit there also writes the attribute [`PROGRESS_KEY`]:
//! `{"fingerprint": F, "done": I, "skipped": S}`, where `F` is a hash of the converter's kind,
//! its inputs (in order) and every option that changes what is stored, and `I` the number of
//! source indices (images, samples) the commit holds. Records and progress are one commit, so
//! they always agree. A run that finds the directory opens its writer (which drops whatever
//! was not committed), checks `F`, and continues at index `I`. The last commit removes the
//! attribute, and the directory is renamed onto the output.

use super::{occupied, parent_dir, publish, ConvertProgress};
use crate::error::{Error, Result};
use crate::{Schema, Writer, WriterConfig};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex};

/// The attribute a build directory's commits carry until the last one.
pub(super) const PROGRESS_KEY: &str = "zrecord-convert-progress";

/// Source indices per block a worker converts at once.
const BLOCK: u64 = 32;

/// Default source indices between two commits of a resumable conversion.
pub(super) const DEFAULT_COMMIT_EVERY: u64 = 4096;

/// What a converter hands the pipeline: its records, by source index.
pub(super) trait Source: Sync {
    /// Number of source indices.
    fn len(&self) -> u64;
    /// The field values of source index `index`, into `out` (one buffer per field, cleared),
    /// or `false` if this input is skipped (a bad image, with `skip_bad`, logged).
    fn record(&self, index: u64, out: &mut [Vec<u8>]) -> Result<bool>;
}

/// One block of converted records; `None` for a skipped input.
type Block = Vec<Option<Vec<Vec<u8>>>>;

/// A conversion to run: where, what schema and attributes, how.
pub(super) struct Job<'p> {
    pub(super) out: PathBuf,
    pub(super) schema: Schema,
    pub(super) attributes: BTreeMap<String, serde_json::Value>,
    pub(super) fingerprint: u64,
    pub(super) threads: usize,
    pub(super) commit_every: u64,
    pub(super) bytes_total: u64,
    pub(super) progress: &'p mut dyn FnMut(ConvertProgress),
}

/// What the pipeline did.
pub(super) struct Done {
    pub(super) records: u64,
    pub(super) skipped: u64,
    pub(super) resumed: u64,
}

/// The build directory of `out`: stable, so a later run finds it.
pub(super) fn build_dir(out: &Path) -> Result<PathBuf> {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| Error::InvalidConfig {
            reason: format!("output {} has no directory name", out.display()),
        })?;
    Ok(parent_dir(out).join(format!(".{name}.zrecord-convert")))
}

/// Where an interrupted run stopped: `(done, skipped)` from the progress attribute.
fn progress_of(w: &Writer, fingerprint: u64, dir: &Path) -> Result<(u64, u64)> {
    let attrs = w.attributes();
    let refuse = |why: &str| Error::InvalidConfig {
        reason: format!(
            "{} holds {why}: rerun with the same inputs and options to resume it, or remove \
             the directory to start over",
            dir.display()
        ),
    };
    let Some(p) = attrs.get(PROGRESS_KEY) else {
        return Err(refuse(
            "a dataset this conversion did not start (or a finished one not yet renamed)",
        ));
    };
    let field = |k: &str| p.get(k).and_then(serde_json::Value::as_u64);
    match (field("fingerprint"), field("done"), field("skipped")) {
        (Some(f), Some(done), Some(skipped)) if f == fingerprint => Ok((done, skipped)),
        (Some(_), Some(_), Some(_)) => Err(refuse(
            "an interrupted conversion of other inputs or options",
        )),
        _ => Err(refuse("a damaged progress note")),
    }
}

/// Runs `job` over `source`: resumes or starts the build directory, converts, commits, renames
/// it onto the output.
pub(super) fn run(job: Job<'_>, source: &dyn Source) -> Result<Done> {
    if occupied(&job.out) {
        return Err(Error::AlreadyExists { path: job.out });
    }
    if job.threads == 0 || job.commit_every == 0 {
        return Err(Error::InvalidConfig {
            reason: "num_threads and commit_every must be positive".to_string(),
        });
    }
    let dir = build_dir(&job.out)?;
    let parent = parent_dir(&job.out);
    std::fs::create_dir_all(&parent).map_err(|e| Error::io(&parent, "create directory", e))?;
    let config = WriterConfig {
        num_writers: job.threads.clamp(1, crate::MAX_WRITERS),
        ..WriterConfig::default()
    };
    let existing = if dir.exists() {
        let w = Writer::open(&dir, config.clone())?;
        if w.is_empty() && !w.attributes().contains_key(PROGRESS_KEY) {
            // Created, but killed before its first commit: empty, and of unknown options.
            drop(w);
            std::fs::remove_dir_all(&dir).map_err(|e| Error::io(&dir, "remove", e))?;
            None
        } else {
            Some(w)
        }
    } else {
        None
    };
    let (mut writer, (start, skipped)) = match existing {
        Some(w) => {
            let at = progress_of(&w, job.fingerprint, &dir)?;
            (w, at)
        }
        None => (Writer::create(&dir, &job.schema, config)?, (0, 0)),
    };
    let total = source.len();
    if start > total {
        return Err(Error::InvalidConfig {
            reason: format!(
                "{} says {start} of {total} inputs are done: remove it to start over",
                dir.display()
            ),
        });
    }
    for (k, v) in &job.attributes {
        writer.set_attribute(k.clone(), v.clone())?;
    }
    let mut state = State {
        writer: &mut writer,
        fingerprint: job.fingerprint,
        done: start,
        skipped,
        since_commit: 0,
        commit_every: job.commit_every,
        progress: job.progress,
        now: ConvertProgress {
            rows_done: start,
            rows_total: total,
            bytes_done: 0,
            bytes_total: job.bytes_total,
        },
    };
    // The first commit names the conversion, so a rerun knows the directory is its own.
    state.commit()?;
    let fields = job.schema.fields.len();
    pipeline(&mut state, source, fields, job.threads)?;
    let skipped = state.skipped;
    writer.remove_attribute(PROGRESS_KEY)?;
    writer.commit()?;
    let records = writer.len();
    drop(writer);
    publish(&dir, &job.out)?;
    Ok(Done {
        records,
        skipped,
        resumed: start,
    })
}

/// The writer's side: where it is, when it commits next.
struct State<'w, 'p> {
    writer: &'w mut Writer,
    fingerprint: u64,
    done: u64,
    skipped: u64,
    since_commit: u64,
    commit_every: u64,
    progress: &'p mut dyn FnMut(ConvertProgress),
    now: ConvertProgress,
}

impl State<'_, '_> {
    /// Commits everything appended, with the progress attribute saying how far it is.
    fn commit(&mut self) -> Result<()> {
        let note = serde_json::json!({
            "fingerprint": self.fingerprint,
            "done": self.done,
            "skipped": self.skipped,
        });
        self.writer.set_attribute(PROGRESS_KEY, note)?;
        self.writer.commit()?;
        self.since_commit = 0;
        Ok(())
    }

    fn append(&mut self, block: Block) -> Result<()> {
        for record in block {
            match record {
                Some(fields) => {
                    self.now.bytes_done += fields.iter().map(|f| f.len() as u64).sum::<u64>();
                    self.writer.append(&fields)?;
                }
                None => self.skipped += 1,
            }
            self.done += 1;
            self.since_commit += 1;
        }
        self.now.rows_done = self.done;
        (self.progress)(self.now);
        if self.since_commit >= self.commit_every {
            self.commit()?;
        }
        Ok(())
    }
}

/// Converts source indices `state.done..` on `threads` workers and appends them in order. On a
/// worker's error, everything before the failing block is committed first, so a rerun resumes
/// right there.
fn pipeline(
    state: &mut State<'_, '_>,
    source: &dyn Source,
    fields: usize,
    threads: usize,
) -> Result<()> {
    let start = state.done;
    let total = state.now.rows_total;
    let tokens = threads * 2 + 2;
    let (free_tx, free_rx) = mpsc::sync_channel::<()>(tokens);
    for _ in 0..tokens {
        // The channel holds `tokens` and its receiver is alive: this cannot fail.
        let _ = free_tx.send(());
    }
    let free_rx = Arc::new(Mutex::new(free_rx));
    let (done_tx, done_rx) = mpsc::sync_channel::<(u64, Result<Block>)>(tokens);
    let next = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            let free_rx = Arc::clone(&free_rx);
            let done_tx = done_tx.clone();
            let next = &next;
            s.spawn(move || work(source, fields, start, total, next, &free_rx, &done_tx));
        }
        drop(done_tx);
        drop(free_rx);
        let r = write(state, total, done_rx, &free_tx);
        // Workers waiting for a token stop when the sender goes.
        drop(free_tx);
        r
    })
}

/// A worker: takes a token, claims the next block, converts it, hands it to the writer.
fn work(
    source: &dyn Source,
    fields: usize,
    start: u64,
    total: u64,
    next: &AtomicU64,
    free: &Mutex<Receiver<()>>,
    done: &SyncSender<(u64, Result<Block>)>,
) {
    loop {
        let token = match free.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        if token.is_err() {
            return;
        }
        let seq = next.fetch_add(1, Ordering::Relaxed);
        let first = start.saturating_add(seq.saturating_mul(BLOCK));
        if first >= total {
            return;
        }
        let end = first.saturating_add(BLOCK).min(total);
        let block = (first..end)
            .map(|i| {
                let mut out = vec![Vec::new(); fields];
                Ok(source.record(i, &mut out)?.then_some(out))
            })
            .collect::<Result<Block>>();
        if done.send((seq, block)).is_err() {
            return;
        }
    }
}

/// The writer: appends blocks in order, returns a token for each.
fn write(
    state: &mut State<'_, '_>,
    total: u64,
    done: Receiver<(u64, Result<Block>)>,
    free: &SyncSender<()>,
) -> Result<()> {
    let mut pending: BTreeMap<u64, Result<Block>> = BTreeMap::new();
    let mut next_seq = 0u64;
    while state.done < total {
        let item = match pending.remove(&next_seq) {
            Some(b) => b,
            None => match done.recv() {
                Ok((seq, b)) if seq == next_seq => b,
                Ok((seq, b)) => {
                    pending.insert(seq, b);
                    continue;
                }
                Err(_) => {
                    return Err(Error::InvalidConfig {
                        reason: format!(
                            "the conversion's workers stopped after {} of {total} inputs",
                            state.done
                        ),
                    })
                }
            },
        };
        match item {
            Ok(block) => state.append(block)?,
            Err(e) => {
                // Keep what came before the failing input, so a rerun starts at it.
                state.commit()?;
                return Err(e);
            }
        }
        next_seq += 1;
        // Workers may all have stopped already (every block claimed): a failed send is fine.
        let _ = free.send(());
    }
    Ok(())
}
