"""Values a writer stores, converted to a field's dtype and checked against its shape, without
silent changes.

Called by the extension (`Writer.append`, `append_batch`, `modify`). A value is stored only if
every element keeps its value in the field's dtype; anything else raises `zrecord.SchemaError`
(a `ValueError`) with `field`, `index` (the record), `value` (the first element that does not
fit) and `reason`:

- into an integer field: integers within the dtype's range, bools, and floats with no fraction
  within the range (an int8 -1 into a `u8` field, a uint64 2**63 into an `i64` one, 3.5 into any
  integer field, NaN and infinities are refused);
- into a `bool` field: 0 and 1 only (as bools, integers or floats);
- into a float field: floats, rounded to the nearest value of the field's dtype as NumPy rounds
  (NaN and infinities are stored as they are; a finite value whose rounding overflows to an
  infinity is refused); integers and bools only where the float holds them exactly (an int
  16,777,217 into an `f32` field is refused);
- a `bf16` field takes `ml_dtypes.bfloat16` arrays, 16-bit integers as raw bits, or the values
  above rounded to the nearest bf16 (ties to even) under the same rules;
- `bytes`, `bytearray` and `memoryview` objects are the value's raw bytes, whatever the dtype;
- strings, complex numbers and other objects are refused.

A fixed-shape field takes a value of exactly its shape (raw bytes: exactly its size): a value
with the same number of items in another shape is refused, and so is a batch column whose rows
are not of that shape. The checks are vectorised: NumPy input makes no Python object per element.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ._zrecord import SchemaError

NUMPY = {
    "bytes": "u1", "u8": "u1", "bool": "?", "i8": "i1", "u16": "<u2", "i16": "<i2",
    "u32": "<u4", "i32": "<i4", "u64": "<u8", "i64": "<i8", "f16": "<f2", "f32": "<f4",
    "f64": "<f8",
}


def _refuse(field: str, index: int, value: Any, reason: str) -> SchemaError:
    shown = "" if value is None else f"value {value!r} "
    e = SchemaError(f"field {field!r} of record {index}: {shown}{reason}")
    e.field = field
    e.index = index
    e.value = value
    e.reason = reason
    return e


def _first(bad: np.ndarray) -> int | None:
    """The flat position of the first True in `bad`, or None."""
    flat = bad.reshape(-1)
    if not flat.any():
        return None
    return int(np.argmax(flat))


def _bad_for(arr: np.ndarray, target: np.dtype) -> np.ndarray | None:
    """A mask of the elements of `arr` (a numeric array) that `target` does not hold exactly
    (rounding allowed only float to float), or None when every one fits."""
    src = arr.dtype
    if src == target or arr.size == 0:
        return None
    with np.errstate(all="ignore"):
        if target.kind == "b":
            return (arr != 0) & (arr != 1)
        if target.kind in "iu":
            info = np.iinfo(target)
            if src.kind == "b" or np.can_cast(src, target, "safe"):
                return None
            if src.kind in "iu":
                return (arr < info.min) | (arr > info.max)
            wide = arr.astype(np.float64)  # exact for f16, f32 and f64
            # The bounds are powers of two, exact in every float type.
            low = float(info.min)
            high = float(info.max) + 1.0
            return ~np.isfinite(wide) | (wide != np.floor(wide)) | (wide < low) | (wide >= high)
        # A float target.
        if src.kind == "b":
            return None
        out = arr.astype(target)
        if src.kind == "f":
            return np.isfinite(arr) & ~np.isfinite(out)
        # Integers: only where the float holds them exactly. A value that rounded past the
        # integer type's range converts back to something else (never to itself).
        return ~np.isfinite(out) | (out.astype(src) != arr)


def _objects(arr: np.ndarray, target: np.dtype, field: str, where: Callable[[int], int]) -> np.ndarray:
    """An object array (Python ints too large for NumPy's integer types, or other objects)
    converted element by element: the input is Python objects already."""
    flat = arr.reshape(-1).tolist()
    for k, x in enumerate(flat):
        at = where(k)
        if isinstance(x, (bool, np.bool_)):
            continue
        if isinstance(x, (int, np.integer)):
            x = int(x)
            if target.kind == "b" and x not in (0, 1):
                raise _refuse(field, at, x, "is not 0 or 1 (a bool field)")
            if target.kind in "iu":
                info = np.iinfo(target)
                if not info.min <= x <= info.max:
                    raise _refuse(field, at, x, f"is out of the range of {target.name} [{info.min}, {info.max}]")
            if target.kind == "f":
                try:
                    exact = int(target.type(x)) == x if math.isfinite(float(x)) else False
                except (OverflowError, ValueError):
                    exact = False
                if not exact:
                    raise _refuse(field, at, x, f"is not exactly representable as {target.name}")
            continue
        raise _refuse(field, at, x, f"is a {type(x).__name__}, not a number of dtype {target.name}")
    return np.array(flat, dtype=target).reshape(arr.shape)


def _bf16_bits(arr: np.ndarray, field: str, where: Callable[[int], int]) -> np.ndarray:
    if arr.dtype.name == "bfloat16":
        return np.ascontiguousarray(arr).view("<u2")
    if arr.dtype.kind in "iu" and arr.dtype.itemsize == 2:
        return np.ascontiguousarray(arr, "<u2") if arr.dtype.kind == "u" else np.ascontiguousarray(arr).view("<u2")
    if arr.dtype.kind not in "fiub":
        raise _refuse(field, where(0), None, f"values of dtype {arr.dtype} cannot be stored as bf16")
    with np.errstate(all="ignore"):
        f32 = np.ascontiguousarray(arr, "<f4")
        bits = f32.view("<u4").astype(np.uint64)
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")
        nan = np.isnan(f32)
        if nan.any():
            rounded[nan] = 0x7FC0
        back = (rounded.astype("<u4") << 16).view("<f4")
        if arr.dtype.kind == "f":
            bad = np.isfinite(arr) & ~np.isfinite(back)
        elif arr.dtype.kind == "b":
            bad = None
        else:
            bad = ~np.isfinite(back) | (back.astype(arr.dtype) != arr)
    if bad is not None:
        k = _first(bad)
        if k is not None:
            raise _refuse(field, where(k), arr.reshape(-1)[k].item(), "does not fit bf16 (an integer it cannot hold exactly, or a float that overflows)")
    return rounded


def to_bytes(
    value: Any,
    dtype: str,
    field: str,
    shape: list[int] | None = None,
    index: int = 0,
    rows: bool = False,
) -> np.ndarray:
    """The C-ordered bytes (a uint8 array) of `value` as `dtype` (zrecord's name), checked.

    `shape` is the field's fixed shape (None: variable length). `index` is the record the value
    is for; with `rows`, `value` is a batch column whose first axis runs over records
    `index, index + 1, ...` and every row must have the field's shape.
    """
    item = np.dtype(NUMPY.get(dtype, "<u2")).itemsize
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = np.frombuffer(value, dtype=np.uint8)
        if shape is not None:
            need = math.prod(shape) * item
            if raw.size != need:
                raise _refuse(field, index, None, f"is {raw.size} raw bytes, but shape {list(shape)} of {dtype} needs {need}")
        elif raw.size % item:
            raise _refuse(field, index, None, f"is {raw.size} raw bytes, not a whole number of {dtype} items")
        return raw
    arr = np.asarray(value)
    per_row: int | None = None
    if rows:
        if arr.ndim == 0:
            raise _refuse(field, index, None, "is a scalar, but a batch column needs one row per record")
        per_row = math.prod(arr.shape[1:])
        if shape is not None and list(arr.shape[1:]) != list(shape):
            raise _refuse(field, index, None, f"has rows of shape {list(arr.shape[1:])}, but the field's shape is {list(shape)}")
    elif shape is not None and list(arr.shape) != list(shape):
        raise _refuse(field, index, None, f"has shape {list(arr.shape)}, but the field's shape is {list(shape)}")
    if per_row is None:
        return _typed(arr, dtype, field, lambda k: index)
    step = max(per_row, 1)
    return _typed(arr, dtype, field, lambda k: index + k // step)


def ragged_to_bytes(
    values: Any,
    offsets: np.ndarray,
    dtype: str,
    field: str,
    shape: list[int] | None,
    index: int,
) -> np.ndarray:
    """The bytes of a `Ragged` column's values, checked as `to_bytes` checks them; item `j` is
    record `index + j`. A fixed-shape field takes a `Ragged` only for a 1-D shape `[k]` with
    every item of `k` values."""
    offsets = np.asarray(offsets, dtype=np.int64)
    if shape is not None:
        lengths = np.diff(offsets)
        if len(shape) != 1:
            raise _refuse(field, index, None, f"is a Ragged (1-D items), but the field's shape is {list(shape)}: give an (n, *shape) array")
        bad = np.flatnonzero(lengths != shape[0])
        if bad.size:
            j = int(bad[0])
            raise _refuse(field, index + j, None, f"has {int(lengths[j])} values, but the field's shape is {list(shape)}")
    arr = np.asarray(values)

    def where(k: int) -> int:
        return index + int(np.searchsorted(offsets, k, side="right")) - 1

    return _typed(arr, dtype, field, where)


def _typed(arr: np.ndarray, dtype: str, field: str, where: Callable[[int], int]) -> np.ndarray:
    """`arr` as `dtype`, checked element by element (vectorised); `where(k)` is the record of
    flat element `k`, for the error."""
    if dtype == "bf16":
        out = _bf16_bits(arr, field, where)
    else:
        target = np.dtype(NUMPY[dtype])
        if arr.dtype == object:
            out = _objects(arr, target, field, where)
        elif arr.dtype.kind not in "biuf":
            raise _refuse(field, where(0), None, f"values of dtype {arr.dtype} are not numbers of dtype {dtype}")
        else:
            bad = _bad_for(arr, target)
            k = None if bad is None else _first(bad)
            if k is not None:
                v = arr.reshape(-1)[k].item()
                if target.kind == "b":
                    why = "is not 0 or 1 (a bool field)"
                elif target.kind in "iu":
                    info = np.iinfo(target)
                    why = f"does not fit {dtype} (integers in [{info.min}, {info.max}], no fraction)"
                elif arr.dtype.kind == "f":
                    why = f"overflows {dtype} (its largest finite value is {np.finfo(target).max})"
                else:
                    why = f"is not exactly representable as {dtype}"
                raise _refuse(field, where(k), v, why)
            with np.errstate(all="ignore"):
                out = arr.astype(target, copy=False)
    return np.ascontiguousarray(out).reshape(-1).view(np.uint8)
