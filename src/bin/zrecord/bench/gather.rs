//! `zrecord bench gather`: random batches through `Dataset::gather`, one or more threads,
//! warm or cold, with the plain loops (`--pread-loop`, `--inflate-loop`) it is measured against.

use super::{cpu_seconds, evict, Rng};
use crate::args::BackendArg;
use crate::Res;
use clap::Args;
use std::path::PathBuf;
use std::time::Instant;
use zrecord::{Backend, Dataset, ReadConfig};

#[derive(Args, Clone)]
pub struct GatherArgs {
    /// The dataset directory, or its URL on an object store (s3://bucket/prefix, gs://bucket/prefix, az://container/prefix).
    pub(super) dir: PathBuf,
    /// Records per batch.
    #[arg(long, default_value_t = 256)]
    pub(super) batch: usize,
    /// Number of batches (per thread).
    #[arg(long, default_value_t = 2000)]
    pub(super) batches: usize,
    /// The I/O backend.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub(super) backend: BackendArg,
    /// Threads issuing batches concurrently.
    #[arg(long, default_value_t = 1)]
    pub(super) threads: usize,
    /// Drop the dataset's files from the page cache first (cold reads).
    #[arg(long)]
    pub(super) evict: bool,
    /// Read with O_DIRECT.
    #[arg(long)]
    pub(super) direct: bool,
    /// Skip checksum verification (bytes are still consumed by a sum, as with `--consume`).
    #[arg(long)]
    pub(super) no_verify: bool,
    /// Sum every byte of each batch after its gather, timed, with verification on too: a
    /// reader of the records. Against `--no-verify`, the difference is the checksums alone.
    #[arg(long)]
    pub(super) consume: bool,
    /// Seed of the random indices.
    #[arg(long, default_value_t = 1)]
    pub(super) seed: u64,
    /// Each batch is `--batch` consecutive records from a random first one (a sequential
    /// scan), instead of `--batch` random records.
    #[arg(long)]
    pub(super) sequential: bool,
    /// Lay each field of every batch out end to end in memory of its own, as the Python
    /// package's batches are (`ReadConfig::with_columns`): one copy per record, in the pass
    /// that checks it, instead of views of the chunk mappings.
    #[arg(long)]
    pub(super) columns: bool,
    /// Instead of zrecord's engine, run the baseline: a plain loop of one `pread` per record
    /// (first field) into a reused buffer, summing its bytes. Same indices, same consumption.
    #[arg(long)]
    pub(super) pread_loop: bool,
    /// Instead of zrecord's engine, run the decompression baseline: the first field's stored
    /// bytes of each batch are read first (not timed), then inflated by libdeflate in a plain
    /// loop on this thread (timed). What libdeflate alone does with the same records.
    #[arg(long, conflicts_with = "pread_loop")]
    pub(super) inflate_loop: bool,
    /// For a dataset on an object store, instead of zrecord's engine, run the store's baseline:
    /// one range GET per record (first field), `--requests` at once, straight through the
    /// object-store client (no coalescing, checksums or decoding). Same indices.
    #[arg(long, conflicts_with_all = ["pread_loop", "inflate_loop"])]
    pub(super) range_get_loop: bool,
    /// Range requests in flight per batch, for a dataset on an object store (zrecord's engine
    /// and the baseline alike).
    #[arg(long, default_value_t = 32)]
    pub(super) requests: usize,
    /// Bytes of whole chunks cached locally for a dataset on an object store (default: no
    /// cache).
    #[arg(long, value_parser = crate::args::parse_size)]
    pub(super) cache: Option<u64>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub(super) json: bool,
}

pub(super) struct GatherStats {
    pub(super) records_per_s: f64,
    pub(super) json: serde_json::Value,
}

pub(super) fn gather(a: &GatherArgs) -> Res {
    let stats = run_gather(a)?;
    if a.json {
        println!("{}", stats.json);
    } else {
        let j = &stats.json;
        println!(
            "{:.0} records/s, {:.1} MB/s, batch p50 {:.3} ms p99 {:.3} ms ({} backend, {} threads)",
            stats.records_per_s,
            j["bytes_per_s"].as_f64().unwrap_or(0.0) / 1e6,
            j["p50_batch_ms"].as_f64().unwrap_or(0.0),
            j["p99_batch_ms"].as_f64().unwrap_or(0.0),
            j["backend"].as_str().unwrap_or("?"),
            j["threads"]
        );
    }
    Ok(())
}

fn run_gather(a: &GatherArgs) -> Result<GatherStats, Box<dyn std::error::Error>> {
    let backend = Backend::from(a.backend);
    let opts = ReadConfig::default()
        .with_backend(backend)
        .with_direct_io(a.direct)
        .with_verify_checksums(!a.no_verify)
        .with_columns(a.columns);
    let remote = zrecord::remote::RemoteConfig::default()
        .requests_in_flight(a.requests)
        .cache_bytes(a.cache.unwrap_or(0));
    if a.evict {
        evict(&a.dir)?;
    }
    let ds = std::sync::Arc::new(super::open_dataset(&a.dir, opts, remote)?);
    gather_on(&ds, a)
}

/// Raw gathers on `a.threads` threads over an open dataset (the loader bench shares its own).
pub(super) fn gather_on(
    ds: &std::sync::Arc<Dataset>,
    a: &GatherArgs,
) -> Result<GatherStats, Box<dyn std::error::Error>> {
    let remote_before = zrecord::diagnostics::remote_stats();
    let n = ds.len();
    if n == 0 || a.batch == 0 {
        return Err("nothing to read: empty dataset or --batch 0".into());
    }
    let start = Instant::now();
    let cpu = cpu_seconds();
    let handles: Vec<_> = (0..a.threads.max(1))
        .map(|t| {
            let ds = std::sync::Arc::clone(ds);
            let job = ThreadJob {
                batch: a.batch,
                batches: a.batches,
                consume: a.consume || a.no_verify,
                pread_loop: a.pread_loop,
                inflate_loop: a.inflate_loop,
                range_get_loop: a.range_get_loop.then_some(a.requests),
                sequential: a.sequential,
                seed: a.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (t as u64 + 1),
            };
            std::thread::spawn(move || bench_thread(&ds, &job))
        })
        .collect();
    let mut lat = Vec::new();
    let (mut records, mut bytes, mut sink) = (0u64, 0u64, 0u64);
    for h in handles {
        let (l, r, b, s) = h.join().map_err(|_| "a bench thread panicked")??;
        lat.extend(l);
        records += r;
        bytes += b;
        sink ^= s;
    }
    let mut secs = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu;
    if a.inflate_loop {
        // Only the inflating is timed: the threads' timed seconds, run side by side.
        secs = lat.iter().sum::<f64>() / 1e3 / a.threads.max(1) as f64;
    }
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| -> f64 {
        let i = ((lat.len() as f64 - 1.0) * p).round() as usize;
        lat.get(i).copied().unwrap_or(0.0)
    };
    let effective = if a.pread_loop {
        "pread-loop"
    } else if a.inflate_loop {
        "inflate-loop"
    } else if a.range_get_loop {
        "range-get-loop"
    } else {
        ds.backend_name()
    };
    let out = serde_json::json!({
        "records_per_s": records as f64 / secs,
        "bytes_per_s": bytes as f64 / secs,
        "p50_batch_ms": pct(0.5),
        "p99_batch_ms": pct(0.99),
        "backend": effective,
        "io_uring_available": zrecord::uring_available(),
        "batch": a.batch,
        "batches": lat.len(),
        "threads": a.threads.max(1),
        "records": records,
        "bytes": bytes,
        "seconds": secs,
        "cpu_seconds": cpu,
        "verify": !a.no_verify,
        "consume": a.consume || a.no_verify,
        "columns": a.columns,
        "direct": a.direct,
        "evicted": a.evict,
        "remote": remote_json(&remote_before),
        "sink": sink & 1,
    });
    Ok(GatherStats {
        records_per_s: records as f64 / secs,
        json: out,
    })
}

/// What the remote backend did since `before`: requests, bytes fetched and asked for, and
/// their ratio (bytes transferred per useful byte); `null` if it did nothing.
pub(super) fn remote_json(before: &zrecord::diagnostics::RemoteStats) -> serde_json::Value {
    let now = zrecord::diagnostics::remote_stats();
    let requests = now.requests - before.requests;
    if requests == 0 {
        return serde_json::Value::Null;
    }
    let fetched = now.bytes_fetched - before.bytes_fetched;
    let asked = now.bytes_requested - before.bytes_requested;
    serde_json::json!({
        "requests": requests,
        "bytes_fetched": fetched,
        "bytes_requested": asked,
        "fetched_per_requested": fetched as f64 / asked.max(1) as f64,
        "lookahead_issued": now.lookahead_issued - before.lookahead_issued,
        "lookahead_hits": now.lookahead_hits - before.lookahead_hits,
    })
}

struct ThreadJob {
    batch: usize,
    batches: usize,
    /// Sum every byte of each gathered batch.
    consume: bool,
    pread_loop: bool,
    inflate_loop: bool,
    /// The remote baseline, with its requests in flight.
    range_get_loop: Option<usize>,
    /// Batches of consecutive records.
    sequential: bool,
    seed: u64,
}

/// One bench thread: latencies, records, bytes and a checksum of what it consumed.
fn bench_thread(
    ds: &Dataset,
    job: &ThreadJob,
) -> Result<(Vec<f64>, u64, u64, u64), zrecord::Error> {
    let n = ds.len();
    let mut rng = Rng(job.seed | 1);
    let mut idx = vec![0u64; job.batch];
    let mut lat = Vec::with_capacity(job.batches);
    let (mut records, mut bytes, mut sink) = (0u64, 0u64, 0u64);
    let mut files: std::collections::HashMap<PathBuf, std::fs::File> =
        std::collections::HashMap::new();
    let mut buf = Vec::new();
    let mut stored: Vec<(zrecord::RecordLocation, Vec<u8>)> = Vec::new();
    let mut inflater = libdeflater::Decompressor::new();
    // The zstd twin of the inflate loop: one context, the dataset's dictionaries prepared once.
    let mut unzstd =
        zrecord::diagnostics::ZstdDecoder::new().ok_or_else(|| zrecord::Error::InvalidConfig {
            reason: "zstd could not allocate a context".into(),
        })?;
    let mut dictionaries: std::collections::HashMap<
        u8,
        std::sync::Arc<zrecord::diagnostics::Dictionary>,
    > = std::collections::HashMap::new();
    for _ in 0..job.batches {
        match job.sequential {
            true => {
                let first = rng.next() % n;
                for (k, i) in idx.iter_mut().enumerate() {
                    *i = (first + k as u64) % n;
                }
            }
            false => {
                for i in idx.iter_mut() {
                    *i = rng.next() % n;
                }
            }
        }
        if job.inflate_loop {
            // Untimed: the stored bytes of this batch, as the engine would have them in memory.
            let snap = ds.snapshot();
            stored.clear();
            for &i in &idx {
                let loc = snap.locate(0, i)?;
                let mut b = Vec::new();
                if read_stored(&mut files, &loc, &mut b)? {
                    if let Some(d) = loc.dictionary {
                        if let std::collections::hash_map::Entry::Vacant(v) = dictionaries.entry(d)
                        {
                            let field = snap.schema().fields.first().map(|f| f.name.clone());
                            let path = ds
                                .path()
                                .join(format!("{}.{d}.zdict", field.unwrap_or_default()));
                            let bytes = std::fs::read(&path).map_err(|e| {
                                zrecord::Error::InvalidConfig {
                                    reason: format!("{}: {e}", path.display()),
                                }
                            })?;
                            let dict = zrecord::diagnostics::Dictionary::new(d, bytes)
                                .map_err(|reason| zrecord::Error::InvalidConfig { reason })?;
                            v.insert(dict);
                        }
                    }
                    stored.push((loc, b));
                }
            }
            let t0 = Instant::now();
            for (loc, b) in &stored {
                let logical = loc.logical_len as usize;
                let failed = |e: String| zrecord::Error::InvalidConfig {
                    reason: format!("decode: {e}"),
                };
                buf.resize(logical, 0);
                let n = match loc.codec {
                    zrecord::Codec::Deflate => inflater
                        .deflate_decompress(b, &mut buf)
                        .map_err(|e| failed(format!("{e:?}")))?,
                    zrecord::Codec::Zstd { .. } | zrecord::Codec::ZstdDict { .. } => {
                        let dict = loc.dictionary.and_then(|d| dictionaries.get(&d));
                        unzstd
                            .decode(dict.map(|d| &**d), b, &mut buf)
                            .map_err(failed)?;
                        logical
                    }
                    _ => 0,
                };
                sink = sink.wrapping_add(n as u64);
                bytes += logical as u64;
            }
            records += idx.len() as u64;
            lat.push(t0.elapsed().as_secs_f64() * 1e3);
            continue;
        }
        let t0 = Instant::now();
        if let Some(requests) = job.range_get_loop {
            bytes += zrecord::diagnostics::range_get_loop(ds, &[idx.clone()], 0, requests)?;
            records += idx.len() as u64;
        } else if job.pread_loop {
            let snap = ds.snapshot();
            for &i in &idx {
                let loc = snap.locate(0, i)?;
                if !read_stored(&mut files, &loc, &mut buf)? {
                    continue;
                }
                sink = sink.wrapping_add(buf.iter().map(|&x| u64::from(x)).sum::<u64>());
                bytes += buf.len() as u64;
            }
            records += idx.len() as u64;
        } else {
            let b = ds.gather_blocking(&idx)?;
            if job.consume {
                sink = sink.wrapping_add(consume(&b));
            }
            records += b.len() as u64;
            bytes += b.total_bytes() as u64;
        }
        lat.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    Ok((lat, records, bytes, sink))
}

/// The baselines' read: one `pread` of a value's stored bytes into `buf` (resized to fit).
/// False for an absent value.
fn read_stored(
    files: &mut std::collections::HashMap<PathBuf, std::fs::File>,
    loc: &zrecord::RecordLocation,
    buf: &mut Vec<u8>,
) -> Result<bool, zrecord::Error> {
    let Some(path) = &loc.chunk else {
        return Ok(false);
    };
    let file = open_cached(files, path)?;
    buf.resize(loc.stored_len as usize, 0);
    std::os::unix::fs::FileExt::read_exact_at(file, buf, loc.offset).map_err(|e| {
        zrecord::Error::Io {
            path: path.clone(),
            op: "read",
            source: e,
        }
    })?;
    Ok(true)
}

/// The baselines' open files, one descriptor per chunk.
fn open_cached<'a>(
    files: &'a mut std::collections::HashMap<PathBuf, std::fs::File>,
    path: &PathBuf,
) -> Result<&'a std::fs::File, zrecord::Error> {
    if !files.contains_key(path) {
        let f = std::fs::File::open(path).map_err(|e| zrecord::Error::Io {
            path: path.clone(),
            op: "open",
            source: e,
        })?;
        files.insert(path.clone(), f);
    }
    files.get(path).ok_or_else(|| zrecord::Error::Io {
        path: path.clone(),
        op: "open",
        source: std::io::Error::other("vanished from the cache"),
    })
}

/// Touches every byte of a batch (when checksums, which already do, are off): a vectorised sum.
/// Touches every byte of the batch (what verification would have read), as a wrapping sum of
/// 8-byte words: a byte-at-a-time widening sum ran at ~1.7 GB/s, slower than the CRC it
/// stands in for.
fn consume(b: &zrecord::Batch) -> u64 {
    let mut s = 0u64;
    for r in 0..b.len() {
        let mut f = 0;
        while let Some(v) = b.get(r, f) {
            let (words, tail) = v.as_chunks::<8>();
            s = words
                .iter()
                .fold(s, |acc, w| acc.wrapping_add(u64::from_le_bytes(*w)));
            s = tail
                .iter()
                .fold(s, |acc, &x| acc.wrapping_add(u64::from(x)));
            f += 1;
        }
    }
    s
}
