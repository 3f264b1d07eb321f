//! moto's standalone S3 server (`moto_server`, PyPI) for the tests whose claim needs an atomic
//! conditional create (`If-None-Match: *`): started on a free loopback port by the test, killed
//! when the handle drops. moto is installed, pinned, into a virtual environment under the
//! target directory the first time a test needs it (`python3 -m venv`, then `pip install`:
//! about a minute, once). A test that needs it fails (never passes) when it cannot be installed
//! or started, saying why.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;

use zrecord::remote::StoreOptions;

#[path = "s3.rs"]
mod s3;

/// The moto release the tests run on.
pub const MOTO_VERSION: &str = "5.1.22";

/// The bucket every server has.
pub const BUCKET: &str = "zrecord-moto";

/// A running `moto_server`.
pub struct Moto {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    dir: tempfile::TempDir,
}

/// The virtual environment moto is installed in: `ZRECORD_MOTO_VENV`, else
/// `target/tmp/moto-<version>`.
fn venv() -> PathBuf {
    if let Ok(p) = std::env::var("ZRECORD_MOTO_VENV") {
        return PathBuf::from(p);
    }
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("moto-{MOTO_VERSION}"))
}

fn run(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("installing moto: cannot run {what}: {e}"));
    assert!(
        out.status.success(),
        "installing moto: {what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `moto_server` script, installed first if it is missing.
fn binary() -> PathBuf {
    static INSTALL: Mutex<()> = Mutex::new(());
    let _one = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = venv();
    // One installer across processes too (nextest runs every test in a process of its own, so
    // two tests that start moto would otherwise both install into one directory at once): an
    // exclusive lock on a file beside the venv, held until the install is done or found done.
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(format!("{}.lock", dir.display()))
        .unwrap();
    lock.lock().unwrap();
    let bin = dir.join("bin").join("moto_server");
    // Written last: a venv without it is an interrupted install, done again.
    let done = dir.join(format!("zrecord-installed-{MOTO_VERSION}"));
    if bin.is_file() && done.is_file() {
        return bin;
    }
    eprintln!(
        "installing moto[server]=={MOTO_VERSION} into {} (once)",
        dir.display()
    );
    let _ = std::fs::remove_dir_all(&dir);
    let python = std::env::var("ZRECORD_PYTHON").unwrap_or_else(|_| "python3".into());
    run(
        Command::new(&python).args(["-m", "venv"]).arg(&dir),
        &format!("{python} -m venv"),
    );
    run(
        Command::new(dir.join("bin").join("pip")).args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            &format!("moto[server]=={MOTO_VERSION}"),
        ]),
        "pip install",
    );
    assert!(bin.is_file(), "pip installed no {}", bin.display());
    std::fs::write(&done, MOTO_VERSION).unwrap();
    bin
}

impl Moto {
    /// Starts `moto_server` with the bucket [`BUCKET`]. Panics, saying why, if it cannot.
    pub fn start() -> Moto {
        let bin = binary();
        let dir = tempfile::tempdir().unwrap();
        let port = s3::free_port();
        let log = dir.path().join("moto.log");
        let out = std::fs::File::create(&log).unwrap();
        let mut child = Command::new(&bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        s3::wait_listening(addr, &mut child, &log, "moto_server");
        let server = Moto {
            child,
            endpoint: format!("http://{addr}"),
            dir,
        };
        server.create_bucket(addr, &log);
        server
    }

    /// Creates [`BUCKET`] (moto takes an unsigned request for it).
    fn create_bucket(&self, addr: SocketAddr, log: &Path) {
        let mut s = TcpStream::connect(addr).unwrap();
        write!(
            s,
            "PUT /{BUCKET} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: \
             close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 200"),
            "moto_server did not create bucket {BUCKET}: {answer}\nits log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }

    /// Client options for this server.
    pub fn options(&self) -> StoreOptions {
        s3::options_for(&self.endpoint)
    }

    /// `s3://zrecord-moto/<prefix>`.
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{BUCKET}/{prefix}")
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
