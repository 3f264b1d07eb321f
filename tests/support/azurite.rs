//! Azurite's Blob service (`azurite-blob`, npm), the Azure Blob Storage emulator, for the
//! `az://` tests: started on a free loopback port by the test with a container [`CONTAINER`],
//! killed when the handle drops. Azurite is installed, pinned, with npm into a directory under
//! the target directory the first time a test needs it (`npm install --prefix`: about half a
//! minute, once; offline afterwards). It runs with `--disableTelemetry`: no request leaves the
//! machine. A test that needs it fails (never passes) when it cannot be installed or started,
//! saying why.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;

use zrecord::remote::StoreOptions;

#[path = "s3.rs"]
mod s3;

/// The Azurite release the tests run on.
pub const AZURITE_VERSION: &str = "3.35.0";

/// The container every server has.
pub const CONTAINER: &str = "zrecord";

/// Azurite's well-known development account and its key (public, in Azurite's documentation).
pub const ACCOUNT: &str = "devstoreaccount1";
pub const ACCOUNT_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// A running `azurite-blob`.
pub struct Azurite {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// Its workspace (`--location`) and log.
    dir: tempfile::TempDir,
}

/// Where Azurite is installed: `ZRECORD_AZURITE_DIR`, else `target/tmp/azurite-<version>`.
fn prefix() -> PathBuf {
    if let Ok(p) = std::env::var("ZRECORD_AZURITE_DIR") {
        return PathBuf::from(p);
    }
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("azurite-{AZURITE_VERSION}"))
}

fn node() -> String {
    std::env::var("ZRECORD_NODE").unwrap_or_else(|_| "node".into())
}

/// Azurite's blob service script, installed first if it is missing.
fn script() -> PathBuf {
    static INSTALL: Mutex<()> = Mutex::new(());
    let _one = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = prefix();
    // One install across processes too (nextest runs each test in its own): an exclusive lock
    // on a file beside the directory, held until this function returns.
    let lock_path = dir.with_extension("lock");
    if let Some(parent) = lock_path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    let lock = std::fs::File::create(&lock_path).unwrap();
    lock.lock().unwrap();
    let bin = dir.join("node_modules/azurite/dist/src/blob/main.js");
    // Written last: a directory without it is an interrupted install, done again.
    let done = dir.join(format!("zrecord-installed-{AZURITE_VERSION}"));
    if bin.is_file() && done.is_file() {
        return bin;
    }
    eprintln!(
        "installing azurite@{AZURITE_VERSION} into {} (once)",
        dir.display()
    );
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let npm = std::env::var("ZRECORD_NPM").unwrap_or_else(|_| "npm".into());
    let out = Command::new(&npm)
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            "--prefix",
        ])
        .arg(&dir)
        .arg(format!("azurite@{AZURITE_VERSION}"))
        .output()
        .unwrap_or_else(|e| panic!("installing azurite: cannot run {npm}: {e}"));
    assert!(
        out.status.success(),
        "installing azurite: npm install failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(bin.is_file(), "npm installed no {}", bin.display());
    std::fs::write(&done, AZURITE_VERSION).unwrap();
    bin
}

/// Creates a container with a Shared Key request signed with the development account's key
/// (object_store has no call for it), in node: its `crypto` signs, no package needed.
const CREATE_CONTAINER: &str = r#"
const http = require('http'), crypto = require('crypto');
const [port, account, keyText, container] = process.argv.slice(1);
const key = Buffer.from(keyText, 'base64');
const date = new Date().toUTCString(), version = '2021-08-06';
const path = `/${account}/${container}`;
const toSign = ['PUT', '', '', '', '', '', '', '', '', '', '', '',
  `x-ms-date:${date}\nx-ms-version:${version}`, `/${account}${path}\nrestype:container`].join('\n');
const sig = crypto.createHmac('sha256', key).update(toSign, 'utf8').digest('base64');
const req = http.request({ host: '127.0.0.1', port, method: 'PUT', path: `${path}?restype=container`,
  headers: { 'x-ms-date': date, 'x-ms-version': version, 'Content-Length': 0,
             Authorization: `SharedKey ${account}:${sig}` } }, res => {
  let body = ''; res.on('data', d => body += d);
  res.on('end', () => { console.log(res.statusCode, body); process.exit(res.statusCode === 201 ? 0 : 1); });
});
req.on('error', e => { console.error(e.message); process.exit(2); });
req.end();
"#;

/// Fires `n` simultaneous conditional creates (`PUT` Blob with `If-None-Match: *`) of one
/// fresh blob per round, `rounds` times, each on its own connection; prints a JSON object of the
/// answers' status codes (`{"201": rounds, "409": …}`) and the rounds in which other than
/// exactly one create got 201.
const RACE_CREATES: &str = r#"
const http = require('http'), crypto = require('crypto');
const [port, account, keyText, container, n, rounds] = process.argv.slice(1);
const key = Buffer.from(keyText, 'base64');
function put(blob, body) {
  return new Promise(res => {
    const date = new Date().toUTCString(), version = '2021-08-06';
    const path = `/${account}/${container}/${blob}`;
    const toSign = ['PUT', '', '', String(body.length), '', 'application/octet-stream', '', '', '',
      '*', '', '', `x-ms-blob-type:BlockBlob\nx-ms-date:${date}\nx-ms-version:${version}`,
      `/${account}${path}`].join('\n');
    const sig = crypto.createHmac('sha256', key).update(toSign, 'utf8').digest('base64');
    const req = http.request({ host: '127.0.0.1', port, method: 'PUT', path, agent: false,
      headers: { 'x-ms-date': date, 'x-ms-version': version, 'x-ms-blob-type': 'BlockBlob',
        'If-None-Match': '*', 'Content-Type': 'application/octet-stream',
        'Content-Length': body.length, Authorization: `SharedKey ${account}:${sig}` } },
      r => { r.resume(); r.on('end', () => res(String(r.statusCode))); });
    req.on('error', e => res('error: ' + e.message)); req.end(body);
  });
}
(async () => {
  const codes = {}; let other = 0;
  for (let r = 0; r < Number(rounds); r++) {
    const got = await Promise.all([...Array(Number(n))].map((_, i) =>
      put(`race-creates/${r}`, Buffer.alloc(1000 + i * 4000, i))));
    got.forEach(c => codes[c] = (codes[c] || 0) + 1);
    if (got.filter(c => c === '201').length !== 1) other++;
  }
  console.log(JSON.stringify({ codes, rounds_without_exactly_one_created: other }));
})();
"#;

impl Azurite {
    /// Races `n` conditional creates of one blob, `rounds` times (see [`RACE_CREATES`]):
    /// the answers' status codes with their counts, and the rounds in which other than exactly
    /// one create succeeded.
    pub fn race_creates(&self, n: u32, rounds: u32) -> String {
        let port = self.endpoint.rsplit(':').next().unwrap();
        let args = [port, ACCOUNT, ACCOUNT_KEY, CONTAINER];
        let out = Command::new(node())
            .args(["-e", RACE_CREATES])
            .args(args)
            .args([n.to_string(), rounds.to_string()])
            .output()
            .unwrap_or_else(|e| panic!("cannot run node: {e}"));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Starts `azurite-blob` with the container [`CONTAINER`]. Panics, saying why, if it
    /// cannot.
    pub fn start() -> Azurite {
        Azurite::start_on(s3::free_port())
    }

    /// Stops this server and starts an empty one (the container [`CONTAINER`] and nothing in
    /// it) on the same port: everything stored is deleted, and clients of the old one reach
    /// the new one at the same endpoint.
    pub fn restart_empty(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let port: u16 = self.endpoint.rsplit(':').next().unwrap().parse().unwrap();
        *self = Azurite::start_on(port);
    }

    /// Starts `azurite-blob` on `port` with the container [`CONTAINER`].
    fn start_on(port: u16) -> Azurite {
        let script = script();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("azurite.log");
        let out = std::fs::File::create(&log).unwrap();
        let mut child = Command::new(node())
            .arg(&script)
            .args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
            .args([
                "--skipApiVersionCheck",
                "--loose",
                "--disableTelemetry",
                "--silent",
            ])
            .arg("--location")
            .arg(dir.path().join("data"))
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {} with node: {e}", script.display()));
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        s3::wait_listening(addr, &mut child, &log, "azurite-blob");
        let server = Azurite {
            child,
            endpoint: format!("http://{addr}"),
            dir,
        };
        server.create_container(port, &log);
        server
    }

    fn create_container(&self, port: u16, log: &Path) {
        let out = Command::new(node())
            .args([
                "-e",
                CREATE_CONTAINER,
                &port.to_string(),
                ACCOUNT,
                ACCOUNT_KEY,
                CONTAINER,
            ])
            .output()
            .unwrap_or_else(|e| panic!("cannot run node: {e}"));
        assert!(
            out.status.success(),
            "azurite-blob did not create container {CONTAINER} ({}): {}{}\nits log:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }

    /// Client options for this server.
    pub fn options(&self) -> StoreOptions {
        options_for(&self.endpoint)
    }

    /// `az://zrecord/<prefix>`.
    pub fn url(&self, prefix: &str) -> String {
        format!("az://{CONTAINER}/{prefix}")
    }
}

/// Client options for an Azurite endpoint (`http://127.0.0.1:PORT`, or a proxy in front of
/// one): the development account and key, the account in the path as Azurite wants it, plain
/// HTTP. An explicit key: the client asks no identity endpoint for a token.
pub fn options_for(endpoint: &str) -> StoreOptions {
    StoreOptions::default()
        .with("azure_storage_account_name", ACCOUNT)
        .with("azure_storage_account_key", ACCOUNT_KEY)
        .with("azure_storage_endpoint", format!("{endpoint}/{ACCOUNT}"))
        .with("azure_allow_http", "true")
}

impl Drop for Azurite {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
