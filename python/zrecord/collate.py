"""Collates for variable-length fields: a `Ragged` padded into one rectangular array.

`pad_stack(ragged, pad_value=0, side="right", multiple_of=None)` returns `(padded, mask)`:
`padded` is `(n, L)` of the values' dtype, `L` the longest item (rounded up to a multiple of
`multiple_of`), and `mask` is `(n, L)` uint8, 1 where a value is and 0 where padding is — the
same layout as the Rust `zrecord::pipeline::pad_stack`. Vectorised: one pass over the values,
no Python object per item.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._zrecord import Ragged


def pad_stack(
    ragged: Ragged,
    pad_value: Any = 0,
    side: str = "right",
    multiple_of: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    if side not in ("right", "left"):
        raise ValueError(f"side must be 'right' or 'left', not {side!r}")
    values = np.asarray(ragged.values)
    offsets = np.asarray(ragged.offsets, dtype=np.int64)
    lengths = np.diff(offsets)
    n = len(lengths)
    width = int(lengths.max()) if n else 0
    if multiple_of:
        if multiple_of < 1:
            raise ValueError("multiple_of must be at least 1")
        width = -(-width // multiple_of) * multiple_of
    padded = np.full((n, width), pad_value, dtype=values.dtype)
    mask = np.zeros((n, width), dtype=np.uint8)
    if n and len(values):
        rows = np.repeat(np.arange(n), lengths)
        cols = np.arange(len(values)) - np.repeat(offsets[:-1], lengths)
        if side == "left":
            cols = cols + np.repeat(width - lengths, lengths)
        padded[rows, cols] = values
        mask[rows, cols] = 1
    return padded, mask
