"""zrecord.commit_collection from Python: parts committed by two processes at once all land,
each exactly once, and read as one dataset in commit order; a retried commit adds nothing; a
part of another schema raises SchemaError naming the part and the field, and nothing committed
is lost."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import numpy as np
import pytest

import zrecord


def _part(path: Path, start: int, n: int) -> str:
    with zrecord.Writer.create(path, {"x": ("u64", [1])}, chunk_size_bytes=4096) as w:
        w.append_batch({"x": np.arange(start, start + n, dtype=np.uint64).reshape(-1, 1)})
    return str(path)


def _commit(args: tuple[str, list[str]]) -> dict:
    root, parts = args
    return zrecord.commit_collection(root, parts)


def test_two_processes_commit_at_once(tmp_path):
    root = tmp_path / "coll"
    groups = [
        [_part(tmp_path / f"p{g}-{k}", (g * 4 + k) * 100, 100) for k in range(4)] for g in range(2)
    ]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        reports = pool.map(_commit, [(str(root), g) for g in groups])
    assert sorted(len(r["added"]) for r in reports) == [4, 4]
    ds = zrecord.open(root)
    assert len(ds) == 800
    got = ds.take(np.arange(800))["x"][:, 0]
    # Each process's parts are contiguous, in the order it gave them; either process may be first.
    firsts = sorted({int(got[i]) // 400 for i in (0, 400)})
    assert firsts == [0, 1]
    for half in (got[:400], got[400:]):
        base = int(half[0])
        assert np.array_equal(half, np.arange(base, base + 400, dtype=np.uint64))
    # A retried commit adds nothing.
    again = zrecord.commit_collection(root, [str(root / "parts" / i) for i in reports[0]["ids"]])
    assert again["added"] == [] and again["len"] == 800


def test_a_part_of_another_schema_is_refused(tmp_path):
    root = tmp_path / "coll"
    zrecord.commit_collection(root, [_part(tmp_path / "a", 0, 10)])
    other = tmp_path / "b"
    with zrecord.Writer.create(other, {"y": ("u64", [1])}) as w:
        w.append_batch({"y": np.zeros((3, 1), np.uint64)})
    with pytest.raises(zrecord.SchemaError) as e:
        zrecord.commit_collection(root, [other])
    assert e.value.path == str(other) and e.value.field == "x"
    assert other.exists(), "a refused part is left where it was"
    assert len(zrecord.open(root)) == 10


def test_a_url_root_needs_the_remote_commit(tmp_path):
    with pytest.raises(zrecord.Error):
        zrecord.commit_collection("s3://bucket/none", [str(tmp_path / "a")])
