//! Against a real 3-node Garage cluster (started by the test): a loader epoch over a dataset read
//! by URL through one node delivers every record exactly once, with its bytes, when another node
//! is killed in the middle of the epoch; and a push never loses an update silently: where the
//! store ignores conditional creates, push refuses to publish unless told there is a single
//! writer. Garage 2.5.0 ignores them: its PutObject ignores `If-None-Match: *` and overwrites
//! (probed below), so a push is refused with `ConditionalCreateIgnored`; pushes that claim to be
//! the single writer and race anyway (breaking that promise on purpose) end in one of three
//! ways, each checked: a `PublishConflict` for the push whose manifest was overwritten (seen
//! when it reads its slot back), two pushes committed one after the other, or — the window the
//! read-back cannot close, which is why the probe refuses — both pushes reporting the same slot
//! while the store holds only the later one.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/garage.rs"]
mod garage;

use std::path::Path;
use std::sync::{Arc, Barrier};

use object_store::path::Path as ObjectPath;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};
use zrecord::pipeline::{DatasetSource, Loader};
use zrecord::remote::{pull, push, RemoteConfig, TransferOptions, TransferReport};
use zrecord::{Codec, DType, Dataset, Error, Field, ReadConfig, Schema, Writer, WriterConfig};

/// Record `i`'s bytes in dataset `salt`, up to 700 bytes.
fn record(salt: u8, i: u64) -> Vec<u8> {
    (0..(i * 37 % 700) as usize)
        .map(|j| (i as u8).wrapping_mul(13).wrapping_add((j % 7) as u8) ^ salt)
        .collect()
}

/// A dataset of `n` records, two fields, in chunks of 128 KiB.
fn write(dir: &Path, salt: u8, n: u64) {
    let schema = Schema::new()
        .field(Field::new("x", DType::U8).codec(Codec::Deflate))
        .field(Field::new("raw", DType::U8))
        .chunk_size_bytes(128 << 10);
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    for i in 0..n {
        w.append(&[record(salt, i), record(salt, i + 1)]).unwrap();
    }
    w.commit().unwrap();
}

/// Every record of `ds`, field by field.
fn all_records(ds: &Dataset) -> Vec<Vec<Vec<u8>>> {
    let indices: Vec<u64> = (0..ds.len()).collect();
    ds.gather_blocking(&indices)
        .unwrap()
        .into_records()
        .into_iter()
        .map(|r| r.into_iter().map(|b| b.to_vec()).collect())
        .collect()
}

#[test]
fn epoch_completes_exactly_with_a_node_killed_mid_epoch() {
    const N: u64 = 4000;
    let mut cluster = garage::Garage::start();
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("ds");
    write(&local, 0, N);
    let expected = all_records(&Dataset::open(&local).unwrap());

    // Pushed (by its only writer: Garage ignores conditional creates, so a push must say so)
    // and read through node 0; node 1 dies mid-epoch.
    let url = cluster.url("sets/kill");
    let report = push(
        &local,
        &url,
        &TransferOptions::default()
            .store(cluster.options(0))
            .single_writer(true),
    )
    .unwrap();
    assert!(
        report.transferred.0 >= 8,
        "want several chunk objects, so reads spread over objects: {report:?}"
    );
    let config = RemoteConfig::default()
        .store(cluster.options(0))
        .cache_dir(tmp.path().join("cache"));
    let remote = zrecord::remote::open(&url, ReadConfig::default(), config).unwrap();
    assert_eq!(remote.len(), N);

    let src = Arc::new(DatasetSource::new(&remote));
    let mut loader = Loader::builder(src)
        .seed(11)
        .batch_size(64)
        .build()
        .unwrap();
    let batches = N.div_ceil(64);
    let kill_after = batches / 3;
    let mut seen = vec![0u32; N as usize];
    let mut consumed = 0u64;
    let mut requests_at_kill = None;
    while let Some(b) = futures::executor::block_on(loader.next()) {
        let b = b.unwrap_or_else(|e| {
            panic!(
                "batch {consumed} failed ({}): {e}{}",
                if requests_at_kill.is_some() {
                    "after node 1 was killed"
                } else {
                    "before any node was killed"
                },
                cluster.logs()
            )
        });
        for (r, &i) in b.data.indices().iter().enumerate() {
            seen[i as usize] += 1;
            for (f, want) in expected[i as usize].iter().enumerate() {
                assert_eq!(
                    b.data.get(r, f).unwrap(),
                    want.as_slice(),
                    "record {i}, field {f}"
                );
            }
        }
        consumed += 1;
        if consumed == kill_after {
            requests_at_kill = Some(zrecord::diagnostics::remote_stats().requests);
            cluster.kill(1);
            assert!(!cluster.is_running(1));
        }
    }
    assert_eq!(consumed, batches);
    let lost: Vec<usize> = (0..seen.len()).filter(|&i| seen[i] == 0).collect();
    let repeated: Vec<usize> = (0..seen.len()).filter(|&i| seen[i] > 1).collect();
    assert!(
        lost.is_empty() && repeated.is_empty(),
        "lost {lost:?}, repeated {repeated:?}"
    );
    // The batches after the kill were read from the cluster, not all prefetched before it (the
    // other test of this file makes no range requests: it pulls).
    let at_kill = requests_at_kill.unwrap();
    let total = zrecord::diagnostics::remote_stats().requests;
    eprintln!(
        "range requests through node 0: {at_kill} before node 1 was killed, {} after",
        total - at_kill
    );
    assert!(
        total > at_kill,
        "no range request after the kill ({at_kill} before it)"
    );
    assert!(cluster.is_running(0) && cluster.is_running(2));
}

/// How one race between two pushes ended.
#[derive(Debug, Default)]
struct Tally {
    /// One push committed, the other got `PublishConflict`.
    one_conflict: u32,
    /// Both committed, in different slots: they did not overlap.
    serial: u32,
    /// Both reported the same slot: one commit was overwritten unnoticed.
    lost_update: u32,
}

#[test]
fn conditional_creates_and_racing_pushes() {
    let cluster = garage::Garage::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    // The probe: two creates of one key (object_store's PutMode::Create sends
    // `If-None-Match: *`).
    let store = cluster.object_store(0);
    let key = ObjectPath::from("probe/created-twice");
    let create = |bytes: &'static [u8]| {
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        rt.block_on(store.put_opts(&key, PutPayload::from_static(bytes), opts))
    };
    create(b"first").unwrap();
    let second = create(b"second");
    let honoured = match &second {
        Ok(_) => false,
        Err(
            object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. },
        ) => true,
        Err(e) => panic!("a second conditional create failed otherwise: {e}"),
    };
    let now = rt.block_on(async { store.get(&key).await.unwrap().bytes().await.unwrap() });
    if honoured {
        assert_eq!(now.as_ref(), b"first");
    } else {
        // What Garage 2.5.0 does: the second create succeeds and replaces the object.
        assert_eq!(
            now.as_ref(),
            b"second",
            "the create was ignored but not applied"
        );
    }
    eprintln!("garage honours If-None-Match: * on PutObject: {honoured}");

    // A push probes the store the same way: refused where creates are ignored, unless the
    // caller says it is the single writer.
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    write(&a, 0x00, 300);
    write(&b, 0x5a, 310);
    let url = cluster.url("probed");
    let opts = TransferOptions::default().store(cluster.options(0));
    match push(&a, &url, &opts) {
        Err(Error::ConditionalCreateIgnored { url: u, reason }) => {
            assert!(
                !honoured,
                "refused on a store that honours creates: {reason}"
            );
            assert_eq!(u, url);
            assert!(
                reason.contains("ignores conditional creates")
                    && reason.contains("--single-writer"),
                "{reason}"
            );
        }
        Ok(r) => assert!(honoured, "published to a store that ignores creates: {r:?}"),
        Err(e) => panic!("push failed otherwise: {e}"),
    }
    if !honoured {
        // Refused before anything was committed.
        let pulled = pull(&url, tmp.path().join("nothing"), &opts);
        assert!(
            matches!(pulled, Err(Error::NotADataset { .. })),
            "a refused push committed: {pulled:?}"
        );
    }
    let single = push(&a, &url, &opts.clone().single_writer(true)).unwrap();
    assert_eq!(single.slot, 1);

    // Two different datasets pushed at once to one prefix, through two nodes, each claiming
    // to be the single writer: what the store does with the race.
    let expected_a = all_records(&Dataset::open(&a).unwrap());
    let expected_b = all_records(&Dataset::open(&b).unwrap());
    let mut tally = Tally::default();
    for round in 0..6 {
        let url = cluster.url(&format!("race/{round}"));
        let barrier = Arc::new(Barrier::new(2));
        let racer = |dir: &Path, node: usize| {
            let (dir, url, barrier) = (dir.to_path_buf(), url.clone(), Arc::clone(&barrier));
            let opts = TransferOptions::default()
                .store(cluster.options(node))
                .single_writer(true);
            std::thread::spawn(move || {
                barrier.wait();
                push(&dir, &url, &opts)
            })
        };
        let (ta, tb) = (racer(&a, 0), racer(&b, 1));
        let (ra, rb) = (ta.join().unwrap(), tb.join().unwrap());
        let is_conflict = |r: &Result<TransferReport, Error>| match r {
            Ok(_) => false,
            Err(Error::PublishConflict { .. }) => true,
            Err(e) => panic!("round {round}: a racing push failed otherwise: {e}"),
        };
        let (ca, cb) = (is_conflict(&ra), is_conflict(&rb));
        assert!(
            !(ca && cb),
            "round {round}: both pushes lost: {ra:?} {rb:?}"
        );
        // What the prefix holds now is one whole dataset, the committed push's (the later
        // slot's when both committed). Pulled, not read by URL, so that the other test's count
        // of range requests is its own.
        let copy = tmp.path().join(format!("pulled-{round}"));
        pull(
            &url,
            &copy,
            &TransferOptions::default().store(cluster.options(2)),
        )
        .unwrap();
        let got = all_records(&Dataset::open(&copy).unwrap());
        let holds_a = got == expected_a;
        assert!(
            holds_a || got == expected_b,
            "round {round}: the prefix holds neither dataset"
        );
        match (&ra, &rb) {
            (Ok(_), Err(e)) | (Err(e), Ok(_)) => {
                tally.one_conflict += 1;
                assert_eq!(holds_a, ra.is_ok(), "round {round}: {e}");
                if !honoured {
                    // Found by reading the slot back after the (unconditional) create.
                    assert!(e.to_string().contains("overwritten"), "round {round}: {e}");
                }
            }
            (Ok(x), Ok(y)) if x.slot == y.slot => {
                assert!(
                    !honoured,
                    "round {round}: both pushes committed slot {} on a store that honours \
                     conditional creates",
                    x.slot
                );
                tally.lost_update += 1;
            }
            (Ok(x), Ok(y)) => {
                tally.serial += 1;
                assert_eq!(holds_a, x.slot > y.slot, "round {round}: {x:?} {y:?}");
            }
            (Err(_), Err(_)) => unreachable!(),
        }
    }
    eprintln!("racing pushes on garage: {tally:?}");
}
