//! [`WriterConfig`]: the options of a writer, their defaults and their bounds.

use crate::error::{Error, Result};

/// Options of a [`Writer`](super::Writer).
///
/// Built from [`WriterConfig::default`] with chainable setters, so options added later do not
/// break callers:
///
/// ```
/// use zrecord::WriterConfig;
///
/// let config = WriterConfig::default().num_writers(4).queue_depth(3);
/// assert_eq!(config.num_writers, 4);
/// assert_eq!(config.write_buffer_bytes, 4 << 20);
/// ```
///
/// Values are checked when a writer is created or opened ([`Error::InvalidConfig`]).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct WriterConfig {
    /// Deflate level for fields whose codec is `deflate`: 1 (fastest) to 12 (smallest).
    /// Default 6.
    pub deflate_level: i32,
    /// Records are handed to an append task in jobs of about this many bytes, and a task
    /// buffers deflated bytes up to this size per write. 1 to [`MAX_WRITE_BUFFER_BYTES`].
    /// Default 4 MiB.
    pub write_buffer_bytes: usize,
    /// Chunk append tasks: threads that each append only to their own open chunk, so records are
    /// deflated, checksummed and written on that many cores. 1 to [`MAX_WRITERS`]; the seed
    /// advises 1–4. Default 2.
    pub num_writers: usize,
    /// Jobs queued per append task before `append` waits (backpressure). 1 to
    /// [`MAX_QUEUE_DEPTH`]. Default 2.
    /// A writer holds at most about `num_writers × (queue_depth + 2) × write_buffer_bytes` of
    /// record bytes.
    pub queue_depth: usize,
    /// Bytes of a `zstd_dict` field's first records the writer keeps as the sample it trains
    /// the field's dictionary on (the sample is complete at this many bytes, or at
    /// [`DICTIONARY_SAMPLE_RECORDS`] records); 0 trains none (records stay plain zstd unless
    /// [`Writer::train_dictionary`](super::Writer::train_dictionary) is called). Records
    /// handed to the append tasks before the dictionary exists are stored as plain zstd (a job
    /// still being filled when it is trained is compressed with it). Default 4 MiB.
    pub dictionary_sample_bytes: usize,
    /// The largest dictionary trained: 256 B to [`MAX_DICTIONARY_BYTES`]. Default 64 KiB.
    pub dictionary_bytes: usize,
}

/// The most records in a dictionary's sample.
pub const DICTIONARY_SAMPLE_RECORDS: usize = 16_384;
/// The largest dictionary a writer trains.
pub const MAX_DICTIONARY_BYTES: usize = crate::format::codec::MAX_DICTIONARY_BYTES;

/// The most append tasks a writer runs.
pub const MAX_WRITERS: usize = 16;
/// The deepest append-task queue, in jobs.
pub const MAX_QUEUE_DEPTH: usize = 64;
/// The largest job and write buffer: 1 GiB.
pub const MAX_WRITE_BUFFER_BYTES: usize = 1 << 30;

/// Default [`WriterConfig::deflate_level`].
const DEFAULT_DEFLATE_LEVEL: i32 = 6;
/// Default [`WriterConfig::write_buffer_bytes`]: 4 MiB.
const DEFAULT_WRITE_BUFFER_BYTES: usize = 4 << 20;
/// Default [`WriterConfig::num_writers`].
const DEFAULT_NUM_WRITERS: usize = 2;
/// Default [`WriterConfig::queue_depth`].
const DEFAULT_QUEUE_DEPTH: usize = 2;

impl Default for WriterConfig {
    /// Deflate level 6, 4 MiB jobs and write buffers, 2 append tasks, 2 jobs queued per task.
    fn default() -> Self {
        WriterConfig {
            deflate_level: DEFAULT_DEFLATE_LEVEL,
            write_buffer_bytes: DEFAULT_WRITE_BUFFER_BYTES,
            num_writers: DEFAULT_NUM_WRITERS,
            queue_depth: DEFAULT_QUEUE_DEPTH,
            dictionary_sample_bytes: 4 << 20,
            dictionary_bytes: 64 << 10,
        }
    }
}

impl WriterConfig {
    /// Sets the deflate level for fields whose codec is `deflate`: 1 (fastest) to 12
    /// (smallest). Default 6.
    #[must_use]
    pub fn deflate_level(mut self, level: i32) -> Self {
        self.deflate_level = level;
        self
    }

    /// Sets the size of the jobs handed to an append task, and of each task's write buffer:
    /// 1 to [`MAX_WRITE_BUFFER_BYTES`]. Default 4 MiB.
    #[must_use]
    pub fn write_buffer_bytes(mut self, bytes: usize) -> Self {
        self.write_buffer_bytes = bytes;
        self
    }

    /// Sets the number of chunk append tasks (threads that each own one open chunk): 1 to
    /// [`MAX_WRITERS`]; the seed advises 1–4. Default 2.
    #[must_use]
    pub fn num_writers(mut self, n: usize) -> Self {
        self.num_writers = n;
        self
    }

    /// Sets the jobs queued per append task before `append` waits (backpressure): 1 to
    /// [`MAX_QUEUE_DEPTH`]. Default 2.
    #[must_use]
    pub fn queue_depth(mut self, jobs: usize) -> Self {
        self.queue_depth = jobs;
        self
    }

    /// Sets the bytes of a `zstd_dict` field's first records its dictionary is trained on (0:
    /// train none). Default 4 MiB.
    #[must_use]
    pub fn dictionary_sample_bytes(mut self, bytes: usize) -> Self {
        self.dictionary_sample_bytes = bytes;
        self
    }

    /// Sets the largest dictionary trained: 256 B to [`MAX_DICTIONARY_BYTES`]. Default 64 KiB.
    #[must_use]
    pub fn dictionary_bytes(mut self, bytes: usize) -> Self {
        self.dictionary_bytes = bytes;
        self
    }

    pub(super) fn validate(&self) -> Result<()> {
        if !(256..=MAX_DICTIONARY_BYTES).contains(&self.dictionary_bytes) {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "dictionary_bytes is {}; it must be between 256 and {MAX_DICTIONARY_BYTES}",
                    self.dictionary_bytes
                ),
            });
        }
        if !(1..=12).contains(&self.deflate_level) {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "deflate_level is {}; it must be between 1 and 12",
                    self.deflate_level
                ),
            });
        }
        if !(1..=MAX_WRITERS).contains(&self.num_writers) {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "num_writers is {}; it must be between 1 and {MAX_WRITERS}",
                    self.num_writers
                ),
            });
        }
        if !(1..=MAX_QUEUE_DEPTH).contains(&self.queue_depth) {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "queue_depth is {}; it must be between 1 and {MAX_QUEUE_DEPTH}",
                    self.queue_depth
                ),
            });
        }
        if !(1..=MAX_WRITE_BUFFER_BYTES).contains(&self.write_buffer_bytes) {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "write_buffer_bytes is {}; it must be between 1 and {MAX_WRITE_BUFFER_BYTES}",
                    self.write_buffer_bytes
                ),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setters_chain_and_defaults_validate() {
        let d = WriterConfig::default();
        assert!(d.validate().is_ok());
        assert_eq!(
            (
                d.deflate_level,
                d.write_buffer_bytes,
                d.num_writers,
                d.queue_depth
            ),
            (6, 4 << 20, 2, 2)
        );
        let c = WriterConfig::default()
            .deflate_level(1)
            .write_buffer_bytes(600)
            .num_writers(3)
            .queue_depth(1);
        assert_eq!(
            (
                c.deflate_level,
                c.write_buffer_bytes,
                c.num_writers,
                c.queue_depth
            ),
            (1, 600, 3, 1)
        );
        assert!(WriterConfig::default().num_writers(0).validate().is_err());
        assert!(WriterConfig::default()
            .num_writers(MAX_WRITERS + 1)
            .validate()
            .is_err());
        assert!(WriterConfig::default().queue_depth(0).validate().is_err());
        assert!(WriterConfig::default()
            .write_buffer_bytes(MAX_WRITE_BUFFER_BYTES + 1)
            .validate()
            .is_err());
    }
}
