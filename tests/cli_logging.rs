//! The tool logs through `tracing-subscriber`: `RUST_LOG` chooses what is shown, warnings are
//! shown by default, and a fallback from io_uring to the pread pool is one warning, printed
//! once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod cli_support;

use cli_support::{run, zrecord_env, zrecord_ok};
use std::process::Command;

/// Runs its arguments as a command with `io_uring_setup` (x86_64 syscall 425) failing with
/// ENOSYS, as under Docker's default seccomp profile; exits 77 if it cannot install the filter.
const WITHOUT_IO_URING: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
class F(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]
class P(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(F))]
# load the syscall number; io_uring_setup -> errno ENOSYS; anything else -> allow
prog = [F(0x20, 0, 0, 0), F(0x15, 0, 1, 425), F(0x06, 0, 0, 0x00050000 | 38), F(0x06, 0, 0, 0x7FFF0000)]
arr = (F * len(prog))(*prog)
fprog = P(len(prog), arr)
ul = ctypes.c_ulong
if libc.prctl(38, ul(1), ul(0), ul(0), ul(0)) != 0 or libc.prctl(22, ul(2), ctypes.byref(fprog), ul(0), ul(0)) != 0:
    sys.exit(77)
os.execv(sys.argv[1], sys.argv[1:])
"#;

fn dataset(tmp: &tempfile::TempDir) -> String {
    let dir = tmp.path().join("ds");
    let d = dir.to_str().unwrap().to_string();
    zrecord_ok(&[
        "bench",
        "make",
        &d,
        "--records",
        "64",
        "--record-bytes",
        "64",
    ]);
    d
}

#[test]
fn rust_log_chooses_what_is_shown() {
    let tmp = tempfile::tempdir().unwrap();
    let d = dataset(&tmp);
    let gather = [
        "bench",
        "gather",
        &d,
        "--batches",
        "2",
        "--batch",
        "8",
        "--json",
    ];
    // Default: warnings only; this machine's backend choice is an info line.
    let quiet = zrecord_env(&gather, &[]);
    assert!(quiet.ok, "{}", quiet.stderr);
    assert!(!quiet.stderr.contains("INFO"), "{}", quiet.stderr);
    // RUST_LOG=info shows the backend choice, once.
    let info = zrecord_env(&gather, &[("RUST_LOG", "zrecord=info")]);
    assert!(info.ok, "{}", info.stderr);
    let chosen: Vec<&str> = info
        .stderr
        .lines()
        .filter(|l| l.contains("zrecord reads through") || l.contains("io_uring is unavailable"))
        .collect();
    assert_eq!(chosen.len(), 1, "{}", info.stderr);
    // A filter of another crate hides ours.
    let other = zrecord_env(&gather, &[("RUST_LOG", "somethingelse=trace")]);
    assert!(other.ok && other.stderr.is_empty(), "{}", other.stderr);
}

#[test]
fn a_fallback_to_pread_is_one_warning() {
    if !cfg!(target_arch = "x86_64") {
        println!("skipped: the seccomp filter names the x86_64 syscall number");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let d = dataset(&tmp);
    let bin = env!("CARGO_BIN_EXE_zrecord");
    let args = [
        "bench",
        "gather",
        &d,
        "--backend",
        "uring",
        "--threads",
        "2",
        "--batches",
        "3",
        "--batch",
        "8",
        "--json",
    ];
    let without = |rust_log: Option<&str>| {
        let mut cmd = Command::new("python3");
        cmd.args(["-c", WITHOUT_IO_URING, bin])
            .args(args)
            .env_remove("ZRECORD_IO")
            .env_remove("RUST_LOG");
        if let Some(v) = rust_log {
            cmd.env("RUST_LOG", v);
        }
        run(&mut cmd)
    };
    let r = without(None);
    if r.code == Some(77) || r.stderr.contains("python3") && !r.ok {
        println!(
            "skipped: cannot install a seccomp filter here: {}",
            r.stderr
        );
        return;
    }
    assert!(r.ok, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(
        v["io_uring_available"], false,
        "the filter did not block io_uring"
    );
    assert_eq!(v["backend"], "psync");
    let warnings: Vec<&str> = r.stderr.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "{}", r.stderr);
    assert!(warnings[0].contains("pread"), "{}", r.stderr);
    // RUST_LOG=error silences it.
    let r = without(Some("error"));
    assert!(r.ok && r.stderr.is_empty(), "{}", r.stderr);
}
