"""PyTorch adapters.

``zrecord.torch.IterableDataset`` runs a zrecord loader (one per rank) and yields batches as
dicts of tensors (zero-copy from the batch's NumPy arrays, through ``torch.from_numpy``). It
has ``state_dict``/``load_state_dict`` for exact resume.

zrecord's own workers prefetch and gather: wrap it in ``torch.utils.data.DataLoader(ds,
batch_size=None, num_workers=0)``. With ``num_workers > 0`` torch's worker processes would each
run a copy of the loader and prefetch ahead of the trainer, so a checkpoint taken in the trainer
would no longer name the next batch: resume would skip or repeat batches.

``zrecord.Dataset`` itself is a map-style dataset (``__len__``, ``__getitem__``, and
``__getitems__`` for torch's batched fetch).
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from . import _zrecord

try:  # torch is optional: importing this module without it fails only when used.
    import torch as _torch

    _IterableBase: Any = _torch.utils.data.IterableDataset
except ImportError:  # pragma: no cover - exercised only without torch
    _torch = None
    _IterableBase = object


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


class IterableDataset(_IterableBase):
    """Batches of a zrecord ``Loader`` for a torch training loop.

    ``IterableDataset(source, **loader_options)``: ``source`` is a ``zrecord.Dataset``, a path,
    or a ``zrecord.mix(...)``; the options are ``zrecord.Loader``'s, except that ``epochs``
    defaults to None (run forever). Each item is a dict of tensors plus ``"indices"`` and
    ``"is_pad"``.

    One loader spans the epochs: each ``for batch in ...`` yields one epoch, continuing where the
    last pass stopped (the next epoch, in its own shuffled order; or the rest of an epoch a
    ``break`` left), and ends after the loader's last epoch.
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

    def _current(self) -> Any:
        if self._loader is None:
            options = dict(self._options)
            if self._state is not None:
                options["state"] = self._state
                self._state = None
            self._loader = _zrecord.Loader(self._source, **options)
        return self._loader

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
        """The checkpoint after the last batch yielded (JSON-serialisable)."""
        if self._loader is not None:
            return {"loader": self._loader.state_dict()}
        return {"loader": self._state}

    def load_state_dict(self, state: dict) -> None:
        """The next pass resumes with exactly the batch after the checkpoint's."""
        self._state = state.get("loader")
        self._loader = None
