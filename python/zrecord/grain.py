"""Grain's data-source protocol over a zrecord dataset.

``zrecord.grain.DataSource("train.zr")`` is a ``grain.RandomAccessDataSource``: swap it in for
``ArrayRecordDataSource`` and keep the rest of a Grain pipeline. ``__getitems__`` gathers a whole
batch of indices in one call (one gather, then one dict per record, which Grain's operations
expect); ``Dataset.take`` skips the per-record dicts where a pipeline can take columns.
"""

from __future__ import annotations

from typing import Any, Sequence

from . import _zrecord


class DataSource:
    """A random-access data source: ``len``, ``source[i]`` (a dict of arrays), ``__getitems__``.

    Pickles as its path and options (Grain's worker processes reopen it).
    """

    def __init__(self, dataset: "_zrecord.Dataset | str", **open_options: Any) -> None:
        if isinstance(dataset, _zrecord.Dataset):
            self._ds = dataset
        else:
            self._ds = _zrecord.open(dataset, **open_options)

    @property
    def dataset(self) -> "_zrecord.Dataset":
        return self._ds

    def __len__(self) -> int:
        return len(self._ds)

    def __getitem__(self, record_key: int) -> dict:
        return self._ds[int(record_key)]

    def __getitems__(self, record_keys: Sequence[int]) -> list:
        return self._ds.__getitems__(record_keys)

    def __repr__(self) -> str:
        return f"zrecord.grain.DataSource({self._ds.path!r}, {len(self._ds)} records)"
