"""Fixtures: small datasets written through the Python writer, and an s3s-fs server."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

import zrecord

BACKENDS = ["uring", "psync", "mmap", "auto"]


def image(i: int) -> np.ndarray:
    """Record i's image: (3, 4, 4) uint8, a function of i."""
    return ((np.arange(48, dtype=np.uint32) * 7 + i * 13) % 251).astype(np.uint8).reshape(3, 4, 4)


def tokens(i: int) -> np.ndarray:
    """Record i's tokens: i % 7 int32 values (some empty)."""
    return (np.arange(i % 7, dtype=np.int32) + i * 100)


def write_small(path: Path, n: int = 200, chunk_size_bytes: int | None = 4096) -> Path:
    schema = {
        "image": ("u8", [3, 4, 4]),
        "label": ("i64", [1]),
        "tokens": "i32",
    }
    with zrecord.Writer.create(path, schema, chunk_size_bytes=chunk_size_bytes) as w:
        for start in range(0, n, 50):
            idx = range(start, min(n, start + 50))
            imgs = np.stack([image(i) for i in idx])
            labels = np.array([[i] for i in idx], dtype=np.int64)
            toks = [tokens(i) for i in idx]
            w.append_batch({"image": imgs, "label": labels, "tokens": toks})
    return path


@pytest.fixture
def small(tmp_path: Path) -> Path:
    return write_small(tmp_path / "small.zr")


@pytest.fixture(scope="session")
def seq_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1,000 records whose one field `x` is the record's index as u64."""
    path = tmp_path_factory.mktemp("seq") / "seq.zr"
    with zrecord.Writer.create(path, {"x": ("u64", [1])}, chunk_size_bytes=8192) as w:
        w.append_batch({"x": np.arange(1000, dtype=np.uint64).reshape(-1, 1)})
    return path


def _s3s_fs() -> str:
    explicit = os.environ.get("ZRECORD_S3S_FS")
    if explicit:
        return explicit
    found = shutil.which("s3s-fs")
    if found:
        return found
    return str(Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo")) / "bin" / "s3s-fs")


class S3:
    bucket = "zrecord-test"

    def __init__(self, endpoint: str):
        self.endpoint = endpoint
        self.options = {
            "aws_endpoint": endpoint,
            "aws_access_key_id": "zrecord",
            "aws_secret_access_key": "zrecord-secret",
            "aws_region": "us-east-1",
            "aws_allow_http": "true",
            "aws_virtual_hosted_style_request": "false",
        }

    def url(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix}"


@pytest.fixture(scope="session")
def s3():
    """An s3s-fs server on 127.0.0.1 (the server the Rust tests start). Fails, never skips,
    when it cannot start."""
    binary = _s3s_fs()
    assert os.path.isfile(binary), (
        f"the S3 test server is not installed: no s3s-fs at {binary} "
        "(bash tests/run.sh installs it)"
    )
    root = tempfile.mkdtemp(prefix="zrecord-s3-")
    os.mkdir(os.path.join(root, S3.bucket))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(os.path.join(root, "s3s-fs.log"), "wb")
    child = subprocess.Popen(
        [binary, "--host", "127.0.0.1", "--port", str(port),
         "--access-key", "zrecord", "--secret-key", "zrecord-secret", root],
        stdout=log, stderr=log,
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            assert child.poll() is None, f"s3s-fs exited: {open(log.name).read()}"
            assert time.monotonic() < deadline, "s3s-fs did not listen within 20 s"
            time.sleep(0.05)
    yield S3(f"http://127.0.0.1:{port}")
    child.kill()
    child.wait()
    shutil.rmtree(root, ignore_errors=True)
