//! `zrecord bench`: throughput measurements (make a synthetic dataset, gather, loader).

use crate::args::{parse_size, parse_size_usize, BackendArg, CodecArg};
use crate::Res;
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};
use std::time::Instant;
use zrecord::{Backend, Codec, DType, Dataset, Field, ReadConfig, Schema, Writer, WriterConfig};

#[derive(Subcommand)]
pub enum BenchCmd {
    /// Generate a synthetic dataset of `--records` records of `--record-bytes` bytes.
    Make(MakeArgs),
    /// Random batches over an existing dataset.
    Gather(GatherArgs),
    /// The full loader (shuffled sampler → shard 1/1 → optional bucket → batch → prefetch) over
    /// an existing dataset, compared with raw gathers on as many threads as it has workers.
    Loader(LoaderArgs),
}

#[derive(Args)]
pub struct LoaderArgs {
    /// The dataset directory, or its URL on an object store (s3://bucket/prefix).
    dir: PathBuf,
    /// Prefetch workers.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Records per batch.
    #[arg(long, default_value_t = 256)]
    batch: u64,
    /// Batches to consume.
    #[arg(long, default_value_t = 2000)]
    batches: usize,
    /// Bucket buffer size (records); bucketing is off without it.
    #[arg(long)]
    bucket_buffer: Option<u64>,
    /// Bucket pack size (records).
    #[arg(long, default_value_t = 256)]
    bucket_pack: u64,
    /// The I/O backend.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    backend: BackendArg,
    /// Skip the raw-gather comparison run.
    #[arg(long)]
    no_compare: bool,
    /// Batches each worker announces ahead (lookahead: the read window starts a local
    /// dataset's cold reads early; given, it also turns on range requests ahead for a dataset
    /// on an object store, 64 MiB of them). Default: the library's (`PrefetchConfig`).
    #[arg(long)]
    lookahead: Option<usize>,
    /// Range requests in flight per batch, for a dataset on an object store.
    #[arg(long, default_value_t = 32)]
    requests: usize,
    /// Bytes of whole chunks cached locally for a dataset on an object store (default: no
    /// cache).
    #[arg(long, value_parser = crate::args::parse_size)]
    cache: Option<u64>,
    /// Batches each worker's queue holds.
    #[arg(long, default_value_t = 2)]
    worker_queue: usize,
    /// Gathers each worker keeps in flight (above 1: `Source::gather_async`).
    #[arg(long, default_value_t = 1)]
    gathers_in_flight: usize,
    /// Merged batches waiting for the consumer.
    #[arg(long, default_value_t = 2)]
    consumer_queue: usize,
    /// Timed rounds, each a loader run and a raw-gather run (alternating which goes first,
    /// after one untimed raw-gather warm-up); figures are medians over the rounds.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Drop the dataset's files from the page cache before the loader run, and again before
    /// the raw-gather run (cold reads for both).
    #[arg(long)]
    evict: bool,
    /// Read with O_DIRECT (the loader and the raw gathers alike).
    #[arg(long)]
    direct: bool,
    /// Seed of the loader's shuffle and of the raw gathers' indices (a fresh seed reads
    /// records no earlier run read: no cache below the page cache serves them).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct MakeArgs {
    /// Where to create the dataset (must not exist).
    dir: PathBuf,
    /// Number of records.
    #[arg(long)]
    records: u64,
    /// Bytes per record (e.g. 1024, 4K, 64KiB).
    #[arg(long, value_name = "BYTES", value_parser = parse_size_usize)]
    record_bytes: usize,
    /// Codec of the records.
    #[arg(long, value_enum, default_value_t = CodecArg::Raw)]
    codec: CodecArg,
    /// What the records hold, from fixed seeds (the same bytes on every machine). Default:
    /// random with `--codec raw`, nibbles with `--codec deflate`.
    #[arg(long, value_enum)]
    content: Option<Content>,
    /// Chunk size (e.g. 268435456, 256M, 1GiB).
    #[arg(long, value_name = "BYTES", value_parser = parse_size, default_value = "256MiB")]
    chunk_bytes: u64,
    /// Append tasks of the writer (deflate, checksums and writes, each into its own chunk).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=16))]
    writers: u8,
}

/// What `bench make` writes into each record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Content {
    /// Random bytes: incompressible.
    Random,
    /// Every other 8-byte word a constant, the others random nibbles: about 3:1 with deflate,
    /// a literal-heavy stream that is slow to inflate.
    Nibbles,
    /// Words of a synthetic 4,096-word vocabulary with Zipf frequencies (s = 1.25), separated
    /// by spaces, commas, full stops and newlines: about 2.6:1 with deflate, like captions or
    /// token text.
    Text,
}

#[derive(Args, Clone)]
pub struct GatherArgs {
    /// The dataset directory, or its URL on an object store (s3://bucket/prefix).
    dir: PathBuf,
    /// Records per batch.
    #[arg(long, default_value_t = 256)]
    batch: usize,
    /// Number of batches (per thread).
    #[arg(long, default_value_t = 2000)]
    batches: usize,
    /// The I/O backend.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    backend: BackendArg,
    /// Threads issuing batches concurrently.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Drop the dataset's files from the page cache first (cold reads).
    #[arg(long)]
    evict: bool,
    /// Read with O_DIRECT.
    #[arg(long)]
    direct: bool,
    /// Skip checksum verification (bytes are still consumed by a sum, as with `--consume`).
    #[arg(long)]
    no_verify: bool,
    /// Sum every byte of each batch after its gather, timed, with verification on too: a
    /// reader of the records. Against `--no-verify`, the difference is the checksums alone.
    #[arg(long)]
    consume: bool,
    /// Seed of the random indices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Instead of zrecord's engine, run the baseline: a plain loop of one `pread` per record
    /// (first field) into a reused buffer, summing its bytes. Same indices, same consumption.
    #[arg(long)]
    pread_loop: bool,
    /// Instead of zrecord's engine, run the decompression baseline: the first field's stored
    /// bytes of each batch are read first (not timed), then inflated by libdeflate in a plain
    /// loop on this thread (timed). What libdeflate alone does with the same records.
    #[arg(long, conflicts_with = "pread_loop")]
    inflate_loop: bool,
    /// For a dataset on an object store, instead of zrecord's engine, run the store's baseline:
    /// one range GET per record (first field), `--requests` at once, straight through the
    /// object-store client (no coalescing, checksums or decoding). Same indices.
    #[arg(long, conflicts_with_all = ["pread_loop", "inflate_loop"])]
    range_get_loop: bool,
    /// Range requests in flight per batch, for a dataset on an object store (zrecord's engine
    /// and the baseline alike).
    #[arg(long, default_value_t = 32)]
    requests: usize,
    /// Bytes of whole chunks cached locally for a dataset on an object store (default: no
    /// cache).
    #[arg(long, value_parser = crate::args::parse_size)]
    cache: Option<u64>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs one bench subcommand.
pub fn run(cmd: &BenchCmd) -> Res {
    match cmd {
        BenchCmd::Make(a) => make(a),
        BenchCmd::Gather(a) => gather(a),
        BenchCmd::Loader(a) => loader(a),
    }
}

/// xorshift64. `benches/baselines/numpy_memmap.py` draws `bench gather`'s indices with the same
/// generator and seeding (`gather_on`, `bench_thread`): change them together.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

fn make(a: &MakeArgs) -> Res {
    let codec = Codec::from(a.codec);
    let content = a.content.unwrap_or(match codec {
        Codec::Raw => Content::Random,
        _ => Content::Nibbles,
    });
    let schema = Schema::new()
        .field(Field::new("data", DType::U8).codec(codec))
        .chunk_size_bytes(a.chunk_bytes);
    let t = Instant::now();
    let config = WriterConfig::default().num_writers(usize::from(a.writers));
    let mut w = Writer::create(&a.dir, &schema, config)?;
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let text = (content == Content::Text).then(|| Text::new(&mut Rng(0x7E47_5EED_0000_0001)));
    let mut rec = vec![0u8; a.record_bytes];
    for _ in 0..a.records {
        match (&text, content) {
            (Some(text), _) => text.fill(&mut rng, &mut rec),
            (None, Content::Nibbles) => {
                for (k, chunk) in rec.chunks_mut(8).enumerate() {
                    let x = rng.next();
                    // Half the words repeat, the others are random nibbles: about 3:1.
                    let bytes = match k % 2 {
                        0 => [0x41; 8],
                        _ => (x & 0x0f0f_0f0f_0f0f_0f0f).to_le_bytes(),
                    };
                    let n = chunk.len();
                    chunk.copy_from_slice(bytes.get(..n).unwrap_or_default());
                }
            }
            (None, _) => {
                for chunk in rec.chunks_mut(8) {
                    let bytes = rng.next().to_le_bytes();
                    let n = chunk.len();
                    chunk.copy_from_slice(bytes.get(..n).unwrap_or_default());
                }
            }
        }
        w.append(&[&rec])?;
    }
    w.commit()?;
    let s = t.elapsed().as_secs_f64();
    let total = a.records as f64 * a.record_bytes as f64;
    println!(
        "made {} records of {} bytes ({}, {:?} content, {} append tasks) in {:.2} s: {:.1} MB/s",
        a.records,
        a.record_bytes,
        codec,
        content,
        a.writers,
        s,
        total / s / 1e6
    );
    Ok(())
}

/// Synthetic text: a vocabulary of [`Text::WORDS`] words (2 to 12 letters drawn with English
/// letter frequencies, frequent words shorter), drawn with Zipf frequencies (weight of rank k
/// ∝ 1 / k^1.25, in integers, so every machine makes the same bytes), separated by spaces,
/// commas, full stops (the next word capitalised) and newlines.
struct Text {
    words: Vec<Vec<u8>>,
    /// Cumulative weights, by rank.
    cdf: Vec<u64>,
}

impl Text {
    const WORDS: usize = 4096;

    fn new(rng: &mut Rng) -> Text {
        const LETTERS: &[u8; 26] = b"etaoinshrdlcumwfgypbvkjxqz";
        const FREQ: [u64; 26] = [
            127, 91, 82, 75, 70, 67, 63, 61, 60, 43, 40, 28, 28, 24, 24, 22, 20, 20, 19, 15, 10, 8,
            2, 2, 1, 1,
        ];
        let letter_cdf: Vec<u64> = FREQ
            .iter()
            .scan(0, |acc, &f| {
                *acc += f;
                Some(*acc)
            })
            .collect();
        let letters_total = letter_cdf.last().copied().unwrap_or(1);
        let words = (0..Self::WORDS)
            .map(|rank| {
                let bits = u64::from(usize::BITS - rank.leading_zeros()).min(4);
                let len = 2 + rng.next() % 4 + rng.next() % (3 + bits);
                (0..len)
                    .map(|_| {
                        let x = rng.next() % letters_total;
                        let i = letter_cdf.partition_point(|&c| c <= x);
                        LETTERS.get(i).copied().unwrap_or(b'e')
                    })
                    .collect()
            })
            .collect();
        let cdf = (1..=Self::WORDS as u64)
            .scan(0u64, |acc, k| {
                // k^1.25 = k · (k^0.25), the fourth root in 1/256ths.
                let root = (k << 32).isqrt().isqrt();
                *acc += (1u64 << 56) / (k * root);
                Some(*acc)
            })
            .collect();
        Text { words, cdf }
    }

    /// Fills `rec` with text, the last word cut at the end.
    fn fill(&self, rng: &mut Rng, rec: &mut [u8]) {
        let total = self.cdf.last().copied().unwrap_or(1);
        let mut at = 0;
        let mut capital = true;
        while at < rec.len() {
            let x = rng.next() % total;
            let rank = self.cdf.partition_point(|&c| c <= x);
            let word = self.words.get(rank).map_or(&b"e"[..], Vec::as_slice);
            let start = at;
            at = put(rec, at, word);
            if capital {
                if let Some(c) = rec.get_mut(start) {
                    c.make_ascii_uppercase();
                }
            }
            let sep: &[u8] = match rng.next() % 100 {
                0..6 => b". ",
                6..14 => b", ",
                14 => b"\n",
                _ => b" ",
            };
            capital = sep == b". ";
            at = put(rec, at, sep);
        }
    }
}

/// Copies what fits of `bytes` into `rec` at `at`; returns where it stopped.
fn put(rec: &mut [u8], at: usize, bytes: &[u8]) -> usize {
    let n = bytes.len().min(rec.len().saturating_sub(at));
    if let (Some(dst), Some(src)) = (rec.get_mut(at..at + n), bytes.get(..n)) {
        dst.copy_from_slice(src);
    }
    at + n
}

struct GatherStats {
    records_per_s: f64,
    json: serde_json::Value,
}

fn gather(a: &GatherArgs) -> Res {
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
        .with_remote(
            zrecord::remote::RemoteConfig::default()
                .requests_in_flight(a.requests)
                .cache_bytes(a.cache.unwrap_or(0)),
        );
    if a.evict {
        evict(&a.dir)?;
    }
    let ds = std::sync::Arc::new(Dataset::open_with(&a.dir, opts)?);
    gather_on(&ds, a)
}

/// Raw gathers on `a.threads` threads over an open dataset (the loader bench shares its own).
fn gather_on(
    ds: &std::sync::Arc<Dataset>,
    a: &GatherArgs,
) -> Result<GatherStats, Box<dyn std::error::Error>> {
    let remote_before = zrecord::remote::stats();
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
fn remote_json(before: &zrecord::remote::RemoteStats) -> serde_json::Value {
    let now = zrecord::remote::stats();
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
    let mut stored: Vec<(zrecord::Codec, usize, Vec<u8>)> = Vec::new();
    let mut inflater = libdeflater::Decompressor::new();
    for _ in 0..job.batches {
        for i in idx.iter_mut() {
            *i = rng.next() % n;
        }
        if job.inflate_loop {
            // Untimed: the stored bytes of this batch, as the engine would have them in memory.
            let snap = ds.snapshot();
            stored.clear();
            for &i in &idx {
                let loc = snap.locate(0, i)?;
                let mut b = Vec::new();
                if read_stored(&mut files, &loc, &mut b)? {
                    stored.push((loc.codec, loc.logical_len as usize, b));
                }
            }
            let t0 = Instant::now();
            for (codec, logical, b) in &stored {
                if *codec == zrecord::Codec::Deflate {
                    buf.resize(*logical, 0);
                    let n = inflater.deflate_decompress(b, &mut buf).map_err(|e| {
                        zrecord::Error::InvalidConfig {
                            reason: format!("inflate: {e:?}"),
                        }
                    })?;
                    sink = sink.wrapping_add(n as u64);
                }
                bytes += *logical as u64;
            }
            records += idx.len() as u64;
            lat.push(t0.elapsed().as_secs_f64() * 1e3);
            continue;
        }
        let t0 = Instant::now();
        if let Some(requests) = job.range_get_loop {
            bytes += zrecord::remote::range_get_loop(ds, &[idx.clone()], 0, requests)?;
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

fn evict(dir: &Path) -> Res {
    for entry in walk(dir)? {
        zrecord::evict_page_cache(&entry)?;
    }
    Ok(())
}

fn walk(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            out.extend(walk(&p)?);
        } else {
            out.push(p);
        }
    }
    Ok(out)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or(0.0)
}

fn loader(a: &LoaderArgs) -> Res {
    let backend = Backend::from(a.backend);
    let config = ReadConfig::default()
        .with_backend(backend)
        .with_direct_io(a.direct)
        .with_remote(
            zrecord::remote::RemoteConfig::default()
                .requests_in_flight(a.requests)
                .cache_bytes(a.cache.unwrap_or(0))
                .lookahead_bytes(if a.lookahead.is_some() { 64 << 20 } else { 0 }),
        );
    // Warm: one open dataset for every run (the same mappings and descriptors). Cold: each run
    // evicts the files and opens the dataset afresh (pages mapped by an open dataset cannot be
    // evicted).
    let open = |shared: Option<&std::sync::Arc<Dataset>>| -> Result<std::sync::Arc<Dataset>, Box<dyn std::error::Error>> {
        if let (Some(ds), false) = (shared, a.evict) {
            return Ok(std::sync::Arc::clone(ds));
        }
        if a.evict {
            evict(&a.dir)?;
        }
        Ok(std::sync::Arc::new(Dataset::open_with(&a.dir, config.clone())?))
    };
    let shared = if a.evict { None } else { Some(open(None)?) };
    let remote_before = zrecord::remote::stats();
    let workers = a.workers.max(1);
    // The same work as raw gathers, one thread per worker, reading the same way.
    let raw = GatherArgs {
        dir: a.dir.clone(),
        batch: a.batch as usize,
        batches: (a.batches / workers).max(1),
        backend: a.backend,
        threads: workers,
        evict: false,
        direct: a.direct,
        no_verify: false,
        consume: false,
        seed: a.seed,
        pread_loop: false,
        inflate_loop: false,
        range_get_loop: false,
        requests: a.requests,
        cache: a.cache,
        json: false,
    };
    // Untimed warm-up (warm local runs only): the first touches of a mapping fault its pages
    // in (page tables, not I/O), which would otherwise be charged to whichever run comes first:
    // every record once, in order, so neither run's records are favoured.
    let remote = a.dir.to_string_lossy().contains("://");
    if let (Some(ds), false) = (&shared, remote) {
        let n = ds.len();
        let mut first = 0u64;
        while first < n {
            let last = n.min(first.saturating_add(1 << 16));
            ds.gather_blocking(&(first..last).collect::<Vec<_>>())?;
            first = last;
        }
    }
    // Timed rounds, alternating which runs first; each figure is the median over the rounds.
    let mut rounds = Vec::new();
    let mut last = None;
    let mut backend_name = String::new();
    for round in 0..a.rounds.max(1) {
        let loader_first = round % 2 == 0;
        let mut gather = None;
        // Cold runs read records no earlier run of this process read (a seed per run): a cache
        // below the guest's page cache (the host's) must not serve them.
        let seed = |phase: u64| match a.evict {
            true => a.seed.wrapping_add(2 * round as u64 + phase),
            false => a.seed,
        };
        let raw_run = || -> Result<(f64, f64), Box<dyn std::error::Error>> {
            let ds = open(shared.as_ref())?;
            let cpu = cpu_seconds();
            let raw = GatherArgs {
                seed: seed(1),
                ..raw.clone()
            };
            let g = gather_on(&ds, &raw)?;
            let records = g
                .json
                .get("records")
                .and_then(serde_json::Value::as_f64)
                .unwrap_or(0.0)
                .max(1.0);
            Ok((g.records_per_s, (cpu_seconds() - cpu) * 1e6 / records))
        };
        if !loader_first && !a.no_compare {
            gather = Some(raw_run()?);
        }
        let loader_ds = open(shared.as_ref())?;
        let cpu = cpu_seconds();
        let run = loader_round(&loader_ds, a, seed(0))?;
        backend_name = loader_ds.backend_name().to_string();
        drop(loader_ds);
        let loader_cpu = (cpu_seconds() - cpu) * 1e6 / run.records.max(1) as f64;
        if loader_first && !a.no_compare {
            gather = Some(raw_run()?);
        }
        let gather_rps = gather.map(|g| g.0);
        rounds.push(serde_json::json!({
            "records_per_s": run.records_per_s,
            "gather_records_per_s": gather_rps,
            "ratio_to_gather": gather_rps.map(|g| run.records_per_s / g),
            "cpu_us_per_record": loader_cpu,
            "gather_cpu_us_per_record": gather.map(|g| g.1),
            "loader_first": loader_first,
        }));
        last = Some((run, gather_rps));
    }
    let Some((run, _)) = last else {
        return Err("no round ran".into());
    };
    let median = |key: &str| -> Option<f64> {
        let mut v: Vec<f64> = rounds
            .iter()
            .filter_map(|r| r.get(key).and_then(serde_json::Value::as_f64))
            .collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    let loader_rps = median("records_per_s").unwrap_or(run.records_per_s);
    let gather_rps = median("gather_records_per_s");
    let ratio = median("ratio_to_gather");
    // Chunk downloads into the cache started by this run finish before the process exits, so
    // the next run finds them (not timed).
    let settle = Instant::now();
    while zrecord::remote::pending_fills() > 0 && settle.elapsed().as_secs() < 300 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let remote = remote_json(&remote_before);
    let lat = &run.latencies_ms;
    let (secs, bytes, state, state_ms) = (run.secs, run.bytes, &run.state, run.state_ms);
    let out = serde_json::json!({
        "records_per_s": loader_rps,
        "bytes_per_s": bytes as f64 / secs,
        "p50_next_ms": percentile(lat, 0.5),
        "p99_next_ms": percentile(lat, 0.99),
        "gather_records_per_s": gather_rps,
        "ratio_to_gather": ratio,
        "rounds": rounds,
        "backend": backend_name,
        "workers": workers,
        "batch": a.batch,
        "batches": lat.len(),
        "bucket_buffer": a.bucket_buffer,
        "state_bytes": state.len(),
        "state_ms": state_ms,
        "lookahead": a.lookahead.unwrap_or(zrecord::pipeline::PrefetchConfig::default().lookahead),
        "evicted": a.evict,
        "direct": a.direct,
        "seed": a.seed,
        "stats": run.stats,
        "remote": remote,
    });
    if a.json {
        println!("{out}");
    } else {
        println!(
            "loader {:.0} records/s ({:.1} MB/s), next() p50 {:.3} ms p99 {:.3} ms; raw gather {}; \
             state {} bytes ({} rounds, medians)",
            loader_rps,
            bytes as f64 / secs / 1e6,
            percentile(lat, 0.5),
            percentile(lat, 0.99),
            gather_rps.map_or("not run".to_string(), |g| format!(
                "{g:.0} records/s, ratio {:.3}",
                ratio.unwrap_or(loader_rps / g)
            )),
            state.len(),
            rounds.len()
        );
    }
    Ok(())
}

/// CPU seconds this process has used, all threads (user + system), from `/proc/self/stat`;
/// 0 where that cannot be read. Clock-tick resolution (10 ms): for runs of a second or more.
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which is in parentheses and may hold spaces): utime and
    // stime are the 12th and 13th.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// One timed loader run.
struct LoaderRun {
    records_per_s: f64,
    records: u64,
    secs: f64,
    bytes: u64,
    latencies_ms: Vec<f64>,
    state: Vec<u8>,
    state_ms: f64,
    /// `Loader::stats` at the end of the run.
    stats: serde_json::Value,
}

/// Builds the loader over `ds` and consumes `a.batches` batches from it.
fn loader_round(
    ds: &std::sync::Arc<Dataset>,
    a: &LoaderArgs,
    seed: u64,
) -> Result<LoaderRun, Box<dyn std::error::Error>> {
    use zrecord::pipeline::{BucketConfig, DatasetSource, Loader, SamplerConfig, SamplerMode};
    let source = std::sync::Arc::new(DatasetSource::new(ds));
    let mut builder = Loader::builder(source)
        .sampler(
            SamplerConfig::default()
                .mode(SamplerMode::Shuffled)
                .seed(seed)
                .epochs(None),
        )
        .batch_size(a.batch)
        .num_workers(a.workers.max(1))
        .worker_queue_size(a.worker_queue)
        .gathers_in_flight(a.gathers_in_flight)
        .consumer_queue_size(a.consumer_queue);
    if let Some(l) = a.lookahead {
        builder = builder.lookahead(l);
    }
    if let Some(buffer_size) = a.bucket_buffer {
        builder = builder.bucket(
            BucketConfig::default()
                .buffer_size(buffer_size)
                .pack_size(a.bucket_pack)
                .seed(1),
        );
    }
    let mut loader = builder.build()?;
    let (mut records, mut bytes) = (0u64, 0u64);
    let mut lat = Vec::with_capacity(a.batches);
    let start = Instant::now();
    futures::executor::block_on(async {
        for _ in 0..a.batches {
            let t0 = Instant::now();
            let Some(b) = loader.next().await else { break };
            lat.push(t0.elapsed().as_secs_f64() * 1e3);
            let b = b?;
            records += b.data.len() as u64;
            bytes += b.data.total_bytes() as u64;
        }
        Ok::<(), zrecord::Error>(())
    })?;
    let secs = start.elapsed().as_secs_f64();
    let state_start = Instant::now();
    let state = serde_json::to_vec(&loader.state())?;
    let state_ms = state_start.elapsed().as_secs_f64() * 1e3;
    let stats = stats_json(&loader.stats());
    // Its workers (and their reads) stop before the next run starts or evicts.
    futures::executor::block_on(loader.shutdown());
    lat.sort_by(f64::total_cmp);
    Ok(LoaderRun {
        records_per_s: records as f64 / secs,
        records,
        secs,
        bytes,
        latencies_ms: lat,
        state,
        state_ms,
        stats,
    })
}

/// The loader's own account of a run, in milliseconds and microseconds.
fn stats_json(s: &zrecord::pipeline::LoaderStats) -> serde_json::Value {
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let us = |q: f64| s.gather_quantile(q).map(|d| d.as_secs_f64() * 1e6);
    serde_json::json!({
        "batches": s.batches,
        "records": s.records,
        "index_ms": ms(s.index_time),
        "gather_ms": ms(s.gather_time),
        "transform_ms": ms(s.transform_time),
        "worker_blocked_ms": ms(s.worker_blocked),
        "retry_wait_ms": ms(s.retry_wait),
        "consumer_wait_ms": ms(s.consumer_wait),
        "gather_p50_us_at_most": us(0.5),
        "gather_p99_us_at_most": us(0.99),
        "gather_latency_log2_us": s.gather_latency,
        "failed_attempts": s.failed_attempts,
        "max_lead": s.max_lead,
    })
}
