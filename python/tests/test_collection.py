"""zrecord.commit_collection from Python: parts committed by two processes at once all land,
each exactly once, and read as one dataset in commit order; a retried commit adds nothing; a
part of another schema raises SchemaError naming the part and the field, and nothing committed
is lost; on s3s-fs a part is pushed or referenced in place; gc removes only parts no
manifest names."""

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


def test_an_s3_collection_from_local_and_pushed_parts(s3, tmp_path):
    url = s3.url("py/coll")
    a = _part(tmp_path / "a", 0, 50)
    b = _part(tmp_path / "b", 50, 30)
    zrecord.push(b, f"{url}/parts/b", storage_options=s3.options)
    r = zrecord.commit_collection(url, [a, f"{url}/parts/b"], storage_options=s3.options)
    assert r["ids"] == ["a", "b"] and r["len"] == 80
    ds = zrecord.open(url, storage_options=s3.options)
    assert np.array_equal(ds.take(np.arange(80))["x"][:, 0], np.arange(80, dtype=np.uint64))
    with pytest.raises(zrecord.ConfigError) as e:
        zrecord.commit_collection(url, [s3.url("py/elsewhere")], storage_options=s3.options)
    assert e.value.part == s3.url("py/elsewhere") and e.value.collection.startswith("s3://")


def test_gc_removes_only_parts_no_manifest_names(tmp_path):
    root = tmp_path / "coll"
    zrecord.commit_collection(root, [_part(tmp_path / "kept", 0, 10)])
    _part(root / "parts" / "orphan", 10, 10)  # placed, never committed
    young = zrecord.gc_collection(root, 3600)
    assert young["removed"] == [] and "orphan" in young["kept"]
    r = zrecord.gc_collection(root, 0)
    assert r["removed"] == ["orphan"] and r["kept"] == ["kept"] and r["bytes_freed"] > 0
    assert len(zrecord.open(root)) == 10
    with pytest.raises(zrecord.ConfigError):
        zrecord.gc_collection(root, -1)


def test_a_part_of_another_collection_and_a_committed_part_are_refused(tmp_path):
    a, b = tmp_path / "a.zc", tmp_path / "b.zc"
    zrecord.commit_collection(a, [_part(tmp_path / "task-0", 0, 10)])
    part = a / "parts" / "task-0"
    with pytest.raises(zrecord.ConfigError) as e:
        zrecord.commit_collection(b, [part])
    assert e.value.path == str(part)
    assert e.value.collection == str(a.resolve()) and e.value.target == str(b)
    assert len(zrecord.open(a)) == 10
    # A committed part is immutable: a writer on it is refused before it changes anything.
    with pytest.raises(zrecord.ConfigError) as e:
        zrecord.Writer.open(part)
    assert e.value.part == "task-0" and e.value.collection == str(a.resolve())
    assert np.array_equal(zrecord.open(a).take(np.arange(10))["x"][:, 0], np.arange(10))
