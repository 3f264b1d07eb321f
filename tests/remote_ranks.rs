//! Four OS processes, each opening the same `s3://` dataset on one S3 server (s3s-fs) and
//! running one epoch of a `Loader` with `ShardConfig::new(4, rank)`, with no coordinator and one
//! shared cache directory, together deliver every index exactly once, each with its bytes.
//!
//! The ranks are this test binary run again with `ZRECORD_RANK` set: `rank_child` is the rank
//! when it is set and does nothing otherwise.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "support/s3.rs"]
mod s3;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zrecord::pipeline::{DatasetSource, Loader, ShardConfig};
use zrecord::remote::{push, RemoteConfig, TransferOptions};
use zrecord::{Codec, DType, Field, ReadConfig, Schema, Writer, WriterConfig};

const N: u64 = 4000;
const RANKS: u64 = 4;

/// The child's settings, from the parent.
const RANK: &str = "ZRECORD_RANK";
const URL: &str = "ZRECORD_RANK_URL";
const ENDPOINT: &str = "ZRECORD_RANK_ENDPOINT";
const CACHE: &str = "ZRECORD_RANK_CACHE";
const OUT: &str = "ZRECORD_RANK_OUT";

fn record(i: u64) -> Vec<u8> {
    (0..(i * 53 % 900) as usize)
        .map(|j| (i as u8).wrapping_mul(29).wrapping_add((j % 11) as u8))
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

/// One rank: an epoch of its shard, every record checked; writes its pid, then the indices it
/// was given, one a line, to the `OUT` file (complete or absent: written aside, then renamed).
#[test]
fn rank_child() {
    let Ok(rank) = std::env::var(RANK) else {
        return;
    };
    let rank: u64 = rank.parse().unwrap();
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} is not set"));
    let remote = RemoteConfig::default()
        .store(s3::options_for(&var(ENDPOINT)))
        .cache_dir(var(CACHE));
    let ds = zrecord::remote::open(&var(URL), ReadConfig::default(), remote).unwrap();
    assert_eq!(ds.backend_name(), "remote");
    assert_eq!(ds.len(), N);
    let src = Arc::new(DatasetSource::new(&ds));
    let mut loader = Loader::builder(src)
        .seed(17)
        .batch_size(50)
        .shard(ShardConfig::new(RANKS, rank))
        .build()
        .unwrap();
    let mut lines = vec![std::process::id().to_string()];
    while let Some(b) = futures::executor::block_on(loader.next()) {
        let b = b.unwrap();
        for (r, &i) in b.data.indices().iter().enumerate() {
            assert_eq!(
                b.data.get(r, 0).unwrap(),
                record(i).as_slice(),
                "record {i}"
            );
            assert_eq!(
                b.data.get(r, 1).unwrap(),
                record(i + 1).as_slice(),
                "record {i}"
            );
            lines.push(i.to_string());
        }
    }
    let out = PathBuf::from(var(OUT));
    let tmp = out.with_extension("tmp");
    std::fs::write(&tmp, lines.join("\n")).unwrap();
    std::fs::rename(&tmp, &out).unwrap();
}

/// Waits for `child` at most until `deadline`; kills it then.
fn wait(child: &mut Child, deadline: Instant, what: &str, log: &Path) {
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(
                status.success(),
                "{what} failed with {status}; its output:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
            return;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what} did not finish in time; its output:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn four_processes_deliver_every_index_once() {
    let server = s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("ds");
    write(&local);
    let url = server.url("sets/ranks");
    push(
        &local,
        &url,
        &TransferOptions::default().store(server.options()),
    )
    .unwrap();

    let exe = std::env::current_exe().unwrap();
    let cache = tmp.path().join("shared-cache");
    let mut children: Vec<(Child, PathBuf, PathBuf)> = (0..RANKS)
        .map(|rank| {
            let out = tmp.path().join(format!("rank{rank}.txt"));
            let log = tmp.path().join(format!("rank{rank}.log"));
            let file = std::fs::File::create(&log).unwrap();
            let child = Command::new(&exe)
                .args(["rank_child", "--exact", "--nocapture", "--test-threads=1"])
                .env(RANK, rank.to_string())
                .env(URL, &url)
                .env(ENDPOINT, &server.endpoint)
                .env(CACHE, &cache)
                .env(OUT, &out)
                .stdin(Stdio::null())
                .stdout(Stdio::from(file.try_clone().unwrap()))
                .stderr(Stdio::from(file))
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start rank {rank} ({}): {e}", exe.display()));
            (child, out, log)
        })
        .collect();
    // A hang guard, not a timing claim.
    let deadline = Instant::now() + Duration::from_secs(120);
    for (rank, (child, _, log)) in children.iter_mut().enumerate() {
        wait(child, deadline, &format!("rank {rank}"), log);
    }

    let mut seen = vec![0u32; N as usize];
    let mut pids = Vec::new();
    for (rank, (_, out, _)) in children.iter().enumerate() {
        let text = std::fs::read_to_string(out)
            .unwrap_or_else(|e| panic!("rank {rank} wrote no indices ({e}): did it run?"));
        let mut lines = text.lines();
        pids.push(lines.next().unwrap().parse::<u32>().unwrap());
        let indices: Vec<u64> = lines.map(|l| l.parse().unwrap()).collect();
        // Interleaved shards of one epoch: rank k has the positions k, k + 4, …
        let want = (N - rank as u64).div_ceil(RANKS);
        assert_eq!(indices.len() as u64, want, "rank {rank}");
        for i in indices {
            seen[i as usize] += 1;
        }
    }
    pids.sort_unstable();
    pids.dedup();
    assert_eq!(pids.len(), RANKS as usize, "the ranks were not 4 processes");
    assert!(!pids.contains(&std::process::id()));
    let wrong: Vec<(usize, u32)> = seen
        .iter()
        .enumerate()
        .filter(|(_, &n)| n != 1)
        .map(|(i, &n)| (i, n))
        .take(10)
        .collect();
    assert!(wrong.is_empty(), "(index, times delivered): {wrong:?}");
}
