//! A mixing loader over concatenated sources, stopped on 2 ranks and resumed elastically on 3,
//! delivers every mix position of every epoch exactly once across the ranks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::executor::block_on;
use zrecord::pipeline::{
    Concat, Exhausted, IndexBatch, Loader, LoaderBuilder, LoaderState, MemorySource, MixConfig,
    PrefetchConfig, ShardConfig, Stage,
};

type Src = Concat<MemorySource>;

fn source() -> Arc<Src> {
    let part = |p: u8, n: u8| Arc::new(MemorySource::new((0..n).map(|i| vec![p, i]).collect()));
    Arc::new(Concat::new(vec![part(0, 30), part(1, 7), part(2, 12)]).unwrap())
}

fn builder(src: &Arc<Src>, total: u64, rank: u64, mix: &MixConfig) -> LoaderBuilder<Src> {
    Loader::builder(Arc::clone(src))
        .mix(mix.clone())
        .seed(17)
        .shard(ShardConfig::new(total, rank))
        .batch_size(3)
        .prefetch(PrefetchConfig::default().num_workers(2))
}

fn take(mut loader: Loader<Src>, k: usize) -> (Vec<IndexBatch>, LoaderState) {
    let mut got = Vec::new();
    for _ in 0..k {
        match block_on(loader.next()) {
            Some(b) => {
                let b = b.unwrap();
                // The bytes are the concatenated record's.
                for (r, &i) in b.batch.indices().iter().enumerate() {
                    let (p, l) = match i {
                        0..30 => (0, i),
                        30..37 => (1, i - 30),
                        _ => (2, i - 37),
                    };
                    assert_eq!(b.data[r], vec![p as u8, l as u8]);
                }
                got.push(b.batch);
            }
            None => break,
        }
    }
    (got, loader.state())
}

#[test]
fn every_mix_position_exactly_once_from_two_ranks_to_three() {
    let src = source();
    for mix in [
        MixConfig::new(vec![2.0, 1.0, 1.0])
            .epochs(Some(2))
            .epoch_len(Some(40)),
        MixConfig::new(vec![1.0, 3.0, 1.0]).exhausted(Exhausted::Drop),
        MixConfig::new(vec![1.0, 3.0, 1.0])
            .exhausted(Exhausted::Stop)
            .part_epochs(2),
    ] {
        let chain = builder(&src, 1, 0, &mix).index_chain().unwrap();
        let (epochs, len) = {
            let root_len: u64 = chain
                .clone()
                .cursor()
                .into_iter()
                .map(|b| b.unwrap().samples.len() as u64)
                .sum();
            let epochs = chain.epochs().unwrap();
            (epochs, root_len / epochs)
        };
        for stop_at in [0, 2, 5] {
            let mut delivered = Vec::new();
            let mut states = Vec::new();
            for rank in 0..2 {
                let loader = builder(&src, 2, rank, &mix).build().unwrap();
                let (got, state) = take(loader, stop_at + rank as usize);
                delivered.extend(got);
                states.push(state);
            }
            for rank in 0..3 {
                let loader = builder(&src, 3, rank, &mix)
                    .resume_elastic(&states)
                    .unwrap();
                delivered.extend(take(loader, usize::MAX).0);
            }
            let mut seen: BTreeMap<(u64, u64), u32> = BTreeMap::new();
            for b in &delivered {
                for s in b.samples.iter().filter(|s| !s.padded) {
                    *seen.entry((s.epoch, s.position)).or_default() += 1;
                }
            }
            for e in 0..epochs {
                for p in 0..len {
                    assert_eq!(
                        seen.remove(&(e, p)),
                        Some(1),
                        "{mix:?} stop at {stop_at}: epoch {e} position {p}"
                    );
                }
            }
            assert!(seen.is_empty(), "{seen:?}");
        }
    }
}
