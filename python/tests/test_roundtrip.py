"""Every dtype and shape written from Python reads back exactly, through `take`, one record
at a time, and from a fresh process; variable-length fields come back as `Ragged`."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import zrecord
from conftest import BACKENDS, image, tokens

NUMPY = {"u8": "uint8", "i8": "int8", "u16": "uint16", "i16": "int16", "u32": "uint32",
         "i32": "int32", "u64": "uint64", "i64": "int64", "f16": "float16", "f32": "float32",
         "f64": "float64", "bool": "bool"}
DTYPES = ["u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "f16", "f32", "f64", "bool"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_fixed_and_ragged(tmp_path, dtype):
    np_dtype = np.dtype(NUMPY[dtype])
    rng = np.random.default_rng(5)
    n = 37
    if np_dtype == np.bool_:
        fixed = rng.integers(0, 2, size=(n, 2, 3)).astype(bool)
    else:
        fixed = (rng.integers(0, 100, size=(n, 2, 3))).astype(np_dtype)
    ragged = [fixed[i].reshape(-1)[: i % 5] for i in range(n)]
    path = tmp_path / f"{dtype}.zr"
    with zrecord.Writer.create(path, {"a": (dtype, [2, 3]), "v": dtype}) as w:
        w.append_batch({"a": fixed, "v": ragged})
    ds = zrecord.open(path)
    assert len(ds) == n
    idx = np.array([5, 0, 36, 5, 17])
    b = ds.take(idx)
    a = b["a"]
    assert a.shape == (5, 2, 3) and a.dtype == np_dtype
    np.testing.assert_array_equal(a, fixed[idx])
    v = b["v"]
    assert isinstance(v, zrecord.Ragged)
    assert v.offsets.dtype == np.int64 and v.offsets[0] == 0 and len(v.offsets) == 6
    for j, i in enumerate(idx):
        np.testing.assert_array_equal(v[j], ragged[i])
    np.testing.assert_array_equal(b.indices, idx)
    assert not b.is_pad.any()


@pytest.mark.parametrize("backend", BACKENDS)
def test_take_in_caller_order_on_every_backend(small, backend):
    ds = zrecord.open(small, backend=backend)
    idx = np.array([7, 3, 7, 199, 0, 64])
    b = ds.take(idx)
    assert len(b) == 6
    assert b["image"].shape == (6, 3, 4, 4) and b["image"].dtype == np.uint8
    for j, i in enumerate(idx):
        np.testing.assert_array_equal(b["image"][j], image(i))
        assert b["label"][j, 0] == i
        np.testing.assert_array_equal(b["tokens"][j], tokens(i))
    # Any int sequence; one record as a dict.
    b2 = ds.take([7, 3])
    np.testing.assert_array_equal(b2["image"], b["image"][:2])
    rec = ds[3]
    np.testing.assert_array_equal(rec["image"], image(3))
    np.testing.assert_array_equal(ds[-1]["label"], [199])


def test_fields_limit_what_is_read(small):
    ds = zrecord.open(small)
    b = ds.take([1, 2], fields=["tokens"])
    assert b.keys() == ["tokens"]
    with pytest.raises(KeyError):
        b["image"]


def test_bad_indices_are_index_errors(small):
    ds = zrecord.open(small)
    with pytest.raises(IndexError):
        ds.take([0, 200])
    with pytest.raises(IndexError):
        ds.take([-1])
    with pytest.raises(IndexError):
        ds[200]
    with pytest.raises(ValueError):
        ds.take(np.array([0.5]))


def test_schema_and_metadata(small):
    ds = zrecord.open(small)
    assert ds.fields == ["image", "label", "tokens"]
    f = ds.schema[0]
    assert (f.name, f.dtype, f.shape, f.codec) == ("image", "u8", [3, 4, 4], "raw")
    assert ds.generation >= 1
    assert "small.zr" in repr(ds)


def test_another_process_reads_what_python_wrote(small):
    code = (
        "import sys, numpy as np, zrecord\n"
        "ds = zrecord.open(sys.argv[1])\n"
        "b = ds.take(np.arange(len(ds)))\n"
        "print(int(b['label'].sum()), int(b['tokens'].values.astype(np.int64).sum()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(small)], capture_output=True, text=True, check=True)
    want_tokens = sum(int(tokens(i).astype(np.int64).sum()) for i in range(200))
    assert out.stdout.split() == [str(sum(range(200))), str(want_tokens)]


def test_writer_modify_delete_refresh(small):
    ds = zrecord.open(small)
    with zrecord.Writer.open(small) as w:
        w.modify(3, "label", np.array([1000], dtype=np.int64))
        w.delete(0)  # record 199 moves to 0
    assert ds.take([3])["label"][0, 0] == 3  # the handle shows its commit until refresh
    assert ds.refresh()
    assert len(ds) == 199
    b = ds.take([3, 0])
    assert b["label"][0, 0] == 1000 and b["label"][1, 0] == 199


def test_a_second_writer_is_refused(small):
    w = zrecord.Writer.open(small)
    try:
        with pytest.raises(zrecord.WriterBusyError) as e:
            zrecord.Writer.open(small)
        assert "small.zr" in e.value.path
    finally:
        w.close()


def test_an_exception_in_the_block_commits_nothing(small):
    with pytest.raises(RuntimeError):
        with zrecord.Writer.open(small) as w:
            w.append({"image": image(0), "label": np.array([1], dtype=np.int64), "tokens": tokens(1)})
            raise RuntimeError("boom")
    assert len(zrecord.open(small)) == 200
