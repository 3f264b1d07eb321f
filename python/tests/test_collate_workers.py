"""collate_in_workers=True: the collate runs on the loader's worker threads (not the thread
calling next()), its results come back in order and equal the same collate's on the caller's
thread, and state_dict() resumes exactly after the last one returned; a collate that raises is
a TransformError naming the batch's first record (on_error="skip" skips the batch with a
warning); collate_in_workers without a collate is refused."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import zrecord


def collate(batch: zrecord.Batch) -> dict:
    x = batch.array("x")[:, 0]
    return {
        "indices": batch.indices.copy(),
        "sum": int(x.sum()),
        "epoch": batch.epoch,
        "position": batch.position,
        "thread": threading.get_ident(),
    }


def options(**kw):
    return dict(batch_size=64, shuffle=True, seed=3, epochs=2, workers=2, collate=collate, **kw)


def test_runs_on_the_workers_in_order(seq_dataset):
    ds = zrecord.open(seq_dataset)
    here = list(zrecord.Loader(ds, **options()))
    there = list(zrecord.Loader(ds, **options(collate_in_workers=True)))
    assert len(here) == len(there) == 2 * 16
    me = threading.get_ident()
    assert all(h["thread"] == me for h in here)
    assert all(t["thread"] != me for t in there)
    for h, t in zip(here, there):
        assert np.array_equal(h["indices"], t["indices"])
        assert (h["sum"], h["epoch"], h["position"]) == (t["sum"], t["epoch"], t["position"])
        assert t["sum"] == int(t["indices"].sum())


def test_state_dict_resumes_after_the_last_collated_batch(seq_dataset):
    ds = zrecord.open(seq_dataset)
    whole = [b["indices"].tolist() for b in zrecord.Loader(ds, **options(collate_in_workers=True))]
    first = zrecord.Loader(ds, **options(collate_in_workers=True))
    got = [next(first)["indices"].tolist() for _ in range(21)]
    state = first.state_dict()
    del first
    got += [b["indices"].tolist() for b in zrecord.Loader(ds, **options(collate_in_workers=True), state=state)]
    assert got == whole


def test_a_raising_collate_names_the_batch(seq_dataset):
    ds = zrecord.open(seq_dataset)

    def bad(batch: zrecord.Batch) -> int:
        if batch.position == 3:
            raise ValueError("no good")
        return int(batch.indices[0])

    opts = dict(batch_size=100, shuffle=False, workers=2, collate=bad, collate_in_workers=True)
    loader = zrecord.Loader(ds, **opts)
    assert [next(loader) for _ in range(3)] == [0, 100, 200]
    with pytest.raises(zrecord.TransformError) as e:
        next(loader)
    assert e.value.index == 300
    assert "bad" in e.value.op and "collate" in e.value.op
    assert "ValueError: no good" in e.value.reason

    with pytest.warns(RuntimeWarning, match="no good"):
        firsts = list(zrecord.Loader(ds, **opts, on_error="skip"))
    assert firsts == [0, 100, 200, 400, 500, 600, 700, 800, 900]


def test_needs_a_collate(seq_dataset):
    with pytest.raises(zrecord.ConfigError, match="collate_in_workers"):
        zrecord.Loader(zrecord.open(seq_dataset), collate_in_workers=True)


def test_a_batch_given_back_is_not_collated_twice(seq_dataset):
    ds = zrecord.open(seq_dataset)
    loader = zrecord.Loader(ds, batch_size=100, shuffle=False, workers=1, collate=collate)
    first = next(loader)
    loader._unget(first)
    assert next(loader) is first
    assert next(loader)["indices"][0] == 100
