"""The Python write path never bends a value (issue #30): a value outside its field's range, a
fraction into an integer field, a float that overflows, a fixed-shape field left without a value
or given one of another shape, is refused with `SchemaError` (also a `ValueError`) naming the
field, the record and the value, from `append`, `append_batch`, `modify` and `append_arrow`;
nothing of the refused call is appended."""

from __future__ import annotations

import math

import numpy as np
import pytest

import zrecord

# (field dtype, the value that does not fit, as what)
WRAPS = [
    ("u8", np.array([1, -1], np.int8), -1),
    ("i32", np.array([1, 4294967295], np.uint32), 4294967295),
    ("i64", np.array([1, 2**63], np.uint64), 2**63),
    ("u64", np.array([1, -1], np.int64), -1),
    ("u8", [1, 256], 256),
    ("u8", [1, -1], -1),
    ("u64", [1, 2**64], 2**64),
    ("i64", [1, -(2**63) - 1], -(2**63) - 1),
    ("i32", np.array([1.0, 2.5]), 2.5),
    ("i32", np.array([1.0, np.nan]), None),
    ("i64", np.array([1.0, 2.0**63]), 2.0**63),
    ("u16", np.array([1.0, -1.0], np.float32), -1.0),
    ("bool", np.array([1, 2], np.int64), 2),
    ("bool", [True, 0.5], 0.5),
    ("f32", np.array([1.0, 1e300]), 1e300),
    ("f16", np.array([1.0, 70000.0]), 70000.0),
    ("f32", np.array([1, 2**24 + 1], np.int64), 2**24 + 1),
    ("f64", [1, 2**53 + 1], 2**53 + 1),
    ("bf16", np.array([1, 257], np.int64), 257),
    ("bf16", np.array([1.0, 3.4e38], np.float32), None),  # rounds past bf16's largest
    ("u8", np.array(["1", "2"]), None),
]


def _check(e: pytest.ExceptionInfo, field: str, index: int, value) -> None:
    err = e.value
    assert isinstance(err, zrecord.SchemaError) and isinstance(err, ValueError)
    assert err.field == field and err.index == index
    assert field in str(err) and f"record {index}" in str(err)
    if value is not None:
        assert err.value == value or (isinstance(value, float) and math.isclose(err.value, value))


@pytest.mark.parametrize("dtype,value,bad", WRAPS, ids=[f"{d}-{i}" for i, (d, _, _) in enumerate(WRAPS)])
def test_a_value_outside_the_field_is_refused_everywhere(tmp_path, dtype, value, bad):
    with zrecord.Writer.create(tmp_path / "w.zr", {"x": (dtype, [2]), "v": dtype}) as w:
        ok = np.zeros(2, np.uint8)
        w.append({"x": ok, "v": ok})
        with pytest.raises(zrecord.SchemaError) as e:
            w.append({"x": value, "v": ok})
        _check(e, "x", 1, bad)
        with pytest.raises(zrecord.SchemaError) as e:
            w.append({"x": ok, "v": value})  # variable length: the same rule
        _check(e, "v", 1, bad)
        column = np.stack([np.asarray(ok, np.asarray(value).dtype)] * 3 + [np.asarray(value)])
        with pytest.raises(zrecord.SchemaError) as e:
            w.append_batch({"x": column, "v": [ok] * 4})
        # Row 3 of the batch: record 1 + 3 (a column of strings is refused whole, at its first).
        _check(e, "x", 1 if np.asarray(value).dtype.kind == "U" else 4, bad)
        with pytest.raises(zrecord.SchemaError) as e:
            w.append_batch({"x": [ok] * 2, "v": [ok, value]})
        _check(e, "v", 2, bad)
        with pytest.raises(zrecord.SchemaError) as e:
            w.modify(0, "x", value)
        _check(e, "x", 0, bad)
        assert len(w) == 1
    b = zrecord.open(tmp_path / "w.zr").take([0])
    assert b["x"][0].tolist() == [0, 0]


def test_values_that_fit_are_stored_as_given(tmp_path):
    schema = {"u": ("u8", [3]), "i": ("i64", [2]), "b": ("bool", [2]), "f": ("f32", [4]),
              "h": ("f16", [2]), "q": ("u64", [1])}
    with zrecord.Writer.create(tmp_path / "ok.zr", schema) as w:
        w.append({
            "u": np.array([0, 255, 7], np.int64),                 # ints in range, another dtype
            "i": np.array([3.0, -(2.0**63)]),                     # whole floats in range
            "b": np.array([1.0, 0.0]),
            "f": np.array([0.1, np.nan, np.inf, -np.inf]),        # rounding, NaN and inf are fine
            "h": np.array([True, 2048]),
            "q": [2**64 - 1],                                     # a Python int NumPy holds as uint64
        })
    b = zrecord.open(tmp_path / "ok.zr").take([0])
    assert b["u"][0].tolist() == [0, 255, 7]
    assert b["i"][0].tolist() == [3, -(2**63)]
    assert b["b"][0].tolist() == [True, False]
    f = b["f"][0]
    assert f[0] == np.float32(0.1) and np.isnan(f[1]) and f[2] == np.inf and f[3] == -np.inf
    assert b["h"][0].tolist() == [1.0, 2048.0]
    assert b["q"][0].tolist() == [2**64 - 1]


def test_append_arrow_refuses_other_integer_types(tmp_path):
    pa = pytest.importorskip("pyarrow")
    cases = [("u8", pa.array([1, -1], pa.int8())), ("i32", pa.array([1, 4294967295], pa.uint32())),
             ("i64", pa.array([1, 2**63], pa.uint64())), ("u64", pa.array([1, -1], pa.int64()))]
    for k, (dtype, column) in enumerate(cases):
        with zrecord.Writer.create(tmp_path / f"a{k}.zr", {"x": (dtype, [])}) as w:
            with pytest.raises(zrecord.SchemaError) as e:
                w.append_arrow(pa.table({"x": column}))
            assert e.value.field == "x" and e.value.column == "x" and e.value.dtype.startswith(dtype)
            assert len(w) == 0


def test_a_fixed_shape_field_needs_a_value(tmp_path):
    with zrecord.Writer.create(tmp_path / "m.zr", {"img": ("u8", [2, 2]), "tok": "i32"}) as w:
        img = np.ones((2, 2), np.uint8)
        w.append({"img": img})  # tok is variable length: absent is fine
        for record in ({"tok": np.arange(3, dtype=np.int32)}, {"img": None}, {}):
            with pytest.raises(zrecord.SchemaError) as e:
                w.append(record)
            assert (e.value.field, e.value.index) == ("img", 1)
            assert "fixed shape [2, 2]" in str(e.value)
        with pytest.raises(zrecord.SchemaError) as e:
            w.append_batch({"tok": [np.arange(2, dtype=np.int32)] * 3})
        assert (e.value.field, e.value.index) == ("img", 1)
        with pytest.raises(zrecord.SchemaError) as e:
            w.append_batch({"img": [img, None, img]})
        assert (e.value.field, e.value.index) == ("img", 2)
        with pytest.raises(zrecord.SchemaError) as e:
            w.modify(0, "img", None)
        assert (e.value.field, e.value.index) == ("img", 0)
        w.modify(0, "tok", None)  # an absent variable-length value
        assert w.append_batch({}) == (1, 1)  # no rows: nothing is missing
        assert len(w) == 1
    b = zrecord.open(tmp_path / "m.zr").take([0])
    assert b["img"].shape == (1, 2, 2) and len(b["tok"][0]) == 0


def test_a_value_of_another_shape_is_refused(tmp_path):
    with zrecord.Writer.create(tmp_path / "s.zr", {"img": ("u8", [2, 2]), "row": ("i32", [3])}) as w:
        row = np.arange(3, dtype=np.int32)
        for other in (np.ones(4, np.uint8), np.ones((1, 4), np.uint8), np.ones((4, 1), np.uint8)):
            with pytest.raises(zrecord.SchemaError) as e:
                w.append({"img": other, "row": row})
            assert (e.value.field, e.value.index) == ("img", 0)
            assert "shape" in e.value.reason
        with pytest.raises(zrecord.SchemaError) as e:
            w.append_batch({"img": np.ones((3, 4), np.uint8), "row": np.zeros((3, 3), np.int32)})
        assert e.value.field == "img"
        with pytest.raises(zrecord.SchemaError) as e:
            w.append({"img": bytes(5), "row": row})  # raw bytes: exactly the field's size
        assert e.value.field == "img"
        ragged = zrecord.Ragged(np.arange(7, dtype=np.int32), [0, 3, 7])
        with pytest.raises(zrecord.SchemaError) as e:
            w.append_batch({"img": np.ones((2, 2, 2), np.uint8), "row": ragged})
        assert (e.value.field, e.value.index) == ("row", 1)  # item 1 has 4 values
        with pytest.raises(zrecord.SchemaError) as e:
            w.modify(0, "row", np.arange(3, dtype=np.int32).reshape(3, 1))
        assert len(w) == 0
        w.append({"img": bytes(4), "row": row})
        w.append_batch({"img": np.ones((2, 2, 2), np.uint8), "row": zrecord.Ragged(np.arange(6, dtype=np.int32), [0, 3, 6])})
    b = zrecord.open(tmp_path / "s.zr").take([0, 2])
    assert b["row"].tolist() == [[0, 1, 2], [3, 4, 5]]
