//! A tokio service that embeds a dataset and serves random batches over TCP on loopback, with
//! its clients in the same process, and a ticker that shows the runtime stays responsive.
//!
//! ```text
//! cargo run --release --example tokio_service
//! ```
//!
//! Protocol (little-endian, length-prefixed): a client sends `u32 batch_size` (0 ends the
//! connection); the server answers `u32 records`, then per record `u32 label_len`, the label
//! bytes, `u32 features_len`, the feature bytes. Every gather is `Dataset::gather(..).await`: the
//! reads, checksums and copies run on zrecord's own I/O threads, so the two runtime workers
//! stay free for the sockets, the clients and the ticker, whose lateness is printed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use zrecord::{DType, Dataset, Field, Schema, Writer, WriterConfig};

const RECORDS: u64 = 50_000;
const FEATURES: usize = 256; // f32 features per record: 1 KiB
const CLIENTS: usize = 8;
const REQUESTS: usize = 1500; // per client
const BATCH: u32 = 128;
const TICK: Duration = Duration::from_millis(1);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), BoxError> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("service.zr");
    write_dataset(&dir)?;
    let ds = Arc::new(Dataset::open(&dir)?);
    println!(
        "dataset: {} records of {} f32 features + an i64 label at {}",
        ds.len(),
        FEATURES,
        dir.display()
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    println!(
        "{CLIENTS} concurrent clients × {REQUESTS} requests for random batches of {BATCH}, \
         2 runtime worker threads, a 1 ms ticker (tokio's timer resolution is 1 ms: ~1 ms of \
         lateness is the floor)"
    );
    rt.block_on(phase(ds))?;
    Ok(())
}

/// Runs the service, its clients and the ticker, and prints what they measured.
async fn phase(ds: Arc<Dataset>) -> Result<(), BoxError> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(serve(listener, ds));

    // The ticker: wakes every millisecond and records how late each wake-up was.
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let ticker = tokio::spawn(async move {
        let mut late = Vec::new();
        loop {
            let due = tokio::time::Instant::now() + TICK;
            tokio::select! {
                _ = tokio::time::sleep_until(due) => {
                    late.push(tokio::time::Instant::now().saturating_duration_since(due));
                }
                _ = &mut stop_rx => break,
            }
        }
        late
    });

    let start = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| tokio::spawn(client(addr, c as u64)))
        .collect();
    let mut latencies = Vec::new();
    let mut bytes = 0u64;
    for c in clients {
        let (lat, b) = c.await??;
        latencies.extend(lat);
        bytes += b;
    }
    let secs = start.elapsed().as_secs_f64();
    let _ = stop_tx.send(());
    let mut late = ticker.await?;
    server.abort();

    latencies.sort();
    late.sort();
    let pct = |v: &[Duration], p: f64| {
        v.get(((v.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or_default()
    };
    let batches = latencies.len();
    println!(
        "  served {batches} batches ({} records, {:.1} MB) in {secs:.2} s: {:.0} batches/s, \
         {:.0} records/s, {:.1} MB/s",
        batches as u64 * u64::from(BATCH),
        bytes as f64 / 1e6,
        batches as f64 / secs,
        batches as f64 * f64::from(BATCH) / secs,
        bytes as f64 / secs / 1e6
    );
    println!(
        "  request latency: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        ms(pct(&latencies, 0.5)),
        ms(pct(&latencies, 0.99)),
        ms(latencies.last().copied().unwrap_or_default())
    );
    println!(
        "  ticker: {} ticks; lateness p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        late.len(),
        ms(pct(&late, 0.5)),
        ms(pct(&late, 0.99)),
        ms(late.last().copied().unwrap_or_default())
    );
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn write_dataset(dir: &std::path::Path) -> zrecord::Result<()> {
    let schema = Schema::new()
        .field(Field::new("features", DType::F32).shape(vec![FEATURES as u64]))
        .field(Field::new("label", DType::I64).shape(vec![]));
    let mut w = Writer::create(dir, &schema, WriterConfig::default())?;
    let mut features = vec![0u8; FEATURES * 4];
    for i in 0..RECORDS {
        for (j, f) in features.chunks_exact_mut(4).enumerate() {
            f.copy_from_slice(&((i as f32) * 0.001 + j as f32).to_le_bytes());
        }
        w.append(&[&features[..], &((i % 1000) as i64).to_le_bytes()[..]])?;
    }
    w.commit()?;
    Ok(())
}

/// Accepts connections; one task per connection.
async fn serve(listener: TcpListener, ds: Arc<Dataset>) {
    let mut conn = 0u64;
    while let Ok((stream, _)) = listener.accept().await {
        conn += 1;
        let ds = Arc::clone(&ds);
        tokio::spawn(async move {
            if let Err(e) = handle(stream, &ds, conn).await {
                eprintln!("connection {conn}: {e}");
            }
        });
    }
}

/// Answers batch requests on one connection until the client sends 0 or hangs up.
async fn handle(stream: TcpStream, ds: &Dataset, seed: u64) -> Result<(), BoxError> {
    stream.set_nodelay(true)?;
    let (r, w) = stream.into_split();
    let (mut r, mut w) = (BufReader::new(r), BufWriter::with_capacity(1 << 20, w));
    let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let n = ds.len();
    loop {
        let want = match r.read_u32_le().await {
            Ok(0) => return Ok(()),
            Ok(k) => k.min(4096),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let indices: Vec<u64> = (0..want)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng % n
            })
            .collect();
        // Non-blocking: the gather (reads, checksums, copies) runs on zrecord's threads and
        // wakes this task once. `gather_blocking` here would stall this runtime worker, and
        // every task queued on it, for as long as the reads take (long, when they go to disk).
        let batch = ds.gather(&indices).await?;
        w.write_u32_le(batch.len() as u32).await?;
        for rec in 0..batch.len() {
            let features = batch.get(rec, 0).unwrap_or_default();
            let label = batch.get(rec, 1).unwrap_or_default();
            w.write_u32_le(label.len() as u32).await?;
            w.write_all(label).await?;
            w.write_u32_le(features.len() as u32).await?;
            w.write_all(features).await?;
        }
        w.flush().await?;
    }
}

/// One client: `REQUESTS` batch requests on one connection; returns latencies and bytes.
async fn client(addr: SocketAddr, id: u64) -> Result<(Vec<Duration>, u64), BoxError> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (r, mut w) = stream.into_split();
    let mut r = BufReader::with_capacity(1 << 20, r);
    let mut lat = Vec::with_capacity(REQUESTS);
    let mut bytes = 0u64;
    let mut buf = Vec::new();
    let mut label_sum = 0i64;
    for _ in 0..REQUESTS {
        let t = Instant::now();
        w.write_u32_le(BATCH).await?;
        let n = r.read_u32_le().await?;
        if n != BATCH {
            return Err(format!("client {id}: asked for {BATCH} records, got {n}").into());
        }
        for _ in 0..n {
            let len = r.read_u32_le().await? as usize;
            let mut label = [0u8; 8];
            if len != label.len() {
                return Err(format!("client {id}: label of {len} bytes").into());
            }
            r.read_exact(&mut label).await?;
            label_sum += i64::from_le_bytes(label);
            let len = r.read_u32_le().await? as usize;
            buf.resize(len, 0);
            r.read_exact(&mut buf).await?;
            bytes += (len + 8) as u64;
        }
        lat.push(t.elapsed());
    }
    w.write_u32_le(0).await?;
    std::hint::black_box(label_sum);
    Ok((lat, bytes))
}
