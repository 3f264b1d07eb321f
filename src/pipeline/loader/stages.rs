//! The stages a [`LoaderBuilder`] runs besides its chain: the transform stage
//! ([`LoaderBuilder::map`], on the prefetch workers before the batch transform) and a user's
//! own stage over the index chain ([`LoaderBuilder::stage`]). A child module of the loader's:
//! it sets the builder's private fields.

use std::sync::Arc;

use super::super::batch::IndexBatch;
use super::super::checkpoint::Checkpoint;
use super::super::elastic::ElasticChain;
use super::super::prefetch::Transform;
use super::super::source::Source;
use super::super::stage::Cursor;
use super::super::staged_chain::UserStage;
use super::LoaderBuilder;
use crate::transform::{Map, RecordKey};
use crate::Result;

/// A [`Map`] over a source's batches, given the loader's seed: what [`LoaderBuilder::map`] sets.
pub(super) type MapStep<B> = Arc<dyn Fn(B, u64, &IndexBatch) -> Result<B> + Send + Sync>;

impl<S: Source, T: Send + 'static> LoaderBuilder<S, T> {
    /// Runs the transform stage `map` over every gathered batch, on the worker threads, before
    /// the [`LoaderBuilder::transform`]: per field, every record's value goes through the map's
    /// operations (decode, crop, flip, normalize, your own), each record's randomness drawn
    /// from (loader seed, epoch, record index, field) ([`crate::transform::Rng`]). A second
    /// call replaces the first.
    ///
    /// # Guarantees
    ///
    /// - The workers run it in parallel, each on its own batches; the batches come out in the
    ///   loader's order, and backpressure reaches the reads (a full queue stops the worker).
    /// - The same record of the same epoch is transformed alike on any worker count, after
    ///   [`LoaderBuilder::resume`], and on any rank count after
    ///   [`LoaderBuilder::resume_elastic`]: the checkpoint holds no transform state, and an
    ///   exact resume stays exact through random augmentation. The seed is the sampler's
    ///   (or the mix's) seed.
    /// - An operation that fails is [`Error::Transform`](crate::Error::Transform) naming the record index, the field
    ///   and the operation; it is not retried, and [`crate::pipeline::OnError`] decides what
    ///   the stream does next (stop, or skip the batch).
    /// - [`Loader::stats`](crate::pipeline::Loader::stats) counts its time in `transform_time`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use futures::executor::block_on;
    /// use futures::StreamExt;
    /// use zrecord::transform::{Map, Op, OpError, Rng, Value};
    /// use zrecord::{DType, Dataset, Field, Schema, Writer, WriterConfig};
    /// use zrecord::pipeline::{DatasetSource, Loader};
    ///
    /// /// Each byte plus a random 0 or 1.
    /// #[derive(Debug)]
    /// struct Noise;
    /// impl Op for Noise {
    ///     fn name(&self) -> String { "noise".into() }
    ///     fn apply(&self, v: Value, rng: &mut Rng) -> Result<Value, OpError> {
    ///         let Value::Bytes(b) = v else { return Err("expects bytes".into()) };
    ///         let bit = rng.below(2) as u8;
    ///         Ok(Value::Bytes(b.iter().map(|x| x.wrapping_add(bit)).collect::<Vec<u8>>().into()))
    ///     }
    /// }
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let tmp = tempfile::tempdir()?;
    /// # let dir = tmp.path().join("ds");
    /// # let mut w = Writer::create(&dir, &Schema::new().field(Field::new("x", DType::U8)), WriterConfig::default())?;
    /// # for i in 0..64u8 { w.append(&[&[i, i][..]])?; }
    /// # w.commit()?; drop(w);
    /// let source = Arc::new(DatasetSource::new(&Dataset::open(&dir)?));
    /// let builder = Loader::builder(source)
    ///     .seed(3)
    ///     .batch_size(16)
    ///     .map(Map::new().field("x", [Arc::new(Noise) as Arc<dyn Op>]));
    /// let first = block_on(builder.clone().build()?.next()).expect("a batch")?;
    /// let again = block_on(builder.build()?.next()).expect("a batch")?;
    /// assert_eq!(first.data.get(0, 0), again.data.get(0, 0)); // the same noise, every time
    /// # Ok(())
    /// # }
    /// ```
    pub fn map(mut self, map: Map) -> Self
    where
        S: Source<Batch = crate::Batch>,
    {
        let map = Arc::new(map);
        self.map = Some(Arc::new(move |batch, seed, index: &IndexBatch| {
            let keys: Vec<RecordKey> = index
                .samples
                .iter()
                .map(|s| RecordKey {
                    epoch: s.epoch,
                    index: s.index,
                })
                .collect();
            map.apply(batch, seed, &keys)
        }));
        self
    }

    /// Runs a stage of your own over the whole index chain: `f` gets the chain (sampler or mix,
    /// shard, bucket, batch, and the residual epochs an elastic resume left) as a [`Cursor`],
    /// a [`Checkpoint`] stream of [`IndexBatch`]es, and returns a [`Checkpoint`] stream of index
    /// batches, which the loader gathers, transforms and delivers: the chain filtered
    /// ([`CheckpointExt::filter_items`](crate::pipeline::CheckpointExt::filter_items)), changed ([`CheckpointExt::map_items`](crate::pipeline::CheckpointExt::map_items)), or any stage
    /// of your own. `name` identifies the stage in checkpoints. A loader has one stage: a
    /// second call replaces the first (compose stages inside `f`). `f` is called once by every
    /// [`LoaderBuilder::build`] and [`LoaderBuilder::resume`].
    ///
    /// # Guarantees
    ///
    /// - The stage is a stage like any other: its loader has every option of
    ///   [`PrefetchConfig`](crate::pipeline::PrefetchConfig) (workers, queues, strict or best-effort merge, gathers in flight,
    ///   lookahead, retries, error handling), [`Loader::stats`](crate::pipeline::Loader::stats), and mixing and bucketing under
    ///   the stage. Its prefetch is the one [`Prefetch`](crate::pipeline::Prefetch) over a stream
    ///   ([`CheckpointExt::prefetch`](crate::pipeline::CheckpointExt::prefetch)): the stage runs on the consumer's task, which deals its
    ///   batches to the workers (keep it cheap; the gathers and the transform run on the
    ///   workers).
    /// - Under the strict merge the loader yields exactly the stage's batches, in order, with
    ///   any worker count: a sequential pass of `f` over [`LoaderBuilder::index_chain`]'s cursor,
    ///   each batch gathered and transformed.
    /// - [`Loader::state`](crate::pipeline::Loader::state) holds the stage's checkpoint ([`LoaderState::stage`](crate::pipeline::LoaderState::stage)), and `name` in
    ///   the configuration description. [`LoaderBuilder::resume`] with the same stage continues
    ///   right after the last consumed batch, with any worker count and either merge: under the
    ///   strict merge the rest is exactly the uninterrupted run's; under the best-effort merge
    ///   no batch is lost or repeated. That holds if the stage keeps the [`Checkpoint`]
    ///   contract (a restored stage yields what the original yielded after the checkpoint, so
    ///   `f` must build the same stage every time); `name` is all the checkpoint knows of it, so
    ///   give a stage whose behaviour changes a new name.
    /// - Resuming with another stage name, with a stage from a checkpoint taken without one, or
    ///   without one from a checkpoint taken with one, is [`Error::ResumeMismatch`](crate::Error::ResumeMismatch) naming the
    ///   difference; so is a stage state the stage's `restore` (or its state's `Deserialize`)
    ///   refuses.
    /// - A loader with a stage resumes on the same ranks only: its stage's state is one rank's
    ///   stream, which an elastic merge cannot split or combine.
    ///   [`LoaderBuilder::merge_checkpoints`], [`LoaderBuilder::resume_elastic`] and
    ///   [`LoaderBuilder::elastic_chain`] with a stage, or of checkpoints taken with one, are
    ///   [`Error::ResumeMismatch`](crate::Error::ResumeMismatch).
    /// - A loader without a stage runs the seekable prefetch ([`Prefetch`](crate::pipeline::Prefetch)) exactly as before,
    ///   and its checkpoints are unchanged.
    ///
    /// The stage's state is written as JSON at the start and after every batch it yields: a
    /// state serde_json cannot write (a map with non-string keys) is [`Error::InvalidConfig`](crate::Error::InvalidConfig),
    /// from [`LoaderBuilder::build`] or as an `Err` item in the batch's place.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use futures::executor::block_on;
    /// use zrecord::pipeline::{CheckpointExt, IndexBatch, Loader, MemorySource, PrefetchConfig};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let source = Arc::new(MemorySource::new((0..100u8).map(|i| vec![i]).collect()));
    /// let builder = Loader::builder(source)
    ///     .seed(7)
    ///     .batch_size(10)
    ///     .prefetch(PrefetchConfig::default().num_workers(2))
    ///     // Drop every third batch of an epoch, keep the first 5 records of the others.
    ///     .stage("two-in-three-short", |chain| {
    ///         chain
    ///             .filter_items(|b: &IndexBatch| b.position % 3 != 2)
    ///             .map_items(|mut b: IndexBatch| {
    ///                 b.samples.truncate(5);
    ///                 Ok(b)
    ///             })
    ///     });
    /// let mut loader = builder.clone().build()?;
    /// let first = block_on(loader.next()).expect("a batch")?;
    /// assert_eq!(first.indices().len(), 5);
    /// let saved = serde_json::to_string(&loader.state())?;
    ///
    /// // Later, perhaps in another process: the same builder continues after the first batch.
    /// let mut resumed = builder.resume(&serde_json::from_str(&saved)?)?;
    /// let mut positions = vec![first.position()];
    /// while let Some(batch) = block_on(resumed.next()) {
    ///     positions.push(batch?.position());
    /// }
    /// assert_eq!(positions, [0, 1, 3, 4, 6, 7, 9]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn stage<C, F>(mut self, name: impl Into<String>, f: F) -> Self
    where
        F: Fn(Cursor<ElasticChain>) -> C + Send + Sync + 'static,
        C: Checkpoint<Item = Result<IndexBatch>> + Send + Unpin + 'static,
    {
        self.stage = Some(UserStage::new(name.into(), f));
        self
    }
}

impl<S: Source, T: Send + 'static> LoaderBuilder<S, T> {
    /// The seed the sampler, or the mix, draws from: the transform stage's too.
    pub(super) fn loader_seed(&self) -> u64 {
        self.mix
            .as_ref()
            .map_or(self.config.sampler.seed, |m| m.seed)
    }

    /// The worker's transform: the transform stage ([`LoaderBuilder::map`]), if any, then the
    /// user's transform.
    pub(super) fn composed_transform(&self) -> Transform<S::Batch, T> {
        let Some(map) = self.map.clone() else {
            return Arc::clone(&self.transform);
        };
        let seed = self.loader_seed();
        let after = Arc::clone(&self.transform);
        Arc::new(move |batch, index: &IndexBatch| after(map(batch, seed, index)?, index))
    }
}
