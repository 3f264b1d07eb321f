//! An S3 server for the tests: s3s-fs over a temporary folder, on a free loopback port, started
//! by the test and killed when the handle drops. A test that needs it fails (never passes) when
//! it cannot start, saying why.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use zrecord::remote::StoreOptions;

/// The bucket every test server has.
pub const BUCKET: &str = "zrecord-test";

/// A running s3s-fs.
pub struct S3Server {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// The folder it serves (one subfolder per bucket).
    pub root: tempfile::TempDir,
    log: PathBuf,
}

/// Where the s3s-fs binary is: `ZRECORD_S3S_FS`, else `s3s-fs` on the `PATH` or in
/// `~/.cargo/bin`.
fn binary() -> PathBuf {
    if let Ok(p) = std::env::var("ZRECORD_S3S_FS") {
        return PathBuf::from(p);
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("s3s-fs"))
            .find(|p| p.is_file())
    });
    on_path.unwrap_or_else(|| {
        PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cargo/bin/s3s-fs")
    })
}

/// A free loopback port.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until something accepts connections on `addr`.
pub fn wait_listening(addr: SocketAddr, child: &mut Child, log: &Path, what: &str) {
    let start = Instant::now();
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "{what} exited with {status} before listening on {addr}; its output:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{what} did not listen on {addr} within 20 s; its output:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl S3Server {
    /// Starts s3s-fs with the bucket [`BUCKET`]. Panics, saying why, if it cannot.
    pub fn start() -> S3Server {
        let bin = binary();
        assert!(
            bin.is_file(),
            "the S3 test server is not installed: no s3s-fs at {} (install it with `cargo \
             install --locked s3s-fs@0.14.1 --features binary`, or set ZRECORD_S3S_FS)",
            bin.display()
        );
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join(BUCKET)).unwrap();
        let port = free_port();
        let log = root.path().join("s3s-fs.log");
        let out = std::fs::File::create(&log).unwrap();
        let mut child = Command::new(&bin)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", "zrecord", "--secret-key", "zrecord-secret"])
            .arg(root.path())
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        wait_listening(addr, &mut child, &log, "s3s-fs");
        S3Server {
            child,
            endpoint: format!("http://{addr}"),
            root,
            log,
        }
    }

    /// Client options for this server.
    pub fn options(&self) -> StoreOptions {
        options_for(&self.endpoint)
    }

    /// `s3://zrecord-test/<prefix>`.
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{BUCKET}/{prefix}")
    }

    /// The file s3s-fs keeps object `key` of the bucket in.
    pub fn object_file(&self, key: &str) -> PathBuf {
        self.root.path().join(BUCKET).join(key)
    }
}

/// Client options for an S3 endpoint with the test credentials.
pub fn options_for(endpoint: &str) -> StoreOptions {
    StoreOptions::default()
        .with("aws_endpoint", endpoint)
        .with("aws_access_key_id", "zrecord")
        .with("aws_secret_access_key", "zrecord-secret")
        .with("aws_region", "us-east-1")
        .with("aws_allow_http", "true")
        .with("aws_virtual_hosted_style_request", "false")
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
