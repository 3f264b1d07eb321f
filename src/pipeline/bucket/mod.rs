//! Length bucketing: d9d's `BufferSortedDataset` as a stage: seekable over a seekable stage, a
//! checkpointable stream over a stream (`stream.rs`).

mod stream;

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::source::Source;
use super::stage::{Sample, Stage};
use crate::hash::{fold, hash, mix, reduce, HASH_START};
use crate::{Error, Result};

pub use stream::BucketState;
use stream::Serving;

/// The sort key of a record index (usually its length), with a name that goes into the
/// configuration description (and so into checkpoints: a resume with a differently named key is
/// refused). The function must be a pure function of the index.
#[derive(Clone)]
pub struct BucketKey {
    name: String,
    key: Arc<dyn Fn(u64) -> Result<u64> + Send + Sync>,
    /// The keys of many indices at once, appended in order, where the key can do better than
    /// one call each.
    keys: Option<Arc<KeysFn>>,
}

/// Appends the keys of many indices, in order.
type KeysFn = dyn Fn(&[u64], &mut Vec<u64>) -> Result<()> + Send + Sync;

impl BucketKey {
    /// A key computed by `key`, described as `name`.
    pub fn new(
        name: impl Into<String>,
        key: impl Fn(u64) -> Result<u64> + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.into(),
            key: Arc::new(key),
            keys: None,
        }
    }

    /// The default key: [`Source::item_len`], the record length (no data read), named by
    /// [`Source::key_description`].
    pub fn item_len<S: Source>(source: Arc<S>) -> Self {
        let many = Arc::clone(&source);
        let mut key = Self::new(source.key_description(), move |index| {
            source.item_len(index)
        });
        key.keys = Some(Arc::new(move |indices: &[u64], out: &mut Vec<u64>| {
            many.item_lens(indices, out)
        }));
        key
    }

    /// The key's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key of record `index`.
    ///
    /// # Errors
    /// Whatever the key function returns.
    pub fn key(&self, index: u64) -> Result<u64> {
        (self.key)(index)
    }

    /// The keys of `indices`, appended to `out` in order.
    ///
    /// # Errors
    /// Whatever the key function returns, for the first index that fails.
    pub fn keys(&self, indices: &[u64], out: &mut Vec<u64>) -> Result<()> {
        match &self.keys {
            Some(keys) => {
                let before = out.len();
                keys(indices, out)?;
                if out.len() != before + indices.len() {
                    return Err(Error::internal(format!(
                        "bucket key {:?} gave {} keys for {} indices",
                        self.name,
                        out.len() - before,
                        indices.len()
                    )));
                }
                Ok(())
            }
            None => {
                out.reserve(indices.len());
                for &index in indices {
                    out.push((self.key)(index)?);
                }
                Ok(())
            }
        }
    }
}

impl fmt::Debug for BucketKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BucketKey")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Configuration of a [`Bucket`].
///
/// Built from [`BucketConfig::default`] with chainable setters, so options added later do not
/// break callers:
///
/// ```
/// use zrecord::pipeline::BucketConfig;
///
/// let config = BucketConfig::default().buffer_size(4096).pack_size(64);
/// assert_eq!((config.buffer_size, config.pack_size, config.seed), (4096, 64, 0));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BucketConfig {
    /// Items sorted together, at least 1. Default: 1024.
    pub buffer_size: u64,
    /// Items per pack (usually the batch size), at least 1. Default: 32.
    pub pack_size: u64,
    /// The seed of the tie-breaker and the shuffles. Default: 0.
    pub seed: u64,
}

impl BucketConfig {
    /// Sets the items sorted together, at least 1. Default 1024.
    #[must_use]
    pub fn buffer_size(mut self, buffer_size: u64) -> Self {
        self.buffer_size = buffer_size;
        self
    }

    /// Sets the items per pack (usually the batch size), at least 1. Default 32.
    #[must_use]
    pub fn pack_size(mut self, pack_size: u64) -> Self {
        self.pack_size = pack_size;
        self
    }

    /// Sets the seed of the tie-breaker and the shuffles. Default 0.
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
}

impl Default for BucketConfig {
    /// Buffers of 1024 items, packs of 32, seed 0.
    fn default() -> Self {
        Self {
            buffer_size: 1024,
            pack_size: 32,
            seed: 0,
        }
    }
}

/// The bucket stage.
///
/// Each epoch of the upstream stage is cut into buffers of `buffer_size` consecutive positions
/// (the last one may be shorter). Each buffer is, independently:
///
/// 1. keyed: `(key(index), tie)`, where `tie` is a seeded hash of `(seed, epoch, buffer, position)`
///    so equal keys are ordered randomly but reproducibly;
/// 2. sorted by that pair;
/// 3. cut into packs of `pack_size` (the last may be shorter);
/// 4. the packs are shuffled;
/// 5. the items within every pack are shuffled;
/// 6. flattened and served.
///
/// All randomness derives from `(seed, epoch, buffer index)`, so the stage is a pure function of
/// `(epoch, position)` like every other stage: a checkpoint stays a cursor, and a resume rebuilds
/// only the one buffer the cursor is in, by re-reading its `buffer_size` upstream positions.
/// A buffer is a permutation of its upstream positions, so every upstream item is served exactly
/// once per epoch.
///
/// Batches cut from a bucketed stage with `batch_size == pack_size` (and `buffer_size` a
/// multiple of `pack_size`) are exactly the packs: items of similar length, so little padding.
///
/// # Seekable or stream
///
/// Like every stage of the chain, `Bucket` is what its input is. Over a seekable [`Stage`]
/// ([`Bucket::new`], `StageExt::bucket`) it is a seekable stage, as above. Over a
/// [`super::Checkpoint`] stream (`CheckpointExt::bucket`) it is a checkpointable stream serving
/// the same order: its buffers are `buffer_size` consecutive items of one epoch (counted from 0
/// at each change of [`Sample::epoch`]), so over a cursor of a stage it yields exactly what the
/// seekable form yields. `St` is then the input's [`super::Checkpoint::State`] (the bucket keeps
/// the state where the buffer being served started); it is `()` for the seekable form.
///
/// The stream form's checkpoint ([`BucketState`]) is where the current buffer starts (the
/// input's state then) and how many of its items were served. A restore goes back to the
/// buffer's start, and the next poll pulls the whole buffer from the input again, sorts it, and
/// skips the items already served: at most `buffer_size` items are pulled twice. An `Err` from
/// the input or the key is returned at once; the checkpoint then stays at the start of the
/// buffer, so a restore tries the buffer (and the error) again.
#[derive(Clone)]
pub struct Bucket<S, St = ()> {
    upstream: S,
    config: BucketConfig,
    key: BucketKey,
    buffer_size: usize,
    pack_size: usize,
    /// The most recently used buffer: `(epoch, buffer index, items)`.
    cache: Option<(u64, u64, Arc<Vec<Sample>>)>,
    /// Buffers built by any clone of this stage (a loader's workers each run a clone, and
    /// neighbouring batches come from the same buffer): each is built once, by whichever clone
    /// asks first, while the others wait for it.
    shared: Arc<SharedBuffers>,
    /// Over a stream: the buffer being served and where it started (unused when seeking, and
    /// boxed so the seekable form stays small: every prefetch worker clones it).
    stream: Box<Serving<St>>,
}

/// The buffers recently built by the clones of one [`Bucket`], the newest last.
#[derive(Default)]
struct SharedBuffers {
    slots: std::sync::Mutex<Vec<(u64, u64, Arc<BufferSlot>)>>,
}

/// One buffer, built by the first clone that locks it.
type BufferSlot = std::sync::Mutex<Option<Arc<Vec<Sample>>>>;

/// Buffers kept by [`SharedBuffers`]: enough for every worker of a loader to be a buffer or two
/// apart.
const SHARED_BUFFERS: usize = 8;

impl SharedBuffers {
    /// The slot of buffer `(epoch, buffer)`, made (and the oldest dropped) if there is none.
    fn slot(&self, epoch: u64, buffer: u64) -> Arc<BufferSlot> {
        let mut slots = match self.slots.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some((_, _, slot)) = slots.iter().find(|(e, b, _)| *e == epoch && *b == buffer) {
            return Arc::clone(slot);
        }
        if slots.len() >= SHARED_BUFFERS {
            slots.remove(0);
        }
        let slot = Arc::new(BufferSlot::new(None));
        slots.push((epoch, buffer, Arc::clone(&slot)));
        slot
    }
}

// Nothing in a `Bucket` is structurally pinned (over a stream, the input's state it keeps need
// not be `Unpin`).
impl<S: Unpin, St> Unpin for Bucket<S, St> {}

impl<S: fmt::Debug, St> fmt::Debug for Bucket<S, St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bucket")
            .field("upstream", &self.upstream)
            .field("config", &self.config)
            .field("key", &self.key)
            .field(
                "cached_buffer",
                &self.cache.as_ref().map(|(e, b, _)| (e, b)),
            )
            .finish_non_exhaustive()
    }
}

impl<S, St> Bucket<S, St> {
    /// The configuration.
    pub fn config(&self) -> &BucketConfig {
        &self.config
    }

    /// The upstream stage or stream.
    pub fn upstream(&self) -> &S {
        &self.upstream
    }

    /// The input stream: the name of [`Bucket::upstream`] in `BucketStream`, kept for one
    /// release.
    #[deprecated(note = "use `upstream()`; `BucketStream` is `Bucket` now, see CHANGELOG.md")]
    pub fn get_ref(&self) -> &S {
        &self.upstream
    }
}

impl<S: Stage<Item = Sample>> Bucket<S> {
    /// Buckets `upstream` by `key`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if `buffer_size` or `pack_size` is 0 or does not fit `usize`.
    pub fn new(upstream: S, config: BucketConfig, key: BucketKey) -> Result<Self> {
        let (buffer_size, pack_size) = sizes(&config)?;
        Ok(Self {
            buffer_size,
            pack_size,
            upstream,
            config,
            key,
            cache: None,
            shared: Arc::default(),
            stream: Box::new(Serving::new(buffer_size)),
        })
    }

    fn build(&mut self, epoch: u64, buffer: u64) -> Result<Vec<Sample>> {
        let len = self.upstream.epoch_len();
        let start = buffer * self.config.buffer_size;
        let end = start.saturating_add(self.config.buffer_size).min(len);
        let seed = self.config.seed;
        let count = usize::try_from(end.saturating_sub(start)).unwrap_or(self.buffer_size);
        let mut items = Vec::with_capacity(count);
        self.upstream
            .get_strided(epoch, start, 1, count, &mut items)?;
        let indices: Vec<u64> = items.iter().map(|s| s.index).collect();
        let mut keys = Vec::with_capacity(indices.len());
        self.key.keys(&indices, &mut keys)?;
        Ok(order(
            &items,
            &keys,
            start,
            self.pack_size,
            seed,
            epoch,
            buffer,
        ))
    }
}

impl<S: Stage<Item = Sample>> Bucket<S> {
    /// Builds buffer `buffer` of `epoch` into the shared slots if it exists and no clone has
    /// built or is building it. An error is not kept: the clone that needs the buffer builds
    /// it again and reports it.
    fn build_ahead(&mut self, epoch: u64, buffer: u64) {
        let start = buffer.saturating_mul(self.config.buffer_size);
        if start >= self.upstream.epoch_len() {
            return;
        }
        let slot = self.shared.slot(epoch, buffer);
        let Ok(mut built) = slot.try_lock() else {
            return;
        };
        if built.is_none() {
            if let Ok(items) = self.build(epoch, buffer) {
                *built = Some(Arc::new(items));
            }
        }
    }
}

/// The buffer and pack sizes of `config` as `usize`.
///
/// # Errors
/// [`Error::InvalidConfig`] if either is 0 or does not fit `usize`.
pub(crate) fn sizes(config: &BucketConfig) -> Result<(usize, usize)> {
    let size = |v: u64, name: &str| {
        usize::try_from(v)
            .ok()
            .filter(|&v| v > 0)
            .ok_or_else(|| Error::InvalidConfig {
                reason: format!("bucket: {name} must be at least 1 and fit in memory, got {v}"),
            })
    };
    Ok((
        size(config.buffer_size, "buffer_size")?,
        size(config.pack_size, "pack_size")?,
    ))
}

/// The served order of buffer `buffer` of `epoch`: `items` (at epoch positions `start, start + 1,
/// …`, with their `keys`) sorted by `(key, seeded tie-breaker)`, cut into packs of `pack_size`,
/// the packs shuffled and the items within every pack shuffled, all from `(seed, epoch,
/// buffer)`. The seekable [`Bucket`] and the stream bucket both serve this order.
pub(crate) fn order(
    items: &[Sample],
    keys: &[u64],
    start: u64,
    pack_size: usize,
    seed: u64,
    epoch: u64,
    buffer: u64,
) -> Vec<Sample> {
    // `hash(&[seed, epoch, buffer, p, TAG])`, the first three words folded once.
    let prefix = fold(fold(fold(HASH_START, seed), epoch), buffer);
    let mut keyed = Vec::with_capacity(items.len());
    for (p, &key) in (start..).zip(keys.iter().take(items.len())) {
        let tie = fold(fold(prefix, p), 0x0054_4945);
        keyed.push((key, tie, keyed.len() as u32));
    }
    keyed.sort_unstable();
    let mut packs: Vec<Vec<Sample>> = keyed
        .chunks(pack_size.max(1))
        .map(|c| {
            c.iter()
                .filter_map(|&(_, _, k)| items.get(k as usize).copied())
                .collect()
        })
        .collect();
    let mut rng = SplitMix(hash(&[seed, epoch, buffer, 0x5041_434b]));
    rng.shuffle(&mut packs);
    for pack in &mut packs {
        rng.shuffle(pack);
    }
    packs.into_iter().flatten().collect()
}

impl<S: Stage<Item = Sample>> Stage for Bucket<S> {
    type Item = Sample;

    fn epochs(&self) -> Option<u64> {
        self.upstream.epochs()
    }

    fn epoch_len(&self) -> u64 {
        self.upstream.epoch_len()
    }

    fn get(&mut self, epoch: u64, position: u64) -> Result<Sample> {
        let len = self.epoch_len();
        if position >= len {
            return Err(Error::IndexOutOfRange {
                index: position,
                len,
            });
        }
        let buffer = position / self.config.buffer_size;
        let offset = position % self.config.buffer_size;
        let hit = matches!(&self.cache, Some((e, b, _)) if *e == epoch && *b == buffer);
        if !hit {
            let slot = self.shared.slot(epoch, buffer);
            let mut built = match slot.lock() {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
            let items = match &*built {
                Some(items) => Arc::clone(items),
                None => {
                    let items = Arc::new(self.build(epoch, buffer)?);
                    *built = Some(Arc::clone(&items));
                    items
                }
            };
            drop(built);
            self.cache = Some((epoch, buffer, items));
        }
        // Halfway through a buffer, the clone that asks for that item builds the next buffer,
        // so the others go on with this one's second half meanwhile instead of all waiting for
        // the next one at its first item.
        if offset == self.config.buffer_size / 2 && offset > 0 {
            self.build_ahead(epoch, buffer.saturating_add(1));
        }
        self.cache
            .as_ref()
            .and_then(|(_, _, items)| items.get(usize::try_from(offset).ok()?))
            .copied()
            .ok_or(Error::IndexOutOfRange {
                index: position,
                len,
            })
    }

    fn describe(&self, out: &mut String) {
        self.upstream.describe(out);
        let c = &self.config;
        out.push_str(&format!(
            " | bucket(buffer_size={}, pack_size={}, seed={}, key={})",
            c.buffer_size,
            c.pack_size,
            c.seed,
            self.key.name()
        ));
    }
}

/// A splitmix64 stream: the deterministic generator of the shuffles.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }

    /// Fisher–Yates.
    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = reduce(self.next(), i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::sampler::{Sampler, SamplerConfig, SamplerMode};
    use super::*;

    fn bucket(n: u64, buffer_size: u64, pack_size: u64) -> Bucket<Sampler> {
        let sampler = Sampler::new(
            n,
            SamplerConfig::default()
                .mode(SamplerMode::Shuffled)
                .seed(1)
                .epochs(Some(2)),
        )
        .unwrap();
        // Key: the index modulo 5, so keys collide and the tie-breaker matters.
        let key = BucketKey::new("mod5", |i| Ok(i % 5));
        Bucket::new(
            sampler,
            BucketConfig::default()
                .buffer_size(buffer_size)
                .pack_size(pack_size)
                .seed(9),
            key,
        )
        .unwrap()
    }

    /// The order before buffers were shared and built from strided reads, as it was computed
    /// then: checkpoints taken by older builds must resume on the same items.
    fn reference_order(n: u64, buffer_size: u64, pack_size: u64, epoch: u64) -> Vec<u64> {
        let mut b = bucket(n, buffer_size, pack_size);
        let seed = 9;
        let mut out = Vec::new();
        for buffer in 0..n.div_ceil(buffer_size) {
            let start = buffer * buffer_size;
            let end = (start + buffer_size).min(n);
            let mut keyed = Vec::new();
            for p in start..end {
                let item = b.upstream.get(epoch, p).unwrap();
                let tie = hash(&[seed, epoch, buffer, p, 0x0054_4945]);
                keyed.push((item.index % 5, tie, item));
            }
            keyed.sort_unstable_by_key(|&(key, tie, _)| (key, tie));
            let mut packs: Vec<Vec<Sample>> = keyed
                .chunks(pack_size as usize)
                .map(|c| c.iter().map(|&(_, _, s)| s).collect())
                .collect();
            let mut rng = SplitMix(hash(&[seed, epoch, buffer, 0x5041_434b]));
            rng.shuffle(&mut packs);
            for pack in &mut packs {
                rng.shuffle(pack);
            }
            out.extend(packs.into_iter().flatten().map(|s| s.index));
        }
        out
    }

    #[test]
    fn the_order_is_the_one_older_builds_computed() {
        for (n, buffer, pack) in [(103, 20, 4), (1000, 256, 32), (5000, 1024, 7)] {
            let mut b = bucket(n, buffer, pack);
            let mut other = b.clone();
            for e in 0..2 {
                let want = reference_order(n, buffer, pack, e);
                let got: Vec<u64> = (0..n).map(|p| b.get(e, p).unwrap().index).collect();
                assert_eq!(got, want, "n={n} buffer={buffer} pack={pack} epoch={e}");
                // A clone reads the buffers the first one built, backwards too.
                let back: Vec<u64> = (0..n)
                    .rev()
                    .map(|p| other.get(e, p).unwrap().index)
                    .collect();
                assert!(back.into_iter().rev().eq(want));
            }
        }
    }

    #[test]
    fn each_buffer_is_a_permutation_and_packs_share_keys() {
        let mut b = bucket(103, 20, 4);
        for e in 0..2 {
            let got: Vec<u64> = (0..103).map(|p| b.get(e, p).unwrap().index).collect();
            let mut sorted = got.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..103).collect::<Vec<_>>());
            // Within each buffer of 20, the packs are the sorted key order cut into fours.
            for buf in got.chunks(20) {
                let mut keys: Vec<u64> = buf.iter().map(|i| i % 5).collect();
                keys.sort_unstable();
                let mut expected: Vec<Vec<u64>> = keys.chunks(4).map(<[u64]>::to_vec).collect();
                let mut actual: Vec<Vec<u64>> = buf
                    .chunks(4)
                    .map(|p| {
                        let mut k: Vec<u64> = p.iter().map(|i| i % 5).collect();
                        k.sort_unstable();
                        k
                    })
                    .collect();
                expected.sort();
                actual.sort();
                assert_eq!(actual, expected);
            }
        }
    }

    #[test]
    fn random_access_equals_sequential_access() {
        let mut a = bucket(50, 8, 3);
        let mut b = bucket(50, 8, 3);
        let seq: Vec<Sample> = (0..50).map(|p| a.get(1, p).unwrap()).collect();
        for p in (0..50).rev() {
            assert_eq!(b.get(1, p).unwrap(), seq[p as usize]);
        }
    }

    /// Review: clones on many threads, each wandering over more buffers than are kept (so slots
    /// are evicted while others wait on them), with a key that fails now and then, always read
    /// the items a lone, unshared bucket computes.
    #[test]
    fn shared_clones_agree_under_eviction_and_errors() {
        use std::sync::atomic::{AtomicU64, Ordering};
        let n = 2000u64;
        let calls = Arc::new(AtomicU64::new(0));
        let flaky = {
            let calls = Arc::clone(&calls);
            BucketKey::new("mod5", move |i| {
                if calls.fetch_add(1, Ordering::Relaxed).is_multiple_of(997) {
                    return Err(Error::internal("transient".into()));
                }
                Ok(i % 5)
            })
        };
        let make = |key: BucketKey| {
            let sampler = Sampler::new(
                n,
                SamplerConfig::default()
                    .mode(SamplerMode::Shuffled)
                    .seed(1)
                    .epochs(Some(3)),
            )
            .unwrap();
            Bucket::new(
                sampler,
                BucketConfig::default().buffer_size(16).pack_size(4).seed(9),
                key,
            )
            .unwrap()
        };
        let mut lone = make(BucketKey::new("mod5", |i| Ok(i % 5)));
        let want: Vec<Vec<Sample>> = (0..3)
            .map(|e| (0..n).map(|p| lone.get(e, p).unwrap()).collect())
            .collect();
        let shared = make(flaky);
        let want = Arc::new(want);
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let mut b = shared.clone();
                let want = Arc::clone(&want);
                std::thread::spawn(move || {
                    let mut x = t.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                    for _ in 0..20_000 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let e = x % 3;
                        let p = (x >> 8) % n;
                        loop {
                            match b.get(e, p) {
                                Ok(s) => {
                                    assert_eq!(s, want[e as usize][p as usize]);
                                    break;
                                }
                                Err(_) => continue,
                            }
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }

    #[test]
    fn zero_sizes_are_rejected() {
        let s = Sampler::new(3, SamplerConfig::default()).unwrap();
        let key = BucketKey::new("zero", |_| Ok(0));
        let cfg = BucketConfig::default().buffer_size(0);
        assert!(Bucket::new(s.clone(), cfg, key.clone()).is_err());
        let cfg = BucketConfig::default().pack_size(0);
        assert!(Bucket::new(s, cfg, key).is_err());
    }
}
