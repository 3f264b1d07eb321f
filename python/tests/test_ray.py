"""zrecord.ray.Datasink on a real Ray cluster (two nodes on this host), into a local directory
and into s3s-fs: the collection a write_datasink commits holds every input row exactly once,
byte-exact and in input order, though one write task is SIGKILLed mid-write and retried by Ray;
four reader processes sharding it deliver each index exactly once."""

from __future__ import annotations

import multiprocessing
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import ray
import ray.data

import zrecord
import zrecord.ray

TESTS = str(Path(__file__).resolve().parent)


@pytest.fixture(scope="module")
def cluster():
    """A head node and a second node, one CPU each, on this host; fails (never skips) when Ray
    cannot start."""
    from ray.cluster_utils import Cluster

    # The write tasks import ray_support from this directory; the nodes' workers inherit it.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (TESTS, os.environ.get("PYTHONPATH")) if p
    )
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    # Every node on this host. Not --node-ip-address=127.0.0.1: Ray 2.60's ray.init rewrites a
    # loopback address to the host's own (services.resolve_ip_for_localhost) and then cannot
    # reach a GCS bound to loopback. The host's address is this machine's; nothing leaves it.
    node = dict(num_cpus=1, object_store_memory=150 * 2**20)
    c = Cluster(
        initialize_head=True,
        head_node_args=dict(node, include_dashboard=False),
    )
    c.add_node(**node)
    ray.init(address=c.address, log_to_driver=False)
    assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    yield c
    ray.shutdown()
    c.shutdown()


def _write(cluster, url: str, n: int, tasks: int, marker: Path, **options: Any) -> dict[str, Any]:
    import ray_support

    sys.path.insert(0, TESTS)
    ds = ray.data.range(n, override_num_blocks=tasks).map_batches(
        ray_support.to_records, batch_size=n // tasks // 4, batch_format="numpy"
    )
    sink = ray_support.KillingDatasink(
        url, ray_support.SCHEMA, kill_task=tasks // 2, marker=str(marker), **options
    )
    ds.write_datasink(sink)
    assert marker.exists(), "the chosen write task was never killed"
    assert sink.report is not None
    return sink.report


def _read_shard(args: tuple[str, dict[str, Any] | None, int, int]) -> list[int]:
    """One reader process: its shard of one epoch, every record checked against its id. Local:
    shuffled, interleaved shards; on the store: in order, contiguous shards (each batch a few
    coalesced range requests instead of one per record)."""
    url, storage_options, rank, world = args
    import ray_support

    kw = {"storage_options": storage_options} if storage_options else {}
    ds = zrecord.open(url, **kw)
    seen: list[int] = []
    remote = storage_options is not None
    loader = zrecord.Loader(ds, batch_size=4096, shuffle=not remote, seed=5, epochs=1,
                            shard=(rank, world),
                            shard_mode="contiguous" if remote else "interleaved", workers=2)
    for b in loader:
        idx = b.indices
        ids = b["id"]
        assert np.array_equal(ids, idx), "record i is not input row i"
        assert np.array_equal(b["emb"], ray_support.emb(idx))
        text = b["text"]
        for j, i in enumerate(idx.tolist()):
            assert text[j].tobytes() == ray_support.text(i), f"record {i}: wrong text"
        seen.extend(idx.tolist())
    return seen


def _check(url: str, n: int, tasks: int, report: dict[str, Any],
           storage_options: dict[str, Any] | None) -> None:
    assert report["len"] == n
    assert report["parts"] == tasks == len(report["ids"])
    # Task order: part k holds task k's rows.
    assert [int(i.split("-")[0]) for i in report["ids"]] == list(range(tasks))
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4, initializer=sys.path.insert, initargs=(0, TESTS)) as pool:
        shards = pool.map(_read_shard, [(url, storage_options, r, 4) for r in range(4)])
    every = np.concatenate([np.asarray(s, np.int64) for s in shards])
    assert len(every) == n, f"{len(every)} indices delivered for {n} records"
    assert np.array_equal(np.sort(every), np.arange(n)), "an index twice, or one missing"


def test_a_local_collection_written_by_ray(cluster, tmp_path):
    root = tmp_path / "coll"
    n, tasks = 200_000, 8
    report = _write(cluster, str(root), n, tasks, tmp_path / "killed", chunk_size_bytes=1 << 20)
    _check(str(root), n, tasks, report, None)
    # The dead attempt's part is under parts/ but in no manifest: nine directories, eight parts.
    assert len(list((root / "parts").iterdir())) == tasks + 1


def test_an_s3_collection_written_by_ray(cluster, s3, tmp_path):
    """A million records in eight tasks into s3s-fs: each task pushes its part to
    <url>/parts/<id>, the driver commits them in task order."""
    url = s3.url("ray/coll")
    n, tasks = 1_000_000, 8
    report = _write(cluster, url, n, tasks, tmp_path / "killed",
                    storage_options=s3.options, chunk_size_bytes=4 << 20)
    _check(url, n, tasks, report, s3.options)
    # The killed attempt's scratch directory (and its lock) did not outlive the write.
    parent = zrecord.ray.scratch_parent(url)
    assert not os.path.isdir(parent) or os.listdir(parent) == [], os.listdir(parent)


def _read_all(args: tuple[str, dict[str, Any] | None]) -> tuple[int, int]:
    """One reader process: the collection's length and the records a loader delivers."""
    url, storage_options = args
    kw = {"storage_options": storage_options} if storage_options else {}
    ds = zrecord.open(url, **kw)
    loader = zrecord.Loader(ds, batch_size=16, epochs=1)
    return len(ds), sum(len(b.indices) for b in loader)


def test_a_write_of_no_rows_leaves_an_empty_collection(cluster, s3, tmp_path):
    """Filtering out every row is a legitimate result: the new collection reads as an empty
    dataset (a reader neither fails nor hangs), and another empty write adds no manifest."""
    import ray_support

    for url, options in [(str(tmp_path / "empty"), None), (s3.url("ray/empty"), s3.options)]:
        kw = {"storage_options": options} if options else {}
        for attempt in range(2):
            ds = ray.data.range(100, override_num_blocks=2).filter(lambda r: False)
            sink = zrecord.ray.Datasink(url, ray_support.SCHEMA, **kw)
            ds.write_datasink(sink)
            assert sink.report is not None
            assert (sink.report["number"], sink.report["len"]) == (1, 0), (attempt, sink.report)
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(1, initializer=sys.path.insert, initargs=(0, TESTS)) as pool:
            got = pool.apply_async(_read_all, ((url, options),))
            assert got.get(timeout=300) == (0, 0)
