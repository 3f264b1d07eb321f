"""Datasets on an S3 server (s3s-fs on 127.0.0.1, the server the Rust tests start): push,
open by URL, take and load exactly what is local, pull back, and typed remote errors."""

from __future__ import annotations

import numpy as np
import pytest

import zrecord


def test_push_open_take_pull(small, s3, tmp_path):
    url = s3.url("py/small")
    r = zrecord.push(small, url, storage_options=s3.options)
    assert r["generation"] >= 1 and r["files_transferred"] > 0
    local = zrecord.open(small)
    remote = zrecord.open(url, storage_options=s3.options, cache_bytes=0)
    assert len(remote) == len(local)
    idx = np.array([199, 0, 17, 17, 64])
    lb, rb = local.take(idx), remote.take(idx)
    for f in local.fields:
        a, b = lb[f], rb[f]
        if isinstance(a, zrecord.Ragged):
            np.testing.assert_array_equal(a.values, b.values)
            np.testing.assert_array_equal(a.offsets, b.offsets)
        else:
            np.testing.assert_array_equal(a, b)
    got = [int(x) for b in zrecord.Loader(remote, batch_size=64, seed=2, workers=2) for x in b["label"][:, 0]]
    assert sorted(got) == list(range(200))
    # Pull it back; a second pull is already done.
    dst = tmp_path / "pulled.zr"
    zrecord.pull(url, dst, storage_options=s3.options)
    again = zrecord.pull(url, dst, storage_options=s3.options)
    assert again["already_done"]
    np.testing.assert_array_equal(zrecord.open(dst).take(idx)["image"], lb["image"])


def test_a_missing_dataset_and_a_bad_endpoint_are_typed(s3):
    with pytest.raises(zrecord.NotADatasetError):
        zrecord.open(s3.url("py/none"), storage_options=s3.options)
    bad = dict(s3.options, aws_endpoint="http://127.0.0.1:9")
    with pytest.raises(zrecord.RemoteError) as e:
        zrecord.open(s3.url("py/none"), storage_options=bad)
    assert e.value.url.startswith("s3://")
