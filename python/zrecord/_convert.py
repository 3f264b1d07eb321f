"""Values a writer stores, converted to a field's dtype without silent changes.

Called by the extension (`Writer.append`, `append_batch`, `modify`): a value becomes the
field's dtype only if every element keeps its value (an integer out of range, a float with a
fraction into an integer field, or a 2 into a bool field raise `ValueError`); floats into a
float field round as NumPy does. `bf16` fields take `ml_dtypes.bfloat16` arrays, 16-bit
integers as raw bits, or floats rounded to the nearest bf16 (ties to even).
"""

from __future__ import annotations

from typing import Any

import numpy as np

NUMPY = {
    "bytes": "u1", "u8": "u1", "bool": "?", "i8": "i1", "u16": "<u2", "i16": "<i2",
    "u32": "<u4", "i32": "<i4", "u64": "<u8", "i64": "<i8", "f16": "<f2", "f32": "<f4",
    "f64": "<f8",
}


def _bf16_bits(arr: np.ndarray, field: str) -> np.ndarray:
    if arr.dtype.name == "bfloat16":
        return np.ascontiguousarray(arr).view("<u2")
    if arr.dtype.kind in "iu" and arr.dtype.itemsize == 2:
        return np.ascontiguousarray(arr, "<u2") if arr.dtype.kind == "u" else np.ascontiguousarray(arr).view("<u2")
    if arr.dtype.kind in "fiub":
        bits = np.ascontiguousarray(arr, "<f4").view("<u4").astype(np.uint64)
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")
        nan = np.isnan(np.asarray(arr, "<f4"))
        if nan.any():
            rounded[nan] = 0x7FC0
        return rounded
    raise ValueError(f"field {field!r}: cannot store {arr.dtype} values as bf16")


def to_bytes(value: Any, dtype: str, field: str) -> np.ndarray:
    """The C-ordered bytes (a uint8 array) of `value` as `dtype` (zrecord's name)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return np.frombuffer(value, dtype=np.uint8)
    arr = np.asarray(value)
    if dtype == "bf16":
        out = _bf16_bits(arr, field)
    else:
        target = np.dtype(NUMPY[dtype])
        if arr.dtype == target:
            out = arr
        elif arr.dtype.kind in "biuf" and target.kind in "biu":
            with np.errstate(all="ignore"):
                out = arr.astype(target)
                same = np.array_equal(out.astype(arr.dtype), arr) if arr.size else True
            if not same:
                raise ValueError(
                    f"field {field!r}: values of dtype {arr.dtype} do not fit {dtype} "
                    "(out of range, a fraction, or not 0/1 for bool)"
                )
        elif arr.dtype.kind in "biuf" and target.kind == "f":
            out = arr.astype(target)
        else:
            try:
                out = np.asarray(value, dtype=target)
            except (TypeError, ValueError) as e:
                raise ValueError(f"field {field!r}: cannot convert the value to {dtype}: {e}") from None
    return np.ascontiguousarray(out).reshape(-1).view(np.uint8)
