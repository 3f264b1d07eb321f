"""PyTorch adapters.

``zrecord.torch.IterableDataset`` runs a zrecord loader and yields batches as dicts of tensors
(zero-copy from the batch's NumPy arrays, through ``torch.from_numpy``), with
``state_dict``/``load_state_dict`` for exact resume. Wrap it in
``torch.utils.data.DataLoader(ds, batch_size=None)``.

``num_workers=0``: the loader runs in the training process (zrecord's own threads prefetch and
gather), and ``ds.state_dict()`` is the checkpoint after the last batch yielded.

``num_workers=W > 0``: torch's worker ``w`` of ``W`` (fork or spawn) runs its own loader over a
disjoint part of its rank's order: the rank's records ``j, j + W, j + 2W, ...`` for ``j = w``
(the loader's shard ``(rank + w * world, world * W)``, interleaved), so the workers together
read every record of the rank's epoch exactly once. What this split cannot keep exact is
refused with ``ConfigError``: ``shard_mode="contiguous"``, ``pad_to_equal`` and
``drop_remainder`` (their blocks and padding are per shard, so the workers' parts would not add
up to the rank's), a second pass in fresh worker processes (``persistent_workers=False``: a
fresh process starts from the main process's copy of the dataset, which knows nothing of the
passes before, and would replay the first epoch; use ``persistent_workers=True``), and
``ds.state_dict()`` in the main process once workers have read (the checkpoints are the
workers'). Take checkpoints with torchdata's ``StatefulDataLoader``: it calls each worker's
``state_dict()`` after the batches it yields and hands them back to the workers on
``load_state_dict``, so resume continues every worker with exactly its next batch. A worker's
checkpoint names its worker and worker count, and loading it into another worker, another
worker count or the main process raises ``ResumeMismatch``.

``zrecord.Dataset`` itself is a map-style dataset (``__len__``, ``__getitem__``, and
``__getitems__`` for torch's batched fetch).
"""

from __future__ import annotations

import os
import tempfile
import weakref
from typing import Any, Iterator

import numpy as np

from . import _zrecord

try:  # torch is optional: importing this module without it fails only when used.
    import torch as _torch

    _IterableBase: Any = _torch.utils.data.IterableDataset
    _get_worker_info: Any = _torch.utils.data.get_worker_info
except ImportError:  # pragma: no cover - exercised only without torch
    _torch = None
    _IterableBase = object

    def _get_worker_info() -> Any:
        """Without torch there are no torch workers (tests put a stand-in here)."""
        return None


def _tensor(arr: np.ndarray) -> Any:
    # A writable array owns its memory (nothing else reads it): the tensor shares it. A
    # read-only one is shared with a chunk mapping or other fields, and torch's in-place ops
    # would write into it: the tensor gets a copy.
    return _torch.from_numpy(arr if arr.flags.writeable else arr.copy())


def _to_torch(value: Any) -> Any:
    if _torch is None:
        return value
    if isinstance(value, _zrecord.Ragged):
        return {"values": _tensor(np.asarray(value.values)), "offsets": _tensor(np.asarray(value.offsets))}
    return _tensor(np.asarray(value))


def _error(cls: type, reason: str) -> Exception:
    e = cls(reason)
    e.reason = reason
    return e


def _remove(path: str, pid: int) -> None:
    if os.getpid() == pid:
        try:
            os.unlink(path)
        except OSError:
            pass


class _WorkerRecord:
    """Which torch workers have read a dataset, shared by the main process and every worker
    process (forked or spawned): one byte per worker in a small temporary file, removed when
    the main process's dataset goes."""

    def __init__(self) -> None:
        fd, self.path = tempfile.mkstemp(prefix="zrecord-torch-workers-")
        os.close(fd)
        weakref.finalize(self, _remove, self.path, os.getpid())

    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.path = state["path"]

    def _read(self) -> bytes:
        try:
            with open(self.path, "rb") as f:
                return f.read()
        except OSError:
            return b""

    def mark(self, worker: int) -> None:
        try:
            with open(self.path, "r+b") as f:
                f.seek(worker)
                f.write(b"\x01")
        except OSError:
            pass

    def seen(self, worker: int) -> bool:
        data = self._read()
        return worker < len(data) and data[worker] != 0

    def any(self) -> bool:
        return any(self._read())


class IterableDataset(_IterableBase):
    """Batches of a zrecord ``Loader`` for a torch training loop.

    ``IterableDataset(source, **loader_options)``: ``source`` is a ``zrecord.Dataset``, a path,
    or a ``zrecord.mix(...)``; the options are ``zrecord.Loader``'s, except that ``epochs``
    defaults to None (run forever). Each item is a dict of tensors plus ``"indices"`` and
    ``"is_pad"``.

    One loader spans the epochs: each ``for batch in ...`` yields one epoch, continuing where the
    last pass stopped (the next epoch, in its own shuffled order; or the rest of an epoch a
    ``break`` left), and ends after the loader's last epoch. Under a ``DataLoader`` with
    workers, each worker reads its part of the rank's order (see the module's docs).
    """

    def __init__(self, source: Any, **loader_options: Any) -> None:
        super().__init__()
        if isinstance(source, str):
            source = _zrecord.open(source)
        self._source = source
        self._options = dict(loader_options)
        self._options.setdefault("epochs", None)
        self._state: Any = None
        self._loader: Any = None
        self._loader_pid: int | None = None
        self._loaded = False
        # The worker split the loader or the loaded state belongs to (see `_worker`).
        self._owner: tuple[int, int] | None = None
        self._workers = _WorkerRecord()

    def __getstate__(self) -> dict:
        # A pickled copy (spawn, deepcopy) continues from this one's checkpoint: the loader's
        # threads do not cross processes, its state does.
        state = self.__dict__.copy()
        if self._loader is not None:
            state["_state"] = self._loader.state_dict()
        state["_loader"] = None
        state["_loader_pid"] = None
        state["_loaded"] = False
        return state

    @staticmethod
    def _process() -> tuple[int, int] | None:
        """``(worker id, number of workers)`` in a torch worker process, else None."""
        info = _get_worker_info()
        if info is None:
            return None
        return int(info.id), int(info.num_workers)

    @classmethod
    def _worker(cls) -> tuple[int, int] | None:
        """The split of the rank's order this process reads: ``(worker id, number of
        workers)`` under two or more workers, else None (one worker reads it all)."""
        p = cls._process()
        return p if p is not None and p[1] > 1 else None

    def _loader_options(self, worker: tuple[int, int] | None) -> dict:
        options = dict(self._options)
        if worker is None:
            return options
        w, n = worker
        refused = [
            name
            for name, bad in (
                ("shard_mode='contiguous'", options.get("shard_mode", "interleaved") == "contiguous"),
                ("pad_to_equal=True", bool(options.get("pad_to_equal"))),
                ("drop_remainder=True", bool(options.get("drop_remainder"))),
            )
            if bad
        ]
        if refused:
            raise _error(
                _zrecord.ConfigError,
                f"{', '.join(refused)} with {n} DataLoader workers: each worker reads every "
                f"{n}-th record of its rank's order, and these options work per shard, so the "
                "workers' parts would not add up to the rank's; use num_workers=0 or 1, or drop "
                "the option"
            )
        rank, world = options.get("shard") or (0, 1)
        options["shard"] = (rank + w * world, world * n)
        return options

    def _current(self) -> Any:
        worker = self._worker()
        process = self._process()
        if self._loader is not None:
            if self._loader_pid != os.getpid():
                raise _error(
                    _zrecord.ConfigError,
                    "this IterableDataset was iterated in the main process before the "
                    "DataLoader's worker processes were forked: its loader lives there; give "
                    "the DataLoader a dataset that the main process has not iterated"
                )
            return self._loader
        if process is not None:
            w, n = process
            if not self._loaded and self._workers.seen(w):
                raise _error(
                    _zrecord.ConfigError,
                    f"DataLoader worker {w} of {n} starts a second pass in a fresh process: "
                    "it starts from the main process's copy of the dataset, which knows nothing "
                    "of the passes before, and would replay them; use "
                    "DataLoader(..., persistent_workers=True), whose workers keep their loaders "
                    "from pass to pass"
                )
        options = self._loader_options(worker)
        if self._state is not None:
            options["state"] = self._state
        loader = _zrecord.Loader(self._source, **options)
        self._state = None
        if process is not None:
            self._workers.mark(process[0])
        self._loader = loader
        self._loader_pid = os.getpid()
        self._owner = worker
        return loader

    def __iter__(self) -> Iterator[dict]:
        loader = self._current()
        epoch = None
        for batch in loader:
            if epoch is None:
                epoch = batch.epoch
            elif batch.epoch != epoch:
                loader._unget(batch)  # the next pass starts with it
                return
            out = {name: _to_torch(batch[name]) for name in batch.keys()}
            out["indices"] = _to_torch(batch.indices)
            out["is_pad"] = _to_torch(batch.is_pad)
            yield out

    def state_dict(self) -> dict:
        """The checkpoint after the last batch yielded (JSON-serialisable). In a torch worker it
        also names the worker and the worker count; in the main process it is refused
        (``ConfigError``) once workers have read the dataset, since the checkpoints are theirs
        (torchdata's ``StatefulDataLoader`` collects them)."""
        worker = self._worker()
        if self._loader is not None or self._loaded:
            worker = self._owner
        if self._process() is None and self._loader is None and self._workers.any():
            raise _error(
                _zrecord.ConfigError,
                "this IterableDataset was read by DataLoader worker processes: the checkpoint is "
                "theirs, not the main process's; use torchdata's StatefulDataLoader and its "
                "state_dict() (it collects the workers'), or num_workers=0"
            )
        if self._loader is not None:
            if self._loader_pid != os.getpid():
                raise _error(
                    _zrecord.ConfigError,
                    "this IterableDataset's loader lives in another process (it was iterated "
                    "before a fork)"
                )
            state = {"loader": self._loader.state_dict()}
        else:
            state = {"loader": self._state}
        if worker is not None:
            state["worker"], state["num_workers"] = worker
        return state

    def load_state_dict(self, state: dict) -> None:
        """The next pass resumes with exactly the batch after the checkpoint's. A worker's
        checkpoint loads only into the same worker of the same worker count (else
        ``ResumeMismatch``)."""
        worker = self._worker()
        saved = (state.get("worker"), state.get("num_workers"))
        if state.get("loader") is not None:
            here = worker if worker is not None else (None, None)
            if saved != tuple(here):
                def name(w: tuple) -> str:
                    return "the main process" if w[0] is None else f"DataLoader worker {w[0]} of {w[1]}"

                raise _error(
                    _zrecord.ResumeMismatch,
                    f"a checkpoint of {name(saved)} loaded into {name(tuple(here))}: each "
                    "worker reads its own part of the rank's order"
                )
        self._state = state.get("loader")
        self._loader = None
        self._loader_pid = None
        self._loaded = True
        self._owner = worker
