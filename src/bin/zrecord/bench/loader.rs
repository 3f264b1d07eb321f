//! `zrecord bench loader`: the full loader against raw gathers of the same batches, in
//! alternating rounds, with CPU per record and the loader's stats.

use super::gather::{gather_on, remote_json, GatherArgs};
use super::{cpu_seconds, evict, percentile};
use crate::args::BackendArg;
use crate::Res;
use clap::Args;
use std::path::PathBuf;
use std::time::Instant;
use zrecord::{Backend, Dataset, ReadConfig};

#[derive(Args)]
pub struct LoaderArgs {
    /// The dataset directory, or its URL on an object store (s3://bucket/prefix, gs://bucket/prefix, az://container/prefix).
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
    /// Lay each field of every batch out end to end in memory of its own, as the Python
    /// package's batches are (`ReadConfig::with_columns`); the raw gathers compared do too.
    #[arg(long)]
    columns: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

pub(super) fn loader(a: &LoaderArgs) -> Res {
    let backend = Backend::from(a.backend);
    let config = ReadConfig::default()
        .with_backend(backend)
        .with_direct_io(a.direct)
        .with_columns(a.columns);
    let remote = zrecord::remote::RemoteConfig::default()
        .requests_in_flight(a.requests)
        .cache_bytes(a.cache.unwrap_or(0))
        .lookahead_bytes(if a.lookahead.is_some() { 64 << 20 } else { 0 });
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
        Ok(std::sync::Arc::new(super::open_dataset(
            &a.dir,
            config.clone(),
            remote.clone(),
        )?))
    };
    let shared = if a.evict { None } else { Some(open(None)?) };
    let remote_before = zrecord::diagnostics::remote_stats();
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
        sequential: false,
        columns: a.columns,
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
    let remote = a.dir.to_str().is_some_and(zrecord::remote::is_url);
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
    while zrecord::diagnostics::pending_fills() > 0 && settle.elapsed().as_secs() < 300 {
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
        "columns": a.columns,
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
    use zrecord::pipeline::{
        BucketConfig, DatasetSource, Loader, PrefetchConfig, SamplerConfig, SamplerMode,
    };
    let source = std::sync::Arc::new(DatasetSource::new(ds));
    let mut builder = Loader::builder(source)
        .sampler(
            SamplerConfig::default()
                .mode(SamplerMode::Shuffled)
                .seed(seed)
                .epochs(None),
        )
        .batch_size(a.batch);
    let mut prefetch = PrefetchConfig::default()
        .num_workers(a.workers.max(1))
        .worker_queue_size(a.worker_queue)
        .gathers_in_flight(a.gathers_in_flight)
        .consumer_queue_size(a.consumer_queue);
    if let Some(l) = a.lookahead {
        prefetch = prefetch.lookahead(l);
    }
    builder = builder.prefetch(prefetch);
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
