//! Several real datasets concatenated gather byte-exact in the caller's order with global
//! indices (a schema mismatch and an index past the end are typed errors), and a mixing loader
//! over them resumes from a checkpoint after any batch exactly where it stopped.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::Path;
use std::sync::Arc;

use futures::executor::block_on;
use futures::StreamExt;
use zrecord::pipeline::{
    BucketConfig, Concat, Exhausted, IndexBatch, Loader, LoaderBuilder, LoaderState, MergePolicy,
    MixConfig, PrefetchConfig, Source,
};
use zrecord::{DType, Dataset, Error, Field, Schema, Writer, WriterConfig};

/// Record `i` of part `part`: field "x" bytes and an i32 label.
fn record(part: u64, i: u64) -> (Vec<u8>, i32) {
    let len = ((i * 17 + part * 5) % 23) as usize;
    let x = (0..len)
        .map(|j| (part as u8).wrapping_mul(41) ^ (i as u8).wrapping_add(j as u8))
        .collect();
    (x, (part * 1000 + i) as i32)
}

fn create(dir: &Path, part: u64, n: u64, label: DType) -> Arc<Dataset> {
    create_shaped(dir, part, n, label, vec![])
}

fn create_shaped(dir: &Path, part: u64, n: u64, label: DType, shape: Vec<u64>) -> Arc<Dataset> {
    let schema = Schema::new()
        .field(Field::new("x", DType::U8))
        .field(Field::new("label", label).shape(shape));
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    for i in 0..n {
        let (x, l) = record(part, i);
        let l = match label {
            DType::I64 => i64::from(l).to_le_bytes().to_vec(),
            _ => l.to_le_bytes().to_vec(),
        };
        w.append(&[x, l]).unwrap();
    }
    w.commit().unwrap();
    drop(w);
    Arc::new(Dataset::open(dir).unwrap())
}

const LENS: [u64; 3] = [40, 0, 25];

fn parts(tmp: &Path) -> Vec<Arc<Dataset>> {
    LENS.iter()
        .enumerate()
        .map(|(p, &n)| create(&tmp.join(format!("p{p}")), p as u64, n, DType::I32))
        .collect()
}

/// The expected bytes of concatenated index `g`.
fn expected(g: u64) -> (Vec<u8>, i32) {
    let mut g = g;
    for (p, &n) in LENS.iter().enumerate() {
        if g < n {
            return record(p as u64, g);
        }
        g -= n;
    }
    panic!("index past the end");
}

fn check(batch: &zrecord::Batch, indices: &[u64]) {
    assert_eq!(batch.indices(), indices);
    for (r, &g) in indices.iter().enumerate() {
        let (x, l) = expected(g);
        assert_eq!(batch.get(r, 0).unwrap(), &x[..], "record {r} (index {g})");
        assert_eq!(batch.typed::<i32>(r, 1).unwrap(), &[l]);
    }
}

#[test]
fn gathers_byte_exact_in_caller_order() {
    let tmp = tempfile::tempdir().unwrap();
    let c = Concat::new(parts(tmp.path())).unwrap();
    assert_eq!(c.len(), 65);
    assert_eq!(c.part_lens(), LENS.to_vec());
    assert_eq!(c.item_len(41).unwrap(), expected(41).0.len() as u64 + 4);
    let indices = [64, 0, 39, 40, 3, 64, 52, 1, 0];
    check(&c.gather(&indices).unwrap(), &indices);
    let all: Vec<u64> = (0..65).rev().collect();
    check(&c.gather(&all).unwrap(), &all);
    check(&c.gather(&[]).unwrap(), &[]);
    // One part only.
    check(&c.gather(&[44, 42]).unwrap(), &[44, 42]);
    assert_eq!(
        c.key_description(),
        "concat(stored_len(all_fields); stored_len(all_fields); stored_len(all_fields))"
    );
}

#[test]
fn errors_are_typed() {
    let tmp = tempfile::tempdir().unwrap();
    let mut ps = parts(tmp.path());
    let c = Concat::new(ps.clone()).unwrap();
    match c.gather(&[3, 65]) {
        Err(Error::IndexOutOfRange { index: 65, len: 65 }) => {}
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        c.item_len(70),
        Err(Error::IndexOutOfRange { index: 70, .. })
    ));
    ps.push(create(&tmp.path().join("wide"), 3, 5, DType::I64));
    let c = Concat::new(ps).unwrap();
    // Each part alone is fine; together the labels' dtypes differ.
    c.gather(&[0, 1]).unwrap();
    c.gather(&[65, 66]).unwrap();
    match c.gather(&[0, 65]) {
        Err(Error::SchemaMismatch {
            part: 3,
            reference: 0,
            field,
            reason,
        }) => {
            assert_eq!(field, "label");
            assert!(reason.contains("i64") || reason.contains("I64"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // The same dtype in another shape (one i32 as [1], not a scalar) differs as much.
    let tmp = tempfile::tempdir().unwrap();
    let mut ps = parts(tmp.path());
    ps.push(create_shaped(
        &tmp.path().join("tall"),
        3,
        5,
        DType::I32,
        vec![1],
    ));
    let c = Concat::new(ps).unwrap();
    match c.gather(&[0, 65]) {
        Err(Error::SchemaMismatch {
            part: 3,
            reference: 0,
            field,
            reason,
        }) => {
            assert_eq!(field, "label");
            assert_eq!(reason, "shape [1] here, [] in the reference part");
        }
        other => panic!("{other:?}"),
    }
}

type Item = (IndexBatch, Vec<Vec<Vec<u8>>>);

fn unwrap(b: zrecord::Result<zrecord::pipeline::LoaderBatch<zrecord::Batch>>) -> Item {
    let b = b.unwrap();
    let records = b
        .data
        .clone()
        .into_records()
        .into_iter()
        .map(|r| r.into_iter().map(|v| v.to_vec()).collect())
        .collect();
    assert_eq!(b.data.indices(), &b.batch.indices()[..]);
    check(&b.data, &b.batch.indices());
    (b.batch, records)
}

fn builder(
    src: &Arc<Concat<Dataset>>,
    workers: usize,
    bucket: bool,
) -> LoaderBuilder<Concat<Dataset>> {
    let b = Loader::builder(Arc::clone(src))
        .mix(
            MixConfig::new(vec![3.0, 1.0, 1.0])
                .epochs(Some(2))
                .epoch_len(Some(37)),
        )
        .seed(5)
        .batch_size(4)
        .prefetch(
            PrefetchConfig::default()
                .num_workers(workers)
                .worker_queue_size(2)
                .merge(MergePolicy::Strict),
        );
    if bucket {
        b.bucket(BucketConfig::default().buffer_size(9).pack_size(4))
    } else {
        b
    }
}

#[test]
fn a_mixing_loader_resumes_exactly_after_every_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let src = Arc::new(Concat::new(parts(tmp.path())).unwrap());
    for bucket in [false, true] {
        let full: Vec<Item> = block_on(
            builder(&src, 2, bucket)
                .build()
                .unwrap()
                .map(unwrap)
                .collect(),
        );
        assert_eq!(full.len(), 2 * 10, "two epochs of ceil(37 / 4) batches");
        // The weights show: the empty part gets nothing, so 3/4 of the items come from part 0.
        let from0 = full
            .iter()
            .flat_map(|(b, _)| b.indices())
            .filter(|&i| i < 40)
            .count();
        assert!((54..=57).contains(&from0), "{from0} of 74 from part 0");
        for k in 0..=full.len() {
            let mut loader = builder(&src, 2, bucket).build().unwrap();
            let head: Vec<Item> = block_on(async {
                let mut v = Vec::new();
                for _ in 0..k {
                    v.push(unwrap(loader.next().await.unwrap()));
                }
                v
            });
            let json = serde_json::to_string(&loader.state()).unwrap();
            drop(loader);
            let state: LoaderState = serde_json::from_str(&json).unwrap();
            let resume_workers = 1 + k % 3;
            let resumed = builder(&src, resume_workers, bucket)
                .resume(&state)
                .unwrap();
            let tail: Vec<Item> = block_on(resumed.map(unwrap).collect());
            assert_eq!(head[..], full[..k]);
            assert_eq!(tail[..], full[k..], "bucket={bucket} k={k}");
        }
    }
}

#[test]
fn the_mix_must_match_the_sources_parts_and_the_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let src = Arc::new(Concat::new(parts(tmp.path())).unwrap());
    let err = Loader::builder(Arc::clone(&src))
        .mix(MixConfig::new(vec![1.0, 1.0]))
        .build()
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("2 weights for a source of 3 parts"),
        "{err}"
    );
    // The seed applies whichever call comes first.
    let a = builder(&src, 1, false).index_chain().unwrap();
    let b = Loader::builder(Arc::clone(&src))
        .seed(5)
        .mix(
            MixConfig::new(vec![3.0, 1.0, 1.0])
                .epochs(Some(2))
                .epoch_len(Some(37)),
        )
        .batch_size(4)
        .index_chain()
        .unwrap();
    assert_eq!(
        zrecord::pipeline::describe(&a),
        zrecord::pipeline::describe(&b)
    );
    // A checkpoint of another mix is refused, naming the setting.
    let mut loader = builder(&src, 1, false).build().unwrap();
    block_on(loader.next()).unwrap().unwrap();
    let state = loader.state();
    let other = Loader::builder(Arc::clone(&src))
        .mix(
            MixConfig::new(vec![1.0, 1.0, 1.0])
                .epochs(Some(2))
                .epoch_len(Some(37)),
        )
        .seed(5)
        .batch_size(4);
    let err = other.resume(&state).unwrap_err().to_string();
    assert!(err.contains("mix.weights: checkpoint ["), "{err}");
    let plain = Loader::builder(Arc::clone(&src)).seed(5).batch_size(4);
    let err = plain.resume(&state).unwrap_err().to_string();
    assert!(err.contains("mix: checkpoint on"), "{err}");
    // Exhaustion policies run through the loader too: drop serves every record once.
    let drop = Loader::builder(Arc::clone(&src))
        .mix(MixConfig::new(vec![1.0, 5.0, 1.0]).exhausted(Exhausted::Drop))
        .batch_size(7)
        .build()
        .unwrap();
    let mut seen: Vec<u64> = block_on(drop.map(unwrap).collect::<Vec<_>>())
        .into_iter()
        .flat_map(|(b, _)| b.indices())
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..65).collect::<Vec<_>>());
}
