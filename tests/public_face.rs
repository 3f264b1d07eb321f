//! Every name a user (and the Python bindings) needs is reachable at its one public path: the
//! store at the root, the loader at `pipeline::`, object stores at `remote::`, conversion at
//! `convert::`; the pipeline's batch stage and source future no longer share a name with
//! `zrecord::Batch` and `zrecord::GatherFuture`.

use std::any::type_name;
use std::sync::Arc;

// The root: the store. (The Python bindings bind exactly these.)
#[allow(unused_imports)]
use zrecord::{
    Backend, Batch, Codec, DType, Dataset, Element, Error, Field, GatherFuture, ReadConfig,
    RecordLocation, Result, Schema, Snapshot, Writer, WriterConfig,
};
// The loader.
#[allow(unused_imports)]
use zrecord::pipeline::{
    BatchConfig, Batcher, Checkpoint, CheckpointExt, Concat, DatasetSource, IndexBatch, Loader,
    LoaderBuilder, LoaderState, MemorySource, Sampler, SamplerConfig, Source, SourceFuture, Stage,
    StageExt,
};
// Object stores and conversion.
#[allow(unused_imports)]
use zrecord::convert::NpyConvert;
#[cfg(feature = "remote")]
#[allow(unused_imports)]
use zrecord::remote::{pull, push, RemoteConfig, TransferOptions};

#[test]
fn the_batch_stage_and_the_record_batch_are_two_names() -> Result<()> {
    let sampler = Sampler::new(10, SamplerConfig::default().epochs(Some(1)))?;
    let stage: Batcher<Sampler> = sampler.batch(BatchConfig::new(4))?;
    let first: Vec<IndexBatch> = stage.cursor().into_iter().take(1).collect::<Result<_>>()?;
    assert_eq!(first.len(), 1);
    assert_ne!(type_name::<Batcher<Sampler>>(), type_name::<Batch>());
    Ok(())
}

#[test]
fn a_source_of_your_own_names_its_future_source_future() -> Result<()> {
    #[derive(Debug)]
    struct Ones;
    impl Source for Ones {
        type Batch = usize;
        fn len(&self) -> u64 {
            3
        }
        fn item_len(&self, _index: u64) -> Result<u64> {
            Ok(1)
        }
        fn gather(&self, indices: &[u64]) -> Result<usize> {
            Ok(indices.len())
        }
        fn gather_async(self: Arc<Self>, indices: Vec<u64>) -> SourceFuture<usize> {
            Box::pin(async move { Ok(indices.len()) })
        }
    }
    let n = futures::executor::block_on(Arc::new(Ones).gather_async(vec![0, 2]))?;
    assert_eq!(n, 2);
    assert_ne!(
        type_name::<SourceFuture<Batch>>(),
        type_name::<GatherFuture>()
    );
    Ok(())
}
