"""zrecord.torch.IterableDataset under torch DataLoader workers (issue #30): with W workers each
worker reads a disjoint part of its rank's order (worker w: the rank's records w, w + W, ...),
together every record of the epoch exactly once; every worker's checkpoint resumes it exactly
(as torchdata's StatefulDataLoader hands them back); and what cannot be exact is refused:
options that work per shard, a second pass in fresh worker processes, the main process's
state_dict() once workers have read, a checkpoint loaded into another worker.

The first tests always run: a stand-in for torch's get_worker_info plays the worker (in this
process, and in forked and spawned children). The last ones run torch's DataLoader and
torchdata's StatefulDataLoader and skip without them (install torch and torchdata==0.11.0 into
the test venv to run them; see README.md)."""

from __future__ import annotations

import copy
import importlib.util
import json
import multiprocessing as mp
import pickle
from contextlib import contextmanager

import numpy as np
import pytest

import zrecord
import zrecord.torch as zt

OPTIONS = dict(batch_size=32, shuffle=True, seed=11, workers=1)


class _Info:
    """The fields of torch's WorkerInfo the adapter reads."""

    def __init__(self, id: int, num_workers: int):
        self.id, self.num_workers = id, num_workers


@contextmanager
def _worker(w: int, n: int):
    old = zt._get_worker_info
    zt._get_worker_info = lambda: _Info(w, n)
    try:
        yield
    finally:
        zt._get_worker_info = old


def _indices(item) -> list[int]:
    return [int(i) for i in np.asarray(item["indices"])]


def _flat(items) -> list[int]:
    return [i for item in items for i in _indices(item)]


def _rank_order(path, **options) -> list[int]:
    """The rank's records of epoch 0 in order, as one loader (no torch workers) reads them."""
    loader = zrecord.Loader(zrecord.open(path), **{**OPTIONS, "epochs": 1, **options})
    return [int(i) for b in loader for i in b.indices]


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("shard", [None, (1, 2)])
def test_each_worker_reads_its_part_of_the_rank_order(seq_dataset, workers, shard):
    extra = {} if shard is None else {"shard": shard}
    order = _rank_order(seq_dataset, **extra)
    ds = zt.IterableDataset(str(seq_dataset), **OPTIONS, **extra)
    parts = []
    for w in range(workers):
        copy_ = pickle.loads(pickle.dumps(ds))  # what a spawned worker gets
        with _worker(w, workers):
            part = _flat(copy_)
        assert part == order[w::workers]  # the rank's records w, w + W, ... in its order
        parts.append(part)
    everything = [i for p in parts for i in p]
    assert sorted(everything) == sorted(order)  # no duplicates, nothing missing
    assert len(set(everything)) == len(everything)
    with pytest.raises(zrecord.ConfigError, match="StatefulDataLoader"):
        ds.state_dict()  # the main process's copy knows none of it


def _child(path_or_ds, w, n, conn) -> None:
    try:
        ds = path_or_ds
        with _worker(w, n):
            conn.send(("ok", _flat(ds)))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        conn.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


def _run_workers(ds, n, method) -> list:
    ctx = mp.get_context(method)
    out = []
    for w in range(n):
        parent_end, child_end = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_child, args=(ds, w, n, child_end))
        p.start()
        child_end.close()
        assert parent_end.poll(120), f"a {method}ed worker hung"
        out.append(parent_end.recv())
        p.join(30)
    return out


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_worker_processes_read_every_record_once(seq_dataset, method):
    ds = zt.IterableDataset(zrecord.open(seq_dataset), **OPTIONS)
    results = _run_workers(ds, 2, method)
    assert [status for status, _ in results] == ["ok", "ok"], results
    parts = [r for _, r in results]
    assert sorted(parts[0] + parts[1]) == list(range(1000))
    with pytest.raises(zrecord.ConfigError):
        ds.state_dict()
    # A second pass in fresh processes would start from this copy again: refused.
    again = _run_workers(ds, 2, method)
    assert [status for status, _ in again] == ["error", "error"]
    assert all("ConfigError" in r and "persistent_workers=True" in r for _, r in again)


def test_worker_checkpoints_resume_every_worker_exactly(seq_dataset):
    options = {**OPTIONS, "epochs": 2}
    n = 2
    # Uninterrupted: each worker's two passes (persistent workers keep their copy).
    whole = []
    ds = zt.IterableDataset(str(seq_dataset), **options)
    for w in range(n):
        mine = copy.deepcopy(ds)
        with _worker(w, n):
            whole.append([[_indices(x) for x in mine] for _ in range(3)])
    assert [len(p[2]) for p in whole] == [0, 0]  # two epochs, then the loader's end
    # Interrupted after a few batches of each worker, checkpoints taken as StatefulDataLoader
    # takes them (after each yielded batch), then a new run resumed from them.
    ds = zt.IterableDataset(str(seq_dataset), **options)
    states, before = [], []
    for w, k in zip(range(n), (5, 3)):
        mine = copy.deepcopy(ds)
        with _worker(w, n):
            it = iter(mine)
            got = [_indices(next(it)) for _ in range(k)]
            states.append(json.loads(json.dumps(mine.state_dict())))
        before.append(got)
    assert [s["worker"] for s in states] == [0, 1] and states[0]["num_workers"] == n
    resumed = zt.IterableDataset(str(seq_dataset), **options)
    for w in range(n):
        mine = copy.deepcopy(resumed)
        with _worker(w, n):
            mine.load_state_dict(states[w])
            rest = [_indices(x) for x in mine]
            second = [_indices(x) for x in mine]
        assert before[w] + rest == whole[w][0]
        assert second == whole[w][1]
    # A checkpoint belongs to its worker of its worker count.
    for where in ((1, 2), (0, 3), None):
        other = copy.deepcopy(resumed)
        with pytest.raises(zrecord.ResumeMismatch):
            if where is None:
                other.load_state_dict(states[0])
            else:
                with _worker(*where):
                    other.load_state_dict(states[0])
    main = zt.IterableDataset(str(seq_dataset), **options)
    it = iter(main)
    next(it)
    state = main.state_dict()
    assert "worker" not in state
    with _worker(0, 2), pytest.raises(zrecord.ResumeMismatch):
        copy.deepcopy(main).load_state_dict(state)


@pytest.mark.parametrize("option", [{"pad_to_equal": True, "shard": (0, 3)},
                                    {"drop_remainder": True, "shard": (0, 3)},
                                    {"shard_mode": "contiguous", "shard": (0, 3)}])
def test_options_that_work_per_shard_are_refused_with_workers(seq_dataset, option):
    ds = zt.IterableDataset(str(seq_dataset), **OPTIONS, **option)
    with _worker(0, 2), pytest.raises(zrecord.ConfigError, match="DataLoader workers"):
        next(iter(copy.deepcopy(ds)))
    with _worker(0, 1):  # one worker reads the rank's whole order: nothing to split
        assert len(_indices(next(iter(copy.deepcopy(ds))))) == 32


# The real thing: torch's DataLoader and torchdata's StatefulDataLoader.

requires_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="torch is not installed (the stand-in tests above ran; see README.md to run these)",
)


@requires_torch
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_torch_dataloader_workers(seq_dataset, method):
    from torch.utils.data import DataLoader

    ds = zt.IterableDataset(str(seq_dataset), **OPTIONS)
    dl = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context=method)
    seen = _flat(dl)
    assert sorted(seen) == list(range(1000))
    with pytest.raises(zrecord.ConfigError):
        ds.state_dict()
    with pytest.raises(zrecord.ConfigError, match="persistent_workers"):
        _flat(dl)  # fresh workers would replay the first epoch


@requires_torch
def test_stateful_dataloader_resumes_exactly(seq_dataset):
    sdl = pytest.importorskip("torchdata.stateful_dataloader", reason="torchdata is not installed")
    options = {**OPTIONS, "epochs": 2}

    def loader(ds):
        return sdl.StatefulDataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True,
                                      multiprocessing_context="fork")

    dl = loader(zt.IterableDataset(str(seq_dataset), **options))
    whole = [[_indices(x) for x in dl] for _ in range(2)]
    assert sorted(i for b in whole[0] for i in b) == list(range(1000))
    dl = loader(zt.IterableDataset(str(seq_dataset), **options))
    before = []
    for x in dl:
        before.append(_indices(x))
        if len(before) == 7:
            break
    state = dl.state_dict()
    del dl
    dl = loader(zt.IterableDataset(str(seq_dataset), **options))
    dl.load_state_dict(state)
    rest = [_indices(x) for x in dl]
    assert before + rest == whole[0]
    assert [_indices(x) for x in dl] == whole[1]
