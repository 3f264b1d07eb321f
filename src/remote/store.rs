//! One dataset prefix on an object store: the `object_store` client of its provider (S3, GCS,
//! Azure), the runtime its requests run on, the one retry budget of every request, and typed
//! errors that name the object, the range and the last HTTP status.
//!
//! Retries live here and nowhere else: the client is built with `object_store`'s own retries
//! off (`max_retries: 0`), every request goes through [`Store`]'s loop, which tries it at most
//! [`StoreOptions::retries`] + 1 times while it fails transiently ([`transient`]: 5xx, 429,
//! 408, a connection refused, reset or timed out, a body cut short) and returns a permanent
//! failure (404, 403, 416, any other answer about the request itself) after its first try,
//! and the loader does not try a failed batch again for an error of a request
//! ([`crate::Error::Remote`]). The one exception is a multipart upload: its parts are numbered
//! by the client as they are sent, so each part is retried inside `object_store` (a client of
//! its own, with the same budget), and the upload is not tried again whole.

use std::future::Future;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use object_store::aws::AmazonS3Builder;
#[cfg(feature = "azure")]
use object_store::azure::MicrosoftAzureBuilder;
#[cfg(feature = "gcs")]
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::path::Path as ObjectPath;
use object_store::{
    BackoffConfig, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig,
};

use crate::error::{Error, Result};
use crate::io::fork::ForkLocal;
use crate::retry::{retry, Failure, RetryPolicy};
use crate::store::location::url_parts;

use super::failure::{chain, http_status, transient};

/// Options of the object-store client: `object_store` configuration keys and values, applied
/// over what the environment sets, and the request retries. The keys are those of the URL's
/// provider:
///
/// - S3 (`s3://`): `aws_endpoint`, `aws_access_key_id`, `aws_secret_access_key`, `aws_region`,
///   `aws_allow_http`, … over `AWS_ENDPOINT`, `AWS_ACCESS_KEY_ID`, …
/// - GCS (`gs://`, feature `gcs`): `google_service_account` (a key file's path),
///   `google_service_account_key` (its JSON), `google_application_credentials`,
///   `google_bearer_token`, `google_base_url` (an emulator's URL: give it a bearer token too;
///   object_store 0.14 asks the metadata server for one before an upload even with
///   `google_skip_signature`), …
///   over `GOOGLE_SERVICE_ACCOUNT`, `GOOGLE_APPLICATION_CREDENTIALS`, …
/// - Azure (`az://`, feature `azure`): `azure_storage_account_name`,
///   `azure_storage_account_key`, `azure_storage_sas_key`, `azure_storage_token`,
///   `azure_storage_endpoint` (an emulator's or a private endpoint's URL),
///   `azure_storage_use_emulator`, `azure_allow_http`, … over `AZURE_STORAGE_ACCOUNT_NAME`,
///   `AZURE_STORAGE_ACCOUNT_KEY`, …
///
/// Client keys without a provider prefix (`allow_http`, `timeout`, …) apply to every provider.
/// A key with another provider's prefix (`aws_`, `google_`, `azure_`) is skipped, so one
/// `StoreOptions` can carry the settings of several stores; any other key the provider does not
/// know is an [`crate::Error::InvalidConfig`] at open.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreOptions {
    /// `object_store` configuration pairs, applied in order after the environment.
    pub config: Vec<(String, String)>,
    /// Retries of a request that failed transiently (a 5xx, 429 or 408 answer, a connection
    /// refused, reset or timed out, a body cut short) before its error is returned: each
    /// request is tried at most `retries + 1` times, and this is its only retry budget (the
    /// client's own retries are off, and the loader does not retry an object-store error). A
    /// permanent failure (404, 403, 416, any other answer about the request itself; a checksum
    /// mismatch of the bytes) is returned after one try. Default: 5 (6 tries).
    pub retries: u32,
    /// The wait before the second try; each later wait doubles, up to 2 s. Default: 50 ms
    /// (waits of 50, 100, 200, 400 and 800 ms: 1.55 s in all).
    pub backoff: Duration,
    /// Time allowed for one try of a request, connection and body included. Default: 30 s. A
    /// request that fails on every try gives up after at most `(retries + 1) × timeout` plus
    /// the waits (with the defaults: 6 × 30 s + 1.55 s; 1.55 s when every try is answered at
    /// once, a 503 say).
    pub timeout: Duration,
}

impl Default for StoreOptions {
    /// The environment's settings, 5 retries (6 tries) from 50 ms, 30 s per try.
    fn default() -> Self {
        Self {
            config: Vec::new(),
            retries: 5,
            backoff: Duration::from_millis(50),
            timeout: Duration::from_secs(30),
        }
    }
}

impl StoreOptions {
    /// Adds one `object_store` configuration pair (e.g. `("aws_endpoint",
    /// "http://127.0.0.1:9000")`, `("azure_storage_account_name", "devstoreaccount1")`).
    #[must_use]
    pub fn with(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.config.push((key.into(), value.into()));
        self
    }

    /// Sets the retries of a request that failed transiently (tries: `retries + 1`). Default 5.
    #[must_use]
    pub fn retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }

    /// Sets the wait before the second try (later waits double, up to 2 s). Default 50 ms.
    #[must_use]
    pub fn backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }

    /// Sets the time allowed for one try of a request. Default 30 s.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// The runtime every object-store request runs on: two worker threads, started on first use in
/// each process (a child of `fork()` has none of its parent's threads: it starts its own, and
/// leaves the parent's runtime alone, never dropped).
fn runtime() -> Result<&'static tokio::runtime::Runtime> {
    static RUNTIME: ForkLocal<std::result::Result<tokio::runtime::Runtime, String>> =
        ForkLocal::new();
    RUNTIME
        .get_or_init(|_| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("zrecord-remote")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|reason| Error::ThreadSpawn {
            what: "the object-store runtime",
            reason: reason.clone(),
        })
}

/// Runs `fut` on the object-store runtime and waits for it on this thread (which may be any
/// thread, an async runtime's included: it only blocks).
pub(crate) fn block_on<F>(fut: F) -> Result<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    runtime()?.spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv().map_err(|_| Error::WorkerGone {
        what: "an object-store request",
    })
}

/// Runs `fut` on the object-store runtime in the background (nothing if the runtime cannot
/// start: the work is an optimisation).
pub(crate) fn spawn<F>(fut: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    if let Ok(rt) = runtime() {
        drop(rt.spawn(fut));
    }
}

/// Like [`spawn`], returning a handle that aborts the task; `None` if the runtime cannot
/// start.
pub(crate) fn spawn_abortable<F>(fut: F) -> Option<tokio::task::AbortHandle>
where
    F: Future<Output = ()> + Send + 'static,
{
    runtime().ok().map(|rt| rt.spawn(fut).abort_handle())
}

/// A dataset's prefix on an object store.
#[derive(Debug)]
pub(crate) struct Store {
    /// The dataset URL, without a trailing `/`.
    url: String,
    /// This process's client (see [`Store::inner`]).
    client: ForkLocal<std::result::Result<Arc<dyn ObjectStore>, String>>,
    /// How to make the client again in a child of `fork()` (`None`: the parent's is kept, for
    /// an in-memory store).
    builder: Option<Rebuild>,
    /// The client multipart uploads go through: `object_store`'s own retries on (the same
    /// budget), since it numbers an upload's parts as it sends them; made on first use and
    /// shared with [`Store::child`]'s stores.
    uploads: Arc<ForkLocal<std::result::Result<Arc<dyn ObjectStore>, String>>>,
    /// The retry configuration of [`Store::uploads`].
    upload_retry: RetryConfig,
    prefix: ObjectPath,
    retries: u32,
    backoff: Duration,
}

/// The client's configuration, kept to make the client again after `fork()`. Its `Debug` shows
/// nothing: it holds the credentials. Boxed: the builders' sizes differ by a kilobyte.
#[derive(Clone)]
enum Rebuild {
    S3(Box<AmazonS3Builder>),
    #[cfg(feature = "gcs")]
    Gcs(Box<GoogleCloudStorageBuilder>),
    #[cfg(feature = "azure")]
    Azure(Box<MicrosoftAzureBuilder>),
}

impl Rebuild {
    /// A new client of this configuration.
    fn build(&self) -> std::result::Result<Arc<dyn ObjectStore>, object_store::Error> {
        Ok(match self {
            Rebuild::S3(b) => Arc::new((**b).clone().build()?),
            #[cfg(feature = "gcs")]
            Rebuild::Gcs(b) => Arc::new((**b).clone().build()?),
            #[cfg(feature = "azure")]
            Rebuild::Azure(b) => Arc::new((**b).clone().build()?),
        })
    }

    /// A new client of this configuration with the retries of `retry` instead.
    fn build_with(
        &self,
        retry: RetryConfig,
    ) -> std::result::Result<Arc<dyn ObjectStore>, object_store::Error> {
        Ok(match self {
            Rebuild::S3(b) => Arc::new((**b).clone().with_retry(retry).build()?),
            #[cfg(feature = "gcs")]
            Rebuild::Gcs(b) => Arc::new((**b).clone().with_retry(retry).build()?),
            #[cfg(feature = "azure")]
            Rebuild::Azure(b) => Arc::new((**b).clone().with_retry(retry).build()?),
        })
    }
}

/// The object stores a dataset URL can name, one per `object_store` client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Provider {
    /// Amazon S3 and S3-compatible stores: `s3://bucket/prefix` (and `s3a://`).
    S3,
    /// Google Cloud Storage: `gs://bucket/prefix` (feature `gcs`).
    Gcs,
    /// Azure Blob Storage: `az://container/prefix`, also `azure://`, `abfs://`, `abfss://`
    /// (`abfs[s]://container@account.dfs.core.windows.net/prefix` too), feature `azure`.
    Azure,
}

impl Provider {
    /// Every provider.
    pub(crate) const ALL: [Provider; 3] = [Provider::S3, Provider::Gcs, Provider::Azure];

    /// The URL schemes (without `://`) that name this provider's stores.
    pub(crate) fn schemes(self) -> &'static [&'static str] {
        match self {
            Provider::S3 => &["s3", "s3a"],
            Provider::Gcs => &["gs"],
            Provider::Azure => &["az", "azure", "abfs", "abfss"],
        }
    }

    /// The provider of URLs of `scheme`, if any.
    pub(crate) fn of_scheme(scheme: &str) -> Option<Provider> {
        Provider::ALL
            .into_iter()
            .find(|p| p.schemes().contains(&scheme))
    }

    /// The prefix of this provider's `object_store` configuration keys.
    fn key_prefix(self) -> &'static str {
        match self {
            Provider::S3 => "aws_",
            Provider::Gcs => "google_",
            Provider::Azure => "azure_",
        }
    }

    /// The crate feature that builds this provider's client in.
    #[cfg(not(all(feature = "gcs", feature = "azure")))]
    fn feature(self) -> &'static str {
        match self {
            Provider::S3 => "remote",
            Provider::Gcs => "gcs",
            Provider::Azure => "azure",
        }
    }

    /// The configuration pairs of `pairs` this provider takes: those with another provider's
    /// key prefix are skipped.
    fn keeps(self, key: &str) -> bool {
        key.starts_with(self.key_prefix())
            || !Provider::ALL
                .iter()
                .any(|p| key.starts_with(p.key_prefix()))
    }
}

impl std::fmt::Debug for Rebuild {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Rebuild(..)")
    }
}

/// What a conditional create found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Create {
    /// The object was created.
    Created,
    /// An object was there already; nothing was written.
    Exists,
    /// An object was there when a create whose first answer was lost was tried again: this
    /// create's own, or another's.
    Maybe,
}

impl Store {
    /// The store and prefix `url` names (`s3://bucket/prefix`, `gs://bucket/prefix`,
    /// `az://container/prefix`).
    pub(crate) fn open(url: &str, options: &StoreOptions) -> Result<Arc<Store>> {
        let url = url.trim_end_matches('/').to_string();
        let bad = |reason: String| Error::InvalidConfig {
            reason: format!("{url}: {reason}"),
        };
        let (scheme, rest) = url_parts(&url).ok_or_else(|| bad("not a URL".into()))?;
        let provider = Provider::of_scheme(scheme).ok_or_else(|| {
            bad(format!(
                "the {scheme}:// scheme is not supported (zrecord reads s3:// URLs, S3 and \
                 S3-compatible stores such as Garage, MinIO or Ceph; gs:// URLs, Google Cloud \
                 Storage; and az:// URLs, Azure Blob Storage)"
            ))
        })?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(bad("no bucket".into()));
        }
        // Client settings as configuration keys, so the environment's and the caller's
        // (`allow_http`, …) are kept: timeouts first, then the caller's pairs over them.
        let ms = |d: Duration| format!("{}ms", d.as_millis());
        let connect = options.timeout.min(Duration::from_secs(5));
        let defaults = [
            ("timeout".to_string(), ms(options.timeout)),
            ("connect_timeout".to_string(), ms(connect)),
            ("pool_max_idle_per_host".to_string(), "64".to_string()),
        ];
        let pairs: Vec<&(String, String)> = defaults
            .iter()
            .chain(&options.config)
            .filter(|(k, _)| provider.keeps(k))
            .collect();
        let max = Duration::from_secs(2);
        // The budget of a multipart upload's parts, retried inside the client.
        let upload_retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: options.backoff,
                max_backoff: max.max(options.backoff),
                base: 2.0,
            },
            max_retries: usize::try_from(options.retries).unwrap_or(usize::MAX),
            retry_timeout: options
                .timeout
                .saturating_mul(options.retries.saturating_add(1)),
        };
        // Every other request: tried once by the client, retried by `Store` alone.
        let once = RetryConfig {
            max_retries: 0,
            ..upload_retry.clone()
        };
        let builder = configure(provider, scheme, bucket, &pairs, once).map_err(bad)?;
        let inner = builder
            .build()
            .map_err(|e| bad(format!("cannot configure the store: {e}")))?;
        let prefix = ObjectPath::parse(prefix)
            .map_err(|e| bad(format!("not a valid object prefix: {e}")))?;
        Ok(Arc::new(Store {
            url,
            client: ForkLocal::with(Ok(inner)),
            builder: Some(builder),
            uploads: Arc::new(ForkLocal::new()),
            upload_retry,
            prefix,
            retries: options.retries,
            backoff: options.backoff,
        }))
    }

    /// This process's client. A child of `fork()` makes its own, with connections of its own:
    /// the parent's pooled connections are sockets the parent still uses, registered with a
    /// runtime whose threads the child does not have.
    fn inner(&self) -> Result<&Arc<dyn ObjectStore>> {
        self.client
            .get_or_init(|parent| match (&self.builder, parent) {
                (Some(b), _) => b.build().map_err(|e| e.to_string()),
                (None, Some(p)) => p.clone(),
                (None, None) => Err("no client".into()),
            })
            .as_ref()
            .map_err(|reason| Error::InvalidConfig {
                reason: format!("{}: cannot configure the store: {reason}", self.url),
            })
    }

    /// This process's client for multipart uploads (see [`Store::uploads`]); the one client
    /// of a store without a configuration (in memory).
    fn uploads(&self) -> Result<Arc<dyn ObjectStore>> {
        let Some(b) = &self.builder else {
            return self.inner().map(Arc::clone);
        };
        self.uploads
            .get_or_init(|_| {
                b.build_with(self.upload_retry.clone())
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map(Arc::clone)
            .map_err(|reason| Error::InvalidConfig {
                reason: format!("{}: cannot configure the store: {reason}", self.url),
            })
    }

    /// The dataset URL.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// The URL of the object `key` (relative to the dataset prefix).
    pub(crate) fn object_url(&self, key: &str) -> String {
        format!("{}/{key}", self.url)
    }

    fn path(&self, key: &str) -> ObjectPath {
        let mut p = self.prefix.clone();
        for part in key.split('/') {
            p = p.clone().join(part);
        }
        p
    }

    fn error(&self, key: &str, range: Option<Range<u64>>, e: &object_store::Error) -> Error {
        let reason = chain(e);
        let status = match e {
            object_store::Error::NotFound { .. } => Some(404),
            object_store::Error::AlreadyExists { .. }
            | object_store::Error::Precondition { .. } => Some(412),
            _ => http_status(&reason),
        };
        Error::Remote {
            object: self.object_url(key),
            range,
            status,
            reason,
        }
    }

    /// How a try of a request on `key` that failed with `e` failed: [`Failure::Retry`] if
    /// another try may succeed ([`transient`]), else [`Failure::Final`].
    fn failure(
        &self,
        key: &str,
        range: Option<Range<u64>>,
        e: &object_store::Error,
    ) -> Failure<Error> {
        match transient(e) {
            true => Failure::Retry(self.error(key, range, e)),
            false => Failure::Final(self.error(key, range, e)),
        }
    }

    /// Runs `attempt` (try `n` from 1) under this store's retry budget: at most `retries + 1`
    /// tries while it fails with [`Failure::Retry`], waiting `backoff` (doubling up to 2 s)
    /// between them; a [`Failure::Final`] returns at once. `what` names the request in logs.
    async fn tried<T, F, Fut>(&self, what: impl Fn() -> String, mut attempt: F) -> Result<T>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = std::result::Result<T, Failure<Error>>>,
    {
        retry(
            self.retry_policy(),
            &mut (),
            |_, n| attempt(n),
            |_, error: &Error, _, delay| self.wait_to_retry(format!("{}: {error}", what()), delay),
        )
        .await
    }

    /// Bytes `range` of object `key`, checked to be exactly that long. A short body is
    /// transient, like a cut one.
    pub(crate) async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        let path = &self.path(key);
        let want = range.end.saturating_sub(range.start);
        self.tried(
            || self.object_url(key),
            |_| {
                let range = range.clone();
                async move {
                    match self.inner()?.get_range(path, range.clone()).await {
                        Ok(b) if b.len() as u64 == want => Ok(b),
                        Ok(b) => Err(Failure::Retry(Error::Remote {
                            object: self.object_url(key),
                            range: Some(range),
                            status: None,
                            reason: format!("short body: {} of {want} bytes", b.len()),
                        })),
                        Err(e) => Err(self.failure(key, Some(range), &e)),
                    }
                }
            },
        )
        .await
    }

    /// Bytes `range` of object `key` straight through the client (one try), for the baseline:
    /// returns the number of bytes.
    #[cfg_attr(
        not(feature = "diagnostics"),
        allow(dead_code, reason = "`zrecord::diagnostics::range_get_loop` uses it")
    )]
    pub(crate) async fn raw_get_range(&self, key: &str, range: Range<u64>) -> Result<u64> {
        self.inner()?
            .get_range(&self.path(key), range.clone())
            .await
            .map(|b| b.len() as u64)
            .map_err(|e| self.error(key, Some(range), &e))
    }

    /// The whole object `key`.
    pub(crate) async fn get(&self, key: &str) -> Result<Bytes> {
        let path = &self.path(key);
        self.tried(
            || self.object_url(key),
            |_| async move {
                let got = self.inner()?.get(path).await;
                let got = got.map_err(|e| self.failure(key, None, &e))?;
                got.bytes().await.map_err(|e| self.failure(key, None, &e))
            },
        )
        .await
    }

    /// The size of object `key`, `None` if there is none.
    pub(crate) async fn head(&self, key: &str) -> Result<Option<u64>> {
        Ok(self.head_version(key).await?.map(|(size, _)| size))
    }

    /// The size of object `key` and the store's version of it (its ETag, version id and
    /// modification time, one string: another write of the key, even of the same bytes, has
    /// another one), `None` if there is none.
    pub(crate) async fn head_version(&self, key: &str) -> Result<Option<(u64, String)>> {
        let path = &self.path(key);
        self.tried(
            || format!("the HEAD of {}", self.object_url(key)),
            |_| async move {
                match self.inner()?.head(path).await {
                    Ok(m) => Ok(Some((
                        m.size,
                        format!(
                            "etag {} version {} modified {}",
                            m.e_tag.as_deref().unwrap_or("-"),
                            m.version.as_deref().unwrap_or("-"),
                            m.last_modified.timestamp_millis()
                        ),
                    ))),
                    Err(object_store::Error::NotFound { .. }) => Ok(None),
                    Err(e) => Err(self.failure(key, None, &e)),
                }
            },
        )
        .await
    }

    /// Writes object `key` (overwriting: another try writes the same bytes).
    pub(crate) async fn put(&self, key: &str, bytes: Bytes) -> Result<()> {
        let path = &self.path(key);
        self.tried(
            || format!("the PUT of {}", self.object_url(key)),
            |_| {
                let payload = PutPayload::from_bytes(bytes.clone());
                async move {
                    self.inner()?
                        .put(path, payload)
                        .await
                        .map(|_| ())
                        .map_err(|e| self.failure(key, None, &e))
                }
            },
        )
        .await
    }

    /// Deletes object `key` (nothing if there is none).
    pub(crate) async fn delete(&self, key: &str) -> Result<()> {
        let path = &self.path(key);
        self.tried(
            || format!("the DELETE of {}", self.object_url(key)),
            |_| async move {
                match self.inner()?.delete(path).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                    Err(e) => Err(self.failure(key, None, &e)),
                }
            },
        )
        .await
    }

    /// Creates object `key` unless one exists (`If-None-Match: *`); never replaces an object
    /// on a store that honours the header. Both answers stores give to a create of a taken key
    /// mean it exists: 412 Precondition Failed (S3), and 409 Conflict (some S3-compatible stores,
    /// and S3 itself for a conditional write racing another); `object_store` reports them as
    /// `Precondition` and `AlreadyExists`. A create whose answer was lost (a reset connection, a
    /// timeout) is tried again; if that finds an object, it may be this create's own:
    /// [`Create::Maybe`], for the caller to read back.
    pub(crate) async fn create(&self, key: &str, bytes: Bytes) -> Result<Create> {
        let path = &self.path(key);
        self.tried(
            || format!("the create of {}", self.object_url(key)),
            |tries| {
                let payload = PutPayload::from_bytes(bytes.clone());
                async move {
                    let opts = PutOptions {
                        mode: PutMode::Create,
                        ..PutOptions::default()
                    };
                    match self.inner()?.put_opts(path, payload, opts).await {
                        Ok(_) => Ok(Create::Created),
                        Err(
                            object_store::Error::AlreadyExists { .. }
                            | object_store::Error::Precondition { .. },
                        ) => Ok(if tries == 1 {
                            Create::Exists
                        } else {
                            Create::Maybe
                        }),
                        Err(e) => Err(self.failure(key, None, &e)),
                    }
                }
            },
        )
        .await
    }

    /// Uploads object `key` in parts of `part` bytes read by `read(offset, len)`, several
    /// parts at once, each request retried inside the client (see [`Store::uploads`]); the
    /// upload is not tried again whole.
    pub(crate) async fn put_multipart(
        &self,
        key: &str,
        size: u64,
        part: usize,
        read: impl Fn(u64, usize) -> Result<Bytes>,
    ) -> Result<()> {
        let upload = self
            .uploads()?
            .put_multipart(&self.path(key))
            .await
            .map_err(|e| self.error(key, None, &e))?;
        let mut writer = object_store::WriteMultipart::new_with_chunk_size(upload, part);
        let mut offset = 0u64;
        while offset < size {
            let len = usize::try_from(size - offset)
                .unwrap_or(usize::MAX)
                .min(part);
            let bytes = match read(offset, len) {
                Ok(b) => b,
                Err(e) => {
                    let _ = writer.abort().await;
                    return Err(e);
                }
            };
            if let Err(e) = writer.wait_for_capacity(4).await {
                return Err(self.error(key, None, &e));
            }
            writer.write(&bytes);
            offset = offset.saturating_add(len as u64);
        }
        writer
            .finish()
            .await
            .map(|_| ())
            .map_err(|e| self.error(key, None, &e))
    }

    /// The keys under `dir` (relative to the dataset prefix), each `dir/<its last segment>`. A
    /// listing that fails (a cut body, a reset) is started again, like a failed request.
    pub(crate) async fn list(&self, dir: &str) -> Result<Vec<String>> {
        Ok(self
            .list_objects(dir)
            .await?
            .into_iter()
            .map(|(key, _, _)| {
                let name = key.rsplit('/').next().unwrap_or("");
                format!("{dir}/{name}")
            })
            .collect())
    }

    /// The store at `sub` under this one's prefix (`parts/<id>`), sharing this one's client
    /// and its connections: the stores of a collection's parts.
    pub(crate) fn child(&self, sub: &str) -> Result<Arc<Store>> {
        let client = Arc::clone(self.inner()?);
        Ok(Arc::new(Store {
            url: self.object_url(sub),
            client: ForkLocal::with(Ok(client)),
            builder: self.builder.clone(),
            uploads: Arc::clone(&self.uploads),
            upload_retry: self.upload_retry.clone(),
            prefix: self.path(sub),
            retries: self.retries,
            backoff: self.backoff,
        }))
    }

    /// Every object under `dir` (relative to the prefix), at any depth: its key relative to
    /// the prefix, its size and its last modification time. A listing that fails is started
    /// again, like a failed request.
    pub(crate) async fn list_objects(
        &self,
        dir: &str,
    ) -> Result<Vec<(String, u64, std::time::SystemTime)>> {
        let base = self.path(dir);
        let base = &base;
        let skip = self.prefix.as_ref().len();
        self.tried(
            || format!("the listing of {}", self.object_url(dir)),
            |_| async move {
                let mut out = Vec::new();
                let mut stream = self.inner()?.list(Some(base));
                while let Some(item) = stream.next().await {
                    match item {
                        Ok(meta) => {
                            let full: &str = meta.location.as_ref();
                            let key = full.get(skip..).unwrap_or("").trim_start_matches('/');
                            let millis =
                                u64::try_from(meta.last_modified.timestamp_millis()).unwrap_or(0);
                            let at = std::time::UNIX_EPOCH + Duration::from_millis(millis);
                            out.push((key.to_string(), meta.size, at));
                        }
                        Err(e) => return Err(self.failure(dir, None, &e)),
                    }
                }
                Ok(out)
            },
        )
        .await
    }

    /// The policy of this store's retries: `retries` after the first try, from `backoff`
    /// doubling up to 2 s.
    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::default()
            .attempts(self.retries.saturating_add(1))
            .backoff(self.backoff)
            .max_backoff(Duration::from_secs(2).max(self.backoff))
    }

    /// Waits `delay` before another try of `what`.
    async fn wait_to_retry(&self, what: String, delay: Duration) -> bool {
        tracing::debug!("retrying {what}");
        tokio::time::sleep(delay).await;
        true
    }
}

/// The client configuration of `provider` for `bucket` (S3, GCS: a bucket; Azure: a container,
/// or `container@account.host`), from the environment's variables, then `pairs`, with `retry`.
fn configure(
    provider: Provider,
    scheme: &str,
    bucket: &str,
    pairs: &[&(String, String)],
    retry: RetryConfig,
) -> std::result::Result<Rebuild, String> {
    let unknown = |k: &str, e: &dyn std::fmt::Display| {
        format!("unknown object-store option {k:?} for {scheme}:// URLs: {e}")
    };
    match provider {
        Provider::S3 => {
            let mut b = AmazonS3Builder::from_env().with_bucket_name(bucket);
            for (k, v) in pairs {
                b = b.with_config(k.parse().map_err(|e| unknown(k, &e))?, v);
            }
            Ok(Rebuild::S3(Box::new(b.with_retry(retry))))
        }
        #[cfg(feature = "gcs")]
        Provider::Gcs => {
            let mut b = GoogleCloudStorageBuilder::from_env().with_bucket_name(bucket);
            for (k, v) in pairs {
                b = b.with_config(k.parse().map_err(|e| unknown(k, &e))?, v);
            }
            Ok(Rebuild::Gcs(Box::new(b.with_retry(retry))))
        }
        #[cfg(feature = "azure")]
        Provider::Azure => {
            let mut b = MicrosoftAzureBuilder::from_env();
            // `container@account.dfs.core.windows.net`: object_store reads both off the URL.
            b = if bucket.contains('@') {
                b.with_url(format!("{scheme}://{bucket}"))
            } else {
                b.with_container_name(bucket)
            };
            for (k, v) in pairs {
                b = b.with_config(k.parse().map_err(|e| unknown(k, &e))?, v);
            }
            Ok(Rebuild::Azure(Box::new(b.with_retry(retry))))
        }
        #[cfg(not(all(feature = "gcs", feature = "azure")))]
        other => Err(format!(
            "{scheme}:// URLs need zrecord's `{}` feature, which this build does not have",
            other.feature()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store over `object_store`'s in-memory store, prefix `ds`.
    fn memory() -> Arc<Store> {
        Arc::new(Store {
            url: "s3://memory/ds".into(),
            client: ForkLocal::with(Ok(Arc::new(object_store::memory::InMemory::new()))),
            builder: None,
            uploads: Arc::new(ForkLocal::new()),
            upload_retry: RetryConfig::default(),
            prefix: ObjectPath::from("ds"),
            retries: 0,
            backoff: Duration::from_millis(1),
        })
    }

    #[test]
    fn a_create_never_replaces_an_object() {
        let store = memory();
        let s = Arc::clone(&store);
        let (first, second, third, kept) = block_on(async move {
            let key = "_zrecord/commits/00000000000000000001.json";
            let first = s.create(key, Bytes::from_static(b"first")).await?;
            let second = s.create(key, Bytes::from_static(b"second")).await?;
            let third = s.create(key, Bytes::from_static(b"first")).await?;
            let kept = s.get(key).await?;
            Ok::<_, Error>((first, second, third, kept))
        })
        .unwrap()
        .unwrap();
        assert_eq!(first, Create::Created);
        assert_eq!(second, Create::Exists);
        assert_eq!(third, Create::Exists);
        assert_eq!(&kept[..], b"first");
    }

    /// A one-request-per-connection HTTP server on loopback answering every request with
    /// `status`; returns its endpoint.
    fn answering(status: &'static str) -> String {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut length = 0usize;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        break;
                    }
                    let lower = line.to_ascii_lowercase();
                    if let Some(v) = lower.strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut body = vec![0u8; length];
                let _ = reader.read_exact(&mut body);
                let xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>\
                           ConditionalRequestConflict</Code><Message>conflict</Message></Error>";
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status}\r\nContent-Type: application/xml\r\nContent-Length: \
                     {}\r\nConnection: close\r\n\r\n{xml}",
                    xml.len()
                );
            }
        });
        endpoint
    }

    /// Options pointing each provider's client at `endpoint` with explicit test credentials
    /// (no identity or metadata endpoint is asked for a token: the sandboxes this runs in
    /// refuse those requests, and the creates below would fail), all in one `StoreOptions`:
    /// each provider takes its own keys and skips the others'.
    fn every_provider_at(endpoint: &str) -> StoreOptions {
        StoreOptions::default()
            .with("aws_endpoint", endpoint)
            .with("aws_access_key_id", "k")
            .with("aws_secret_access_key", "s")
            .with("aws_region", "us-east-1")
            .with("aws_allow_http", "true")
            .with("aws_virtual_hosted_style_request", "false")
            .with("google_base_url", endpoint)
            // A static token: `google_skip_signature` alone still has object_store 0.14 ask the
            // metadata server for one before every upload.
            .with("google_bearer_token", "t")
            .with("azure_storage_account_name", "devstoreaccount1")
            .with("azure_storage_account_key", "a2V5")
            .with(
                "azure_storage_endpoint",
                format!("{endpoint}/devstoreaccount1"),
            )
            .with("azure_allow_http", "true")
            .retries(0)
    }

    #[test]
    fn a_create_answered_409_or_412_found_the_object() {
        for url in ["s3://bucket/ds", "gs://bucket/ds", "az://container/ds"] {
            for status in ["409 Conflict", "412 Precondition Failed"] {
                let store = Store::open(url, &every_provider_at(&answering(status))).unwrap();
                let got = block_on(async move {
                    store
                        .create("_zrecord/commits/00000000000000000001.json", Bytes::new())
                        .await
                })
                .unwrap();
                assert!(matches!(got, Ok(Create::Exists)), "{url} {status}: {got:?}");
            }
        }
    }

    #[test]
    fn each_scheme_opens_its_provider() {
        let options = every_provider_at("http://127.0.0.1:9");
        for url in [
            "s3://b/p",
            "s3a://b/p/q",
            "gs://b/p",
            "gs://b",
            "az://c/p",
            "azure://c/p",
            "abfs://c/p",
            "abfss://c@account.dfs.core.windows.net/p",
        ] {
            let store = Store::open(url, &options);
            assert!(store.is_ok(), "{url}: {:?}", store.err());
        }
        for (url, says) in [
            ("gcs://b/p", "not supported"),
            ("gs:///p", "no bucket"),
            ("az:///p", "no bucket"),
            ("abfss://c@account.example.com/p", "cannot configure"),
        ] {
            match Store::open(url, &options) {
                Err(e @ Error::InvalidConfig { .. }) => {
                    assert!(e.to_string().contains(says), "{url}: {e}");
                }
                other => panic!("{url}: {other:?}"),
            }
        }
        // A key of the URL's provider that it does not know is refused, naming it.
        for (url, key) in [
            ("gs://b/p", "google_no_such_key"),
            ("az://c/p", "azure_no_such_key"),
            ("s3://b/p", "aws_no_such_key"),
        ] {
            let e = Store::open(url, &options.clone().with(key, "1")).unwrap_err();
            assert!(e.to_string().contains(key), "{url}: {e}");
        }
    }

    #[test]
    fn keys_go_to_their_provider() {
        assert!(Provider::Gcs.keeps("google_base_url"));
        assert!(!Provider::Gcs.keeps("aws_endpoint"));
        assert!(!Provider::Gcs.keeps("azure_storage_account_key"));
        assert!(Provider::Azure.keeps("azure_storage_account_key"));
        assert!(!Provider::S3.keeps("google_service_account_key"));
        for p in Provider::ALL {
            assert!(p.keeps("timeout") && p.keeps("allow_http"), "{p:?}");
            for s in p.schemes() {
                assert_eq!(Provider::of_scheme(s), Some(p));
            }
        }
        assert_eq!(Provider::of_scheme("gcs"), None);
        assert_eq!(Provider::of_scheme("file"), None);
    }
}
