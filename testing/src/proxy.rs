//! A fault-injecting HTTP/1.1 proxy for tests and benchmarks: put it between the object-store
//! client and an S3 server to see what retries hide and what they do not.
//!
//! Everything about it is in [`FaultProxy`]'s documentation. Of zrecord it uses only the public
//! [`Error`], so that a test's `?` works on it as on zrecord's calls.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use zrecord::{Error, Result};

/// An I/O error on `what` (an address) during `op`, as zrecord reports one.
fn io_error(what: &str, op: &'static str, source: std::io::Error) -> Error {
    Error::Io {
        path: what.into(),
        op,
        source,
    }
}

/// The splitmix64 finaliser: a bijective 64-bit mixer.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A keyed hash of several words (order-sensitive): the one zrecord's sampler uses, so which
/// requests meet faults under a seed is what it was when the proxy lived in zrecord.
fn hash(words: &[u64]) -> u64 {
    words.iter().fold(0x9e37_79b9_7f4a_7c15, |acc, &w| {
        mix(acc.wrapping_add(0x9e37_79b9_7f4a_7c15) ^ mix(w))
    })
}

/// A socket read or write that makes no progress for this long fails (and its thread ends).
const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest request or response head accepted (request line or status line and headers).
const MAX_HEAD_BYTES: u64 = 64 << 10;

/// Which faults a [`FaultProxy`] injects. Fractions are of requests, from 0 (never) to 1
/// (always); values outside are clamped.
///
/// ```
/// use std::time::Duration;
/// use zrecord_testing::FaultConfig;
///
/// let config = FaultConfig::default()
///     .latency(Duration::from_millis(20))
///     .unavailable(0.3)
///     .reset(0.1)
///     .truncate(0.1)
///     .seed(7);
/// assert_eq!(config.unavailable, 0.3);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct FaultConfig {
    /// Time added before each request is handled. Default: none.
    pub latency: Duration,
    /// The fraction of requests answered `503 Service Unavailable` without forwarding.
    /// Default: 0.
    pub unavailable: f64,
    /// The fraction of connections closed without reading the request or answering (a
    /// connection reset). Default: 0.
    pub reset: f64,
    /// The fraction of successful `GET` responses with a body cut to half their body after
    /// announcing the full `Content-Length`. Default: 0.
    pub truncate: f64,
    /// The seed of which requests meet faults. Default: 0.
    pub seed: u64,
}

impl Default for FaultConfig {
    /// No latency, no faults, seed 0: a plain forwarding proxy.
    fn default() -> Self {
        Self {
            latency: Duration::ZERO,
            unavailable: 0.0,
            reset: 0.0,
            truncate: 0.0,
            seed: 0,
        }
    }
}

/// `p` clamped to `[0, 1]` (NaN is 0).
fn fraction(p: f64) -> f64 {
    if p.is_nan() {
        0.0
    } else {
        p.clamp(0.0, 1.0)
    }
}

impl FaultConfig {
    /// Sets the latency added to each request. Default none.
    #[must_use]
    pub fn latency(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }

    /// Sets the fraction of requests answered 503. Default 0.
    #[must_use]
    pub fn unavailable(mut self, p: f64) -> Self {
        self.unavailable = fraction(p);
        self
    }

    /// Sets the fraction of connections reset. Default 0.
    #[must_use]
    pub fn reset(mut self, p: f64) -> Self {
        self.reset = fraction(p);
        self
    }

    /// Sets the fraction of successful `GET` bodies truncated. Default 0.
    #[must_use]
    pub fn truncate(mut self, p: f64) -> Self {
        self.truncate = fraction(p);
        self
    }

    /// Sets the seed of which requests meet faults. Default 0.
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
}

/// What a [`FaultProxy`] has done so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct FaultCounts {
    /// Requests received (connections that sent at least one byte), faulted or not.
    pub requests: u64,
    /// Requests answered 503 by the proxy.
    pub unavailable: u64,
    /// Connections reset.
    pub resets: u64,
    /// Responses truncated.
    pub truncated: u64,
    /// Requests forwarded to the upstream and answered (truncated ones included).
    pub forwarded: u64,
}

/// One request a [`FaultProxy`] read the head of, as [`FaultProxy::log`] lists it: what was
/// asked and what was answered. A connection reset before its request was read is not in the
/// log (only in [`FaultCounts::resets`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Logged {
    /// The method (`GET`, `PUT`, `HEAD`, …).
    pub method: String,
    /// The request target: the path, and the query if any.
    pub target: String,
    /// The `Range` header, if the request had one (`bytes=0-99`).
    pub range: Option<String>,
    /// The status answered: 503 by the proxy, else the upstream's; `None` if the exchange
    /// broke before an answer (the upstream could not be reached, or the client went away).
    pub status: Option<u16>,
}

/// The fault kinds, as hash salts.
#[derive(Debug, Clone, Copy)]
enum Fault {
    Reset = 1,
    Unavailable = 2,
    Truncate = 3,
}

/// What the proxy's threads share.
#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    config: Mutex<FaultConfig>,
    stop: AtomicBool,
    requests: AtomicU64,
    unavailable: AtomicU64,
    resets: AtomicU64,
    truncated: AtomicU64,
    forwarded: AtomicU64,
    /// Every request whose head was read, in arrival order; a request's status is filled in
    /// when it is answered.
    log: Mutex<Vec<Logged>>,
    /// Open sockets (client and upstream sides) by connection number, shut down on drop.
    open: Mutex<Vec<(u64, TcpStream)>>,
    /// The connection threads not yet joined.
    workers: Mutex<Vec<JoinHandle<()>>>,
}

/// Locks `m`, whatever a panicked holder left (every value behind these locks stays valid).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    /// True if fault `fault` hits request `n` under `config`.
    fn hits(config: &FaultConfig, n: u64, fault: Fault, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        // 53 uniform bits in [0, 1).
        let u = (hash(&[config.seed, n, fault as u64]) >> 11) as f64 / (1u64 << 53) as f64;
        u < p
    }

    fn register(&self, id: u64, stream: &TcpStream) {
        if let Ok(s) = stream.try_clone() {
            lock(&self.open).push((id, s));
        }
    }

    fn unregister(&self, id: u64) {
        lock(&self.open).retain(|(i, _)| *i != id);
    }
}

/// A fault-injecting HTTP/1.1 proxy in front of one upstream server, for tests and benchmarks.
///
/// [`FaultProxy::start`] listens on `127.0.0.1:0` and forwards every request to one upstream
/// `http://127.0.0.1:PORT`. Point the client's endpoint (`aws_endpoint`) at
/// [`FaultProxy::endpoint`]. Each request may meet, in this order:
///
/// 1. added latency ([`FaultConfig::latency`]), slept before anything else;
/// 2. a connection reset ([`FaultConfig::reset`]): the proxy closes the socket without reading
///    the request, so the client's kernel sees a reset (`ECONNRESET`), not an answer;
/// 3. `503 Service Unavailable` ([`FaultConfig::unavailable`]) with an S3-style XML error body
///    (`<Code>ServiceUnavailable</Code>`), answered by the proxy without forwarding;
/// 4. a truncated body ([`FaultConfig::truncate`], successful `GET`s with a body only): the
///    upstream's status and headers, its full `Content-Length`, then only the first half of the
///    body, then the connection closes.
///
/// Whether a fault hits request number `n` (counted from 0 in arrival order) is a hash of
/// ([`FaultConfig::seed`], `n`, the fault), so a sequential client meets the same faults on
/// every run; with requests in flight at once, arrival order (and so which request meets them)
/// varies, their rate does not. Resets and 503s never reach the upstream, so a retry never
/// repeats a write the upstream saw.
///
/// The settings can change while the proxy runs ([`FaultProxy::set_config`]); each request
/// uses the settings of its arrival. [`FaultProxy::counts`] says what happened so far.
///
/// Simplifications, fine for a test: one request per connection — every response (and every
/// forwarded request) carries `Connection: close`, so HTTP/1.1 keep-alive never applies and a
/// client opens a new connection per request. `Expect: 100-continue` is answered by the proxy.
/// Request bodies are read whole (by
/// `Content-Length`, or de-chunked and forwarded with a `Content-Length`); the upstream's
/// response is read whole too (by `Content-Length`, chunked or to end of stream) and sent on
/// with a `Content-Length` (a `HEAD` answer keeps the upstream's). Headers are passed on as
/// they are, `Host` included, so request signatures stay valid. Bodies are bytes: nothing is
/// decoded as text. Dropping the proxy stops it: it stops accepting, shuts the open
/// connections down and joins its threads.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Starts a proxy on `127.0.0.1:0` in front of `upstream` (`http://HOST:PORT`), with
    /// `config`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] if `upstream` is not an `http://` address that resolves,
    /// [`Error::Io`] if the listening socket cannot be made, [`Error::ThreadSpawn`] if its
    /// thread cannot start.
    pub fn start(upstream: &str, config: FaultConfig) -> Result<FaultProxy> {
        let bad = |reason: String| Error::InvalidConfig {
            reason: format!("fault proxy upstream {upstream:?}: {reason}"),
        };
        let host = upstream
            .strip_prefix("http://")
            .ok_or_else(|| bad("not an http:// URL".into()))?
            .trim_end_matches('/');
        let upstream_addr = host
            .to_socket_addrs()
            .map_err(|e| bad(e.to_string()))?
            .next()
            .ok_or_else(|| bad("resolves to no address".into()))?;
        let listener =
            TcpListener::bind("127.0.0.1:0").map_err(|e| io_error("127.0.0.1:0", "bind", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| io_error("127.0.0.1:0", "getsockname", e))?;
        let shared = Arc::new(Shared {
            upstream: upstream_addr,
            config: Mutex::new(config),
            stop: AtomicBool::new(false),
            requests: AtomicU64::new(0),
            unavailable: AtomicU64::new(0),
            resets: AtomicU64::new(0),
            truncated: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
            log: Mutex::new(Vec::new()),
            open: Mutex::new(Vec::new()),
            workers: Mutex::new(Vec::new()),
        });
        let acceptor = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("zrecord-fault-proxy".into())
                .spawn(move || accept(&listener, &shared))
                .map_err(|e| Error::ThreadSpawn {
                    what: "the fault proxy",
                    reason: e.to_string(),
                })?
        };
        Ok(FaultProxy {
            addr,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// The address the proxy listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`: the endpoint to give the client.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The settings in use.
    pub fn config(&self) -> FaultConfig {
        *lock(&self.shared.config)
    }

    /// Replaces the settings; requests arriving from now on use them.
    pub fn set_config(&self, config: FaultConfig) {
        *lock(&self.shared.config) = config;
    }

    /// What the proxy has done so far.
    pub fn counts(&self) -> FaultCounts {
        let s = &self.shared;
        FaultCounts {
            requests: s.requests.load(Ordering::Relaxed),
            unavailable: s.unavailable.load(Ordering::Relaxed),
            resets: s.resets.load(Ordering::Relaxed),
            truncated: s.truncated.load(Ordering::Relaxed),
            forwarded: s.forwarded.load(Ordering::Relaxed),
        }
    }

    /// Every request whose head the proxy read so far, in arrival order, with its answer's
    /// status: what a test counts the tries of one range with.
    pub fn log(&self) -> Vec<Logged> {
        lock(&self.shared.log).clone()
    }

    /// Empties the log ([`FaultProxy::log`]); the counts are kept.
    pub fn clear_log(&self) {
        lock(&self.shared.log).clear();
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the acceptor; it sees `stop` and returns.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        for (_, s) in lock(&self.shared.open).iter() {
            let _ = s.shutdown(Shutdown::Both);
        }
        let workers = std::mem::take(&mut *lock(&self.shared.workers));
        for w in workers {
            let _ = w.join();
        }
    }
}

/// Accepts connections until the proxy stops, one thread each.
fn accept(listener: &TcpListener, shared: &Arc<Shared>) {
    let mut next_id = 0u64;
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else {
            continue;
        };
        let id = next_id;
        next_id = next_id.wrapping_add(1);
        shared.register(id, &stream);
        let worker = {
            let shared = Arc::clone(shared);
            std::thread::Builder::new()
                .name("zrecord-fault-proxy-conn".into())
                .spawn(move || {
                    if let Err(e) = serve(&shared, id, &stream) {
                        tracing::debug!("fault proxy connection {id}: {e}");
                    }
                    shared.unregister(id);
                })
        };
        let mut workers = lock(&shared.workers);
        workers.retain(|w| !w.is_finished());
        match worker {
            Ok(w) => workers.push(w),
            // Without a thread the connection is dropped: to the client, a reset.
            Err(_) => shared.unregister(id),
        }
    }
}

/// A parsed message head: the first line and the headers, in order.
#[derive(Debug)]
struct Head {
    line: String,
    headers: Vec<(String, String)>,
}

impl Head {
    /// The value of header `name` (case-insensitive), the first if several.
    fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    }

    fn chunked(&self) -> bool {
        self.get("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    }

    fn content_length(&self) -> std::io::Result<Option<u64>> {
        self.get("content-length")
            .map(|v| v.parse().map_err(|_| invalid("bad Content-Length")))
            .transpose()
    }

    /// The head as bytes, without the hop-by-hop headers (`Connection`, `Keep-Alive`,
    /// `Transfer-Encoding`, `Proxy-Connection`, `Expect`: the proxy answers `100-continue`
    /// itself) and, if `length` is given, without
    /// `Content-Length`; then `Content-Length: length` (if given) and `Connection: close`.
    fn encode(&self, length: Option<u64>) -> Vec<u8> {
        let mut out = format!("{}\r\n", self.line);
        for (k, v) in &self.headers {
            let hop = [
                "connection",
                "keep-alive",
                "transfer-encoding",
                "proxy-connection",
                "expect",
            ]
            .iter()
            .any(|h| k.eq_ignore_ascii_case(h));
            if hop || (length.is_some() && k.eq_ignore_ascii_case("content-length")) {
                continue;
            }
            out.push_str(&format!("{k}: {v}\r\n"));
        }
        if let Some(n) = length {
            out.push_str(&format!("Content-Length: {n}\r\n"));
        }
        out.push_str("Connection: close\r\n\r\n");
        out.into_bytes()
    }
}

fn invalid(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string())
}

/// Reads a message head (up to the empty line). `None` if the stream ends before any byte.
fn read_head(r: &mut impl BufRead) -> std::io::Result<Option<Head>> {
    let mut limited = r.take(MAX_HEAD_BYTES);
    let mut lines = Vec::new();
    loop {
        let mut line = Vec::new();
        let n = limited.read_until(b'\n', &mut line)?;
        if n == 0 {
            if lines.is_empty() {
                return Ok(None);
            }
            return Err(invalid("the stream ended inside a message head"));
        }
        let text = String::from_utf8(line).map_err(|_| invalid("a head line is not UTF-8"))?;
        let text = text.trim_end_matches(['\r', '\n']).to_string();
        if text.is_empty() {
            if lines.is_empty() {
                continue; // a stray empty line before a message is allowed
            }
            break;
        }
        lines.push(text);
    }
    let mut lines = lines.into_iter();
    let line = lines.next().ok_or_else(|| invalid("an empty head"))?;
    let headers = lines
        .map(|l| {
            l.split_once(':')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| invalid("a header line without ':'"))
        })
        .collect::<std::io::Result<_>>()?;
    Ok(Some(Head { line, headers }))
}

/// Reads exactly `n` bytes.
fn read_n(r: &mut impl Read, n: u64) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    let got = r.take(n).read_to_end(&mut body)?;
    if (got as u64) < n {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("the body ended after {got} of {n} bytes"),
        ));
    }
    Ok(body)
}

/// Reads a chunked body, de-chunked (extensions and trailers dropped).
fn read_chunked(r: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut line = Vec::new();
        r.by_ref().take(4096).read_until(b'\n', &mut line)?;
        let text = std::str::from_utf8(&line).map_err(|_| invalid("bad chunk size"))?;
        let size = text.split(';').next().unwrap_or_default().trim();
        let size = u64::from_str_radix(size, 16).map_err(|_| invalid("bad chunk size"))?;
        if size == 0 {
            // Trailers, up to the empty line.
            loop {
                let mut t = Vec::new();
                if r.by_ref().take(MAX_HEAD_BYTES).read_until(b'\n', &mut t)? == 0
                    || t == b"\r\n"
                    || t == b"\n"
                {
                    return Ok(body);
                }
            }
        }
        body.extend_from_slice(&read_n(r, size)?);
        let mut crlf = Vec::new();
        r.by_ref().take(2).read_until(b'\n', &mut crlf)?;
    }
}

/// Handles one connection: one request, one answer (or a fault).
fn serve(shared: &Shared, id: u64, client: &TcpStream) -> std::io::Result<()> {
    client.set_read_timeout(Some(IO_TIMEOUT))?;
    client.set_write_timeout(Some(IO_TIMEOUT))?;
    client.set_nodelay(true)?;
    // Wait for the request's first bytes; a connection closed before any is not a request.
    if client.peek(&mut [0u8; 1])? == 0 || shared.stop.load(Ordering::SeqCst) {
        return Ok(());
    }
    let n = shared.requests.fetch_add(1, Ordering::Relaxed);
    let config = *lock(&shared.config);
    if !config.latency.is_zero() {
        std::thread::sleep(config.latency);
    }
    if Shared::hits(&config, n, Fault::Reset, config.reset) {
        // Closing with the request unread in the receive queue makes the kernel send a reset.
        shared.resets.fetch_add(1, Ordering::Relaxed);
        return Ok(());
    }

    let mut reader = BufReader::new(client);
    let Some(request) = read_head(&mut reader)? else {
        return Ok(());
    };
    let method = request
        .line
        .split(' ')
        .next()
        .unwrap_or_default()
        .to_string();
    let entry = {
        let mut log = lock(&shared.log);
        log.push(Logged {
            method: method.clone(),
            target: request
                .line
                .split(' ')
                .nth(1)
                .unwrap_or_default()
                .to_string(),
            range: request.get("range").map(str::to_string),
            status: None,
        });
        log.len() - 1
    };
    let answered = |status: u16| {
        if let Some(e) = lock(&shared.log).get_mut(entry) {
            e.status = Some(status);
        }
    };
    let mut out = client;
    if request
        .get("expect")
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
    {
        // The client waits for this before sending the body; the upstream is not asked.
        out.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
    }
    let body = if request.chunked() {
        read_chunked(&mut reader)?
    } else {
        read_n(&mut reader, request.content_length()?.unwrap_or(0))?
    };

    if Shared::hits(&config, n, Fault::Unavailable, config.unavailable) {
        shared.unavailable.fetch_add(1, Ordering::Relaxed);
        answered(503);
        let resource = request.line.split(' ').nth(1).unwrap_or("/");
        let xml = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>ServiceUnavailable</Code>\
             <Message>Service Unavailable (injected by zrecord's fault proxy)</Message>\
             <Resource>{resource}</Resource><RequestId>zrecord-fault-{n}</RequestId></Error>"
        );
        let head = format!(
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            xml.len()
        );
        out.write_all(head.as_bytes())?;
        out.write_all(xml.as_bytes())?;
        out.flush()?;
        let _ = out.shutdown(Shutdown::Write);
        return Ok(());
    }

    // Forward, with a Content-Length if the request came chunked.
    let mut up = TcpStream::connect_timeout(&shared.upstream, Duration::from_secs(5))?;
    shared.register(id, &up);
    up.set_read_timeout(Some(IO_TIMEOUT))?;
    up.set_write_timeout(Some(IO_TIMEOUT))?;
    up.set_nodelay(true)?;
    let length = request.chunked().then_some(body.len() as u64);
    up.write_all(&request.encode(length))?;
    up.write_all(&body)?;
    up.flush()?;

    let mut up_reader = BufReader::new(&up);
    let response = loop {
        let head = read_head(&mut up_reader)?
            .ok_or_else(|| invalid("the upstream closed without answering"))?;
        // Interim answers (100 Continue, …) are dropped: the client never asked for them.
        if !head.line.split(' ').nth(1).unwrap_or("").starts_with('1') {
            break head;
        }
    };
    let status: u16 = response
        .line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid("a bad status line"))?;
    let bodiless = method.eq_ignore_ascii_case("HEAD") || status == 204 || status == 304;
    let (data, length) = if bodiless {
        (Vec::new(), None)
    } else if response.chunked() {
        let data = read_chunked(&mut up_reader)?;
        let n = data.len() as u64;
        (data, Some(n))
    } else if let Some(n) = response.content_length()? {
        (read_n(&mut up_reader, n)?, None)
    } else {
        let mut data = Vec::new();
        up_reader.read_to_end(&mut data)?;
        let n = data.len() as u64;
        (data, Some(n))
    };
    drop(up_reader);
    let _ = up.shutdown(Shutdown::Both);
    shared.forwarded.fetch_add(1, Ordering::Relaxed);
    answered(status);

    out.write_all(&response.encode(length))?;
    let truncate = method.eq_ignore_ascii_case("GET")
        && (200..300).contains(&status)
        && !data.is_empty()
        && Shared::hits(&config, n, Fault::Truncate, config.truncate);
    if truncate {
        shared.truncated.fetch_add(1, Ordering::Relaxed);
        out.write_all(data.get(..data.len() / 2).unwrap_or_default())?;
    } else {
        out.write_all(&data)?;
    }
    out.flush()?;
    let _ = out.shutdown(Shutdown::Write);
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    /// A one-shot upstream answering every request with `answer`; returns its address and the
    /// requests it saw.
    fn upstream(answer: Vec<u8>) -> (String, Arc<Mutex<Vec<Vec<u8>>>>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let seen2 = Arc::clone(&seen);
        std::thread::spawn(move || {
            for s in l.incoming() {
                let mut s = s.unwrap();
                let mut r = BufReader::new(s.try_clone().unwrap());
                let head = read_head(&mut r).unwrap().unwrap();
                let body = read_n(&mut r, head.content_length().unwrap().unwrap_or(0)).unwrap();
                let mut req = head.encode(None);
                req.extend_from_slice(&body);
                seen2.lock().unwrap().push(req);
                s.write_all(&answer).unwrap();
                let _ = s.shutdown(Shutdown::Write);
            }
        });
        (format!("http://{addr}"), seen)
    }

    fn send(proxy: &FaultProxy, request: &[u8]) -> std::io::Result<Vec<u8>> {
        let mut s = TcpStream::connect(proxy.addr())?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        s.write_all(request)?;
        let mut out = Vec::new();
        s.read_to_end(&mut out)?;
        Ok(out)
    }

    #[test]
    fn chunked_answers_are_forwarded_with_a_length_and_binary_bodies_intact() {
        let body: Vec<u8> = (0..=255u8).chain(*b"\r\n\r\n0\r\n").collect();
        let mut answer =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: b\r\n\r\n".to_vec();
        for piece in body.chunks(100) {
            answer.extend_from_slice(format!("{:x};ext=1\r\n", piece.len()).as_bytes());
            answer.extend_from_slice(piece);
            answer.extend_from_slice(b"\r\n");
        }
        answer.extend_from_slice(b"0\r\nTrailer: x\r\n\r\n");
        let (up, seen) = upstream(answer);
        let proxy = FaultProxy::start(&up, FaultConfig::default()).unwrap();
        let got = send(
            &proxy,
            b"PUT /b/k HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\n\x00\xff\n",
        )
        .unwrap();
        let head_end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8(got[..head_end].to_vec()).unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains(&format!("Content-Length: {}\r\n", body.len())));
        assert!(head.contains("Connection: close\r\n") && head.contains("X-A: b\r\n"));
        assert!(!head.to_ascii_lowercase().contains("transfer-encoding"));
        assert_eq!(&got[head_end..], &body[..]);
        let req = seen.lock().unwrap()[0].clone();
        assert!(req.starts_with(b"PUT /b/k HTTP/1.1\r\nHost: h\r\n"));
        assert!(req.ends_with(b"Connection: close\r\n\r\n\x00\xff\n"));
        assert!(!String::from_utf8_lossy(&req).contains("keep-alive"));
        assert_eq!(
            proxy.counts(),
            FaultCounts {
                requests: 1,
                forwarded: 1,
                ..FaultCounts::default()
            }
        );
    }

    #[test]
    fn expect_continue_is_answered_by_the_proxy() {
        let (up, seen) = upstream(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".to_vec());
        let proxy = FaultProxy::start(&up, FaultConfig::default()).unwrap();
        let mut s = TcpStream::connect(proxy.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(
            b"PUT /k HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n",
        )
        .unwrap();
        let mut interim = [0u8; 25];
        s.read_exact(&mut interim).unwrap();
        assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
        s.write_all(b"ok").unwrap();
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).unwrap();
        assert!(rest.starts_with(b"HTTP/1.1 200 OK\r\n"));
        let req = seen.lock().unwrap()[0].clone();
        assert!(req.ends_with(b"\r\n\r\nok"));
        assert!(!String::from_utf8_lossy(&req)
            .to_ascii_lowercase()
            .contains("expect"));
    }

    #[test]
    fn faults_follow_the_settings() {
        let (up, seen) =
            upstream(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789".to_vec());
        let proxy = FaultProxy::start(&up, FaultConfig::default().unavailable(1.0)).unwrap();
        let get = b"GET /b/k HTTP/1.1\r\nHost: h\r\n\r\n";
        let got = String::from_utf8(send(&proxy, get).unwrap()).unwrap();
        assert!(
            got.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{got}"
        );
        assert!(got.contains("<Code>ServiceUnavailable</Code>"));
        assert!(seen.lock().unwrap().is_empty());

        proxy.set_config(FaultConfig::default().truncate(1.0));
        let got = send(&proxy, get).unwrap();
        assert!(got.ends_with(b"Content-Length: 10\r\nConnection: close\r\n\r\n01234"));
        // HEAD answers are never truncated, and keep the upstream's length.
        let got = send(&proxy, b"HEAD /b/k HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
        assert!(got.ends_with(b"Content-Length: 10\r\nConnection: close\r\n\r\n"));

        proxy.set_config(FaultConfig::default().reset(1.0));
        assert!(send(&proxy, get).map_or(true, |b| b.is_empty()));

        proxy.set_config(FaultConfig::default());
        assert!(send(&proxy, get).unwrap().ends_with(b"\r\n\r\n0123456789"));
        let c = proxy.counts();
        assert_eq!(
            (
                c.requests,
                c.unavailable,
                c.truncated,
                c.resets,
                c.forwarded
            ),
            (5, 1, 1, 1, 3)
        );
    }

    #[test]
    fn fractions_are_near_their_rate_and_follow_the_seed() {
        let c = FaultConfig::default().seed(5);
        let hits = |c: &FaultConfig| {
            (0..10_000u64)
                .filter(|&n| Shared::hits(c, n, Fault::Unavailable, 0.3))
                .collect::<Vec<_>>()
        };
        let a = hits(&c);
        assert!((2700..3300).contains(&a.len()), "{}", a.len());
        assert_eq!(a, hits(&c));
        assert_ne!(a, hits(&c.seed(6)));
        assert_eq!(FaultConfig::default().reset(2.0).reset, 1.0);
        assert_eq!(FaultConfig::default().truncate(f64::NAN).truncate, 0.0);
    }
}
