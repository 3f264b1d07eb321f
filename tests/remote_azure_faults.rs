//! Through a fault-injecting proxy in front of Azurite, reads of an `az://` dataset stay
//! byte-identical to the local dataset while 503s, connection resets and cut bodies are retried,
//! and with retries off each batch is exact or a typed `Error::Remote` naming the object and the
//! range: never other bytes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/azurite.rs"]
mod azurite;

use std::path::Path;
use std::time::Duration;

use zrecord::remote::{push, RemoteConfig, StoreOptions, TransferOptions};
use zrecord::{Codec, DType, Dataset, Error, Field, ReadConfig, Schema, Writer, WriterConfig};
use zrecord_testing::{FaultConfig, FaultProxy};

const N: u64 = 2000;

fn record(i: u64) -> Vec<u8> {
    (0..(i * 37 % 700) as usize)
        .map(|j| (i as u8).wrapping_mul(13).wrapping_add((j % 7) as u8))
        .collect()
}

fn write(dir: &Path) {
    let schema = Schema::new()
        .field(Field::new("x", DType::U8).codec(Codec::Deflate))
        .field(Field::new("raw", DType::U8))
        .chunk_size_bytes(128 << 10);
    let mut w = Writer::create(dir, &schema, WriterConfig::default()).unwrap();
    for i in 0..N {
        w.append(&[record(i), record(i + 1)]).unwrap();
    }
    w.commit().unwrap();
}

/// Client options through `proxy`: `retries` retries from a 2 ms backoff.
fn through(proxy: &FaultProxy, retries: u32) -> StoreOptions {
    azurite::options_for(&proxy.endpoint())
        .retries(retries)
        .backoff(Duration::from_millis(2))
        .timeout(Duration::from_secs(10))
}

fn open(url: &str, store: StoreOptions, cache: &Path) -> zrecord::Result<Dataset> {
    zrecord::remote::open(
        url,
        ReadConfig::default(),
        RemoteConfig::default().store(store).cache_dir(cache),
    )
}

fn records(ds: &Dataset, indices: &[u64]) -> zrecord::Result<Vec<Vec<Vec<u8>>>> {
    Ok(ds
        .gather_blocking(indices)?
        .into_records()
        .into_iter()
        .map(|r| r.into_iter().map(|b| b.to_vec()).collect())
        .collect())
}

fn batch(x: &mut u64, n: usize) -> Vec<u64> {
    (0..n)
        .map(|_| {
            *x ^= *x << 13;
            *x ^= *x >> 7;
            *x ^= *x << 17;
            *x % N
        })
        .collect()
}

#[test]
fn faults_are_retried_or_typed_errors_never_other_bytes() {
    let server = azurite::Azurite::start();
    let tmp = tempfile::tempdir().unwrap();
    write(&tmp.path().join("ds"));
    let url = server.url("sets/faults");
    push(
        tmp.path().join("ds"),
        &url,
        &TransferOptions::default().store(server.options()),
    )
    .unwrap();
    let local = Dataset::open(tmp.path().join("ds")).unwrap();
    let faults = FaultConfig::default()
        .unavailable(0.3)
        .reset(0.1)
        .latency(Duration::from_millis(1))
        .seed(11);
    let proxy = FaultProxy::start(&server.endpoint, faults).unwrap();
    let cache = tmp.path().join("cache");

    // Retried: opening and every batch go through the 503s, resets and (after the open) cut
    // bodies, and read exactly the local records.
    let remote = open(&url, through(&proxy, 10), &cache).unwrap();
    assert_eq!(remote.len(), N);
    proxy.set_config(faults.truncate(0.1));
    let mut x = 0x5eed_u64;
    for size in [1usize, 64, 300, 1000, 1000] {
        let indices = batch(&mut x, size);
        assert_eq!(
            records(&remote, &indices).unwrap(),
            records(&local, &indices).unwrap(),
            "batch of {size}"
        );
    }
    let c = proxy.counts();
    assert!(
        c.unavailable > 0 && c.resets > 0 && c.truncated > 0,
        "not every fault happened: {c:?}"
    );

    // No retries, resets and cut bodies: each batch exact or an error naming a chunk and a range.
    proxy.set_config(FaultConfig::default().reset(0.2).truncate(0.3).seed(5));
    let remote = open(&url, through(&proxy, 0), &cache).or_else(|_| {
        // The open itself may meet a fault; faults off for it, on again for the reads.
        proxy.set_config(FaultConfig::default());
        let r = open(&url, through(&proxy, 0), &cache);
        proxy.set_config(FaultConfig::default().reset(0.2).truncate(0.3).seed(5));
        r
    });
    let remote = remote.unwrap();
    let (mut exact, mut failed) = (0, 0);
    for _ in 0..12 {
        let indices = batch(&mut x, 200);
        match records(&remote, &indices) {
            Ok(got) => {
                assert_eq!(got, records(&local, &indices).unwrap());
                exact += 1;
            }
            Err(e @ Error::Remote { .. }) => {
                let Error::Remote { object, range, .. } = &e else {
                    unreachable!()
                };
                assert!(
                    object.starts_with(&format!("{url}/data/chunk/")),
                    "the error names {object}, not a chunk of {url}: {e}"
                );
                assert!(range.as_ref().is_some_and(|r| r.start < r.end), "{e}");
                failed += 1;
            }
            Err(e) => panic!("expected exact records or Error::Remote, got {e:?}"),
        }
    }
    assert!(failed > 0, "no batch met a fault: {:?}", proxy.counts());
    assert_eq!(exact + failed, 12);

    // Faults off: the same handle reads exact again.
    proxy.set_config(FaultConfig::default());
    let all: Vec<u64> = (0..N).collect();
    assert_eq!(
        records(&remote, &all).unwrap(),
        records(&local, &all).unwrap()
    );
}
