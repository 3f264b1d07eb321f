//! A 3-node Garage cluster for the tests: three `garage server` processes on loopback, each with
//! its own config and folders in one temporary directory, joined into one layout (zone `dc1`,
//! replication factor 3) with a bucket and a key, through the `garage` CLI. Started by the test,
//! stopped when the handle drops. A test that needs it fails (never passes) when the binary is
//! missing or the cluster does not come up, saying why, with the servers' logs.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    dead_code
)]

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use zrecord::remote::StoreOptions;

#[path = "s3.rs"]
mod s3;

/// The bucket the cluster has.
pub const BUCKET: &str = "zrecord-garage";
/// The cluster's S3 region (`s3_region`): requests signed for another region are refused.
pub const REGION: &str = "garage";
/// The access key imported into the cluster, allowed to read, write and own [`BUCKET`].
pub const ACCESS_KEY_ID: &str = "GK5a7e0c0de0123456789abcde";
/// Its secret.
pub const SECRET_ACCESS_KEY: &str =
    "8d2f1c0e4b6a79358d2f1c0e4b6a79358d2f1c0e4b6a79358d2f1c0e4b6a7935";

/// How long the cluster may take to come up (a few seconds on a quiet machine).
const STARTUP: Duration = Duration::from_secs(60);

/// How to get the binary, for the failure messages.
const INSTALL: &str = "install it with `cargo install --locked garage@2.5.0`, or set \
                       ZRECORD_GARAGE to the binary";

/// One `garage server`.
pub struct Node {
    child: Option<Child>,
    config: PathBuf,
    log: PathBuf,
    /// `http://127.0.0.1:PORT`, its S3 API.
    pub endpoint: String,
    /// Its RPC address.
    pub rpc: SocketAddr,
    /// Its full node id (hex public key), known once the cluster is up.
    pub id: String,
}

/// A running 3-node cluster.
pub struct Garage {
    bin: PathBuf,
    nodes: Vec<Node>,
    /// The folder holding every node's config, metadata, data and log.
    pub dir: tempfile::TempDir,
}

/// Where the garage binary is: `ZRECORD_GARAGE`, else `garage` on the `PATH` or in
/// `~/.cargo/bin`.
fn binary() -> PathBuf {
    if let Ok(p) = std::env::var("ZRECORD_GARAGE") {
        return PathBuf::from(p);
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("garage"))
            .find(|p| p.is_file())
    });
    on_path.unwrap_or_else(|| {
        PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cargo/bin/garage")
    })
}

/// 64 hex digits, different for every cluster (the nodes' shared RPC secret).
fn rpc_secret() -> String {
    let mut x = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        ^ u64::from(std::process::id()).rotate_left(32);
    (0..4)
        .map(|_| {
            // splitmix64
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            format!("{:016x}", z ^ (z >> 31))
        })
        .collect()
}

/// Output text with whitespace runs collapsed, so `Key:    value` columns read `Key: value`.
fn squeeze(text: &str) -> String {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n")
}

impl Garage {
    /// Starts the cluster, with [`BUCKET`] and the key [`ACCESS_KEY_ID`] allowed on it, and
    /// waits until every node serves S3 requests. Panics, saying why, if it cannot.
    pub fn start() -> Garage {
        let bin = binary();
        assert!(
            bin.is_file(),
            "the Garage cluster tests need the garage binary: none at {}; {INSTALL}",
            bin.display()
        );
        let dir = tempfile::tempdir().unwrap();
        let secret = rpc_secret();
        let mut nodes = Vec::new();
        for n in 0..3 {
            let home = dir.path().join(format!("node{n}"));
            std::fs::create_dir(&home).unwrap();
            let rpc: SocketAddr = format!("127.0.0.1:{}", s3::free_port()).parse().unwrap();
            let s3_addr: SocketAddr = format!("127.0.0.1:{}", s3::free_port()).parse().unwrap();
            let admin: SocketAddr = format!("127.0.0.1:{}", s3::free_port()).parse().unwrap();
            let config = home.join("garage.toml");
            let text = format!(
                r#"metadata_dir = "{meta}"
data_dir = "{data}"
db_engine = "sqlite"
replication_factor = 3
rpc_bind_addr = "{rpc}"
rpc_public_addr = "{rpc}"
rpc_secret = "{secret}"

[s3_api]
s3_region = "{REGION}"
api_bind_addr = "{s3_addr}"
root_domain = ".s3.garage.localhost"

[admin]
api_bind_addr = "{admin}"
admin_token = "zrecord-admin-token"
"#,
                meta = home.join("meta").display(),
                data = home.join("data").display(),
            );
            std::fs::write(&config, text).unwrap();
            // The file holds the RPC secret: readable by its owner only, as garage expects.
            std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).unwrap();
            nodes.push(Node {
                child: None,
                config,
                log: home.join("garage.log"),
                endpoint: format!("http://{s3_addr}"),
                rpc,
                id: String::new(),
            });
        }
        let mut garage = Garage { bin, nodes, dir };
        for n in 0..3 {
            garage.spawn(n);
        }
        garage.form_cluster();
        garage
    }

    /// Starts node `n`'s server and waits until its RPC and S3 ports accept connections.
    fn spawn(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        let out = std::fs::File::create(&node.log).unwrap();
        let mut child = Command::new(&self.bin)
            .arg("-c")
            .arg(&node.config)
            .arg("server")
            .env("RUST_LOG", "garage=info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}; {INSTALL}", self.bin.display()));
        let what = format!("garage node {n}");
        s3::wait_listening(node.rpc, &mut child, &node.log, &what);
        let s3_addr: SocketAddr = node.endpoint.trim_start_matches("http://").parse().unwrap();
        s3::wait_listening(s3_addr, &mut child, &node.log, &what);
        node.child = Some(child);
    }

    /// Connects the nodes, assigns and applies the layout, imports the key, creates the
    /// bucket, and waits until each node serves it.
    fn form_cluster(&mut self) {
        for n in 0..3 {
            let out = self.cli(n, &["node", "id", "-q"]);
            let id = out.trim().split('@').next().unwrap_or_default().to_string();
            assert!(
                id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()),
                "`garage node id` of node {n} printed {out:?}, not `<64 hex digits>@<addr>`{}",
                self.logs()
            );
            self.nodes[n].id = id;
        }
        for n in 1..3 {
            let peer = format!("{}@{}", self.nodes[n].id, self.nodes[n].rpc);
            self.cli(0, &["node", "connect", &peer]);
        }
        // Node 0 sees the other two before roles name them.
        self.wait_for("node 0 connected to nodes 1 and 2", |g| {
            let status = g.try_cli(0, &["status"])?;
            let missing: Vec<usize> = (1..3)
                .filter(|&n| !status.contains(&g.nodes[n].id[..16]))
                .collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "`garage status` lacks nodes {missing:?}:\n{status}"
                ))
            }
        });
        let ids: Vec<String> = self.nodes.iter().map(|n| n.id.clone()).collect();
        let mut assign = vec!["layout", "assign", "-z", "dc1", "-c", "1G"];
        assign.extend(ids.iter().map(String::as_str));
        self.cli(0, &assign);
        self.cli(0, &["layout", "apply", "--version", "1"]);
        // Every node has the layout and sees all three storage nodes up.
        for n in 0..3 {
            self.wait_for(&format!("node {n} healthy"), |g| {
                let health = squeeze(&g.try_cli(n, &["health"])?);
                let want = [
                    "Cluster health: HEALTHY",
                    "Storage nodes: 3",
                    "Storage nodes up: 3",
                ];
                if want.iter().all(|w| health.contains(w)) {
                    Ok(())
                } else {
                    Err(format!("`garage health` on node {n}:\n{health}"))
                }
            });
        }
        self.cli(
            0,
            &[
                "key",
                "import",
                "--yes",
                "-n",
                "zrecord",
                ACCESS_KEY_ID,
                SECRET_ACCESS_KEY,
            ],
        );
        self.cli(0, &["bucket", "create", BUCKET]);
        self.cli(
            0,
            &[
                "bucket",
                "allow",
                "--read",
                "--write",
                "--owner",
                BUCKET,
                "--key",
                ACCESS_KEY_ID,
            ],
        );
        // The key and bucket reach every node: an object written through one node reads back
        // through each.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let key = ObjectPath::from("zrecord-garage-ready");
        for n in 0..3 {
            let store = self.object_store(n);
            let key = key.clone();
            self.wait_for(&format!("node {n} serving S3 requests"), |_| {
                rt.block_on(async {
                    if n == 0 {
                        store
                            .put(&key, PutPayload::from_static(b"ready"))
                            .await
                            .map_err(|e| format!("PUT through node 0: {e}"))?;
                    }
                    let got = store
                        .get(&key)
                        .await
                        .map_err(|e| format!("GET through node {n}: {e}"))?;
                    let bytes = got.bytes().await.map_err(|e| e.to_string())?;
                    if bytes.as_ref() == b"ready" {
                        Ok(())
                    } else {
                        Err(format!("GET through node {n} returned {bytes:?}"))
                    }
                })
            });
        }
        rt.block_on(self.object_store(0).delete(&key)).unwrap();
    }

    /// Polls `ready` every 100 ms until it is `Ok`; panics with its last error and the
    /// servers' logs after [`STARTUP`] or if a server exits.
    fn wait_for(&mut self, what: &str, mut ready: impl FnMut(&Garage) -> Result<(), String>) {
        let start = Instant::now();
        loop {
            let last = match ready(self) {
                Ok(()) => return,
                Err(e) => e,
            };
            let exited = self.nodes.iter_mut().enumerate().find_map(|(n, node)| {
                match node.child.as_mut().map(Child::try_wait) {
                    Some(Ok(Some(status))) => Some((n, status)),
                    _ => None,
                }
            });
            if let Some((n, status)) = exited {
                panic!(
                    "garage node {n} exited with {status} while waiting for {what}{}",
                    self.logs()
                );
            }
            assert!(
                start.elapsed() < STARTUP,
                "the Garage cluster was not up within {STARTUP:?}: waiting for {what}; last: \
                 {last}{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs `garage -c <node n's config> args…`; its stdout, or why it failed.
    fn try_cli(&self, n: usize, args: &[&str]) -> Result<String, String> {
        let out: Output = Command::new(&self.bin)
            .arg("-c")
            .arg(&self.nodes[n].config)
            .args(args)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}; {INSTALL}", self.bin.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() {
            Ok(stdout)
        } else {
            Err(format!(
                "`garage {}` on node {n} exited with {}:\n{stdout}{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// [`Self::try_cli`], panicking with the servers' logs on failure.
    fn cli(&self, n: usize, args: &[&str]) -> String {
        self.try_cli(n, args)
            .unwrap_or_else(|e| panic!("setting up the Garage cluster: {e}{}", self.logs()))
    }

    /// The last lines of every node's log, for a failure message.
    pub fn logs(&self) -> String {
        let mut text = String::new();
        for (n, node) in self.nodes.iter().enumerate() {
            let log = std::fs::read_to_string(&node.log).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(30)..];
            let _ = write!(
                text,
                "\n--- garage node {n} ({}), last {} lines:\n{}",
                node.log.display(),
                tail.len(),
                tail.join("\n")
            );
        }
        text
    }

    /// Node `n`'s S3 endpoint, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self, n: usize) -> &str {
        &self.nodes[n].endpoint
    }

    /// Client options for node `n`'s S3 API, with the cluster's key and region.
    pub fn options(&self, n: usize) -> StoreOptions {
        StoreOptions::default()
            .with("aws_endpoint", self.endpoint(n))
            .with("aws_access_key_id", ACCESS_KEY_ID)
            .with("aws_secret_access_key", SECRET_ACCESS_KEY)
            .with("aws_region", REGION)
            .with("aws_allow_http", "true")
            .with("aws_virtual_hosted_style_request", "false")
    }

    /// An `object_store` client of [`BUCKET`] through node `n`, for probing the server
    /// directly.
    pub fn object_store(&self, n: usize) -> Arc<dyn ObjectStore> {
        Arc::new(
            AmazonS3Builder::new()
                .with_endpoint(self.endpoint(n))
                .with_bucket_name(BUCKET)
                .with_access_key_id(ACCESS_KEY_ID)
                .with_secret_access_key(SECRET_ACCESS_KEY)
                .with_region(REGION)
                .with_allow_http(true)
                .with_virtual_hosted_style_request(false)
                .build()
                .unwrap(),
        )
    }

    /// `s3://zrecord-garage/<prefix>`.
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{BUCKET}/{prefix}")
    }

    /// Kills node `n` (SIGKILL) and reaps it. The others keep running.
    pub fn kill(&mut self, n: usize) {
        if let Some(mut child) = self.nodes[n].child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// Whether node `n` is still running.
    pub fn is_running(&mut self, n: usize) -> bool {
        self.nodes[n]
            .child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The folder of node `n` (config, metadata, data, log).
    pub fn node_dir(&self, n: usize) -> &Path {
        self.nodes[n].config.parent().unwrap()
    }
}

impl Drop for Garage {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}
