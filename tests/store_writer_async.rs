//! The async writer API works from tasks of a multi-thread tokio runtime: `append_async`, `append_many_async` and `commit_async` futures are `Send`, a writer moves between tasks, readers opened meanwhile see each acknowledged commit and never a torn one, and the result equals what the blocking API writes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use zrecord::{Codec, DType, Dataset, Field, Schema, Writer, WriterConfig};

fn assert_send<T: Send>(_: &T) {}

fn schema() -> Schema {
    Schema::new()
        .field(Field::new("text", DType::Bytes).codec(Codec::Deflate))
        .field(Field::new("id", DType::U64).shape(vec![]))
        .chunk_size_bytes(64 << 10)
}

fn record(i: u64) -> [Vec<u8>; 2] {
    let text = format!("record {i} ")
        .repeat(1 + (i % 50) as usize)
        .into_bytes();
    [text, i.to_le_bytes().to_vec()]
}

#[test]
fn writer_and_its_futures_are_send() {
    fn is_send<T: Send>() {}
    is_send::<Writer>();
    let tmp = tempfile::tempdir().unwrap();
    let mut w = Writer::create(tmp.path().join("ds"), &schema(), WriterConfig::default()).unwrap();
    let rec = record(0);
    assert_send(&w.append_async(&rec));
    assert_send(&w.append_many_async(std::slice::from_ref(&rec)));
    assert_send(&w.commit_async());
}

#[test]
fn async_appends_and_commits_from_tokio_tasks() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    let config = WriterConfig::default()
        .write_buffer_bytes(16 << 10)
        .num_writers(3)
        .queue_depth(1);
    let w = Writer::create(&dir, &schema(), config.clone()).unwrap();
    const COMMITS: u64 = 20;
    const PER_COMMIT: u64 = 500;
    let dir2 = dir.clone();
    rt.block_on(async move {
        // A reader task checks every commit it sees while the writer task writes.
        let reader = tokio::task::spawn_blocking(move || {
            let ds = Dataset::open(&dir2).unwrap();
            let mut seen = 0u64;
            loop {
                ds.refresh().unwrap();
                let n = ds.len();
                assert_eq!(n % PER_COMMIT, 0, "a torn commit: {n} records");
                let idx: Vec<u64> = (0..n).collect();
                let b = ds.gather_blocking(&idx).unwrap();
                for i in idx {
                    let want = record(i);
                    assert_eq!(b.get(i as usize, 0).unwrap(), &want[0][..]);
                    assert_eq!(b.get(i as usize, 1).unwrap(), &want[1][..]);
                }
                seen = seen.max(n);
                if seen == COMMITS * PER_COMMIT {
                    return seen;
                }
                std::thread::yield_now();
            }
        });
        let writer = tokio::spawn(async move {
            let mut w = w;
            for c in 0..COMMITS {
                let base = c * PER_COMMIT;
                if c % 2 == 0 {
                    for i in base..base + PER_COMMIT {
                        assert_eq!(w.append_async(&record(i)).await.unwrap(), i);
                    }
                } else {
                    let recs: Vec<[Vec<u8>; 2]> = (base..base + PER_COMMIT).map(record).collect();
                    let r = w.append_many_async(&recs).await.unwrap();
                    assert_eq!(r, base..base + PER_COMMIT);
                }
                // The writer moves to another task for its commit.
                let g = tokio::spawn(async move {
                    let g = w.commit_async().await.unwrap();
                    (w, g)
                })
                .await
                .unwrap();
                w = g.0;
                assert_eq!(g.1, c + 1);
            }
            w
        });
        let w = writer.await.unwrap();
        assert_eq!(reader.await.unwrap(), COMMITS * PER_COMMIT);
        drop(w);
    });
    // The same records through the blocking API give the same dataset contents.
    let dir3 = tmp.path().join("blocking");
    let mut w = Writer::create(&dir3, &schema(), config).unwrap();
    for i in 0..COMMITS * PER_COMMIT {
        w.append(&record(i)).unwrap();
    }
    w.commit().unwrap();
    drop(w);
    let (a, b) = (Dataset::open(&dir).unwrap(), Dataset::open(&dir3).unwrap());
    assert_eq!(a.len(), b.len());
    let idx: Vec<u64> = (0..a.len()).collect();
    let (ga, gb) = (
        a.gather_blocking(&idx).unwrap(),
        b.gather_blocking(&idx).unwrap(),
    );
    for r in 0..idx.len() {
        for f in 0..2 {
            assert_eq!(ga.get(r, f).unwrap(), gb.get(r, f).unwrap());
        }
    }
}

#[test]
fn the_blocking_api_works_inside_another_executor_and_drop_releases_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ds");
    Writer::create(&dir, &schema(), WriterConfig::default()).unwrap();
    for round in 0..20u64 {
        // The blocking calls wait without `futures::executor::block_on`, which would panic here.
        futures::executor::block_on(async {
            let mut w = Writer::open(&dir, WriterConfig::default()).unwrap();
            w.append(&record(round)).unwrap();
            w.commit_async().await.unwrap();
            // Dropping the writer right after `commit_async` returns must release the lock:
            // the commit thread lets go of it before answering.
            drop(w);
            let w = Writer::open(&dir, WriterConfig::default()).unwrap();
            assert_eq!(w.len(), round + 1);
        });
    }
}
