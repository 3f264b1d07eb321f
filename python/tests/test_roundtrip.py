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
    with pytest.raises(TypeError):  # not integers: a TypeError, as for Python's list indices
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


def test_values_that_do_not_fit_are_refused(tmp_path):
    with zrecord.Writer.create(tmp_path / "v.zr", {"u": ("u8", [1]), "i": ("i32", [1]), "b": ("bool", [1])}) as w:
        with pytest.raises(ValueError):
            w.append({"u": np.array([300]), "i": np.array([1]), "b": np.array([True])})
        with pytest.raises(ValueError):
            w.append({"u": np.array([1]), "i": np.array([3.7]), "b": np.array([True])})
        with pytest.raises(ValueError):
            w.append({"u": np.array([1]), "i": np.array([1]), "b": np.array([2])})
        with pytest.raises(ValueError):
            w.append_batch({"u": np.array([[1], [-1]]), "i": np.array([[1], [2]]), "b": np.array([[1], [0]])})
        w.append({"u": np.array([255]), "i": np.array([2**31 - 1]), "b": np.array([1])})
    b = zrecord.open(tmp_path / "v.zr").take([0])
    assert (b["u"][0, 0], b["i"][0, 0], b["b"][0, 0]) == (255, 2**31 - 1, True)


def test_bf16_stores_bits_and_rounds_floats(tmp_path):
    with zrecord.Writer.create(tmp_path / "h.zr", {"h": ("bf16", [3])}) as w:
        w.append({"h": np.array([1.5, -2.0, 1.0 + 2**-9], dtype=np.float32)})  # the last rounds to 1.0
        w.append({"h": np.array([0x3FC0, 0, 0x7F80], dtype=np.uint16)})  # raw bits
    h = zrecord.open(tmp_path / "h.zr").take([0, 1])["h"]
    assert h.dtype == np.uint16
    assert h[0].tolist() == [0x3FC0, 0xC000, 0x3F80]
    assert h[1].tolist() == [0x3FC0, 0, 0x7F80]


def test_numpy_type_strings_count_bytes(tmp_path):
    f = zrecord.Field("x", np.dtype("int64").str)
    assert f.dtype == "i64"
    assert zrecord.Field("y", "<u8").dtype == "u64"
    assert zrecord.Field("z", "u8").dtype == "u8"  # zrecord's own names count bits
    assert zrecord.Field("w", np.float16).dtype == "f16"
    with pytest.raises(ValueError):
        zrecord.Field("v", ">f4")


def test_errors_pickle_with_their_class(small):
    import pickle

    for cls in [zrecord.Error, zrecord.IOError, zrecord.ChecksumError, zrecord.RemoteError]:
        e = pickle.loads(pickle.dumps(cls("m")))
        assert type(e) is cls
    with pytest.raises(IndexError) as e:
        zrecord.open(small)[500]
    assert (e.value.index, e.value.len) == (500, 200)


def test_a_writer_error_in_one_thread_and_len_in_another_do_not_deadlock(small):
    import threading

    w = zrecord.Writer.open(small)
    stop = threading.Event()
    errors = []

    def modify() -> None:
        while not stop.is_set():
            try:
                w.modify(10**9, "label", np.array([1], np.int64))
            except IndexError:
                errors.append(1)

    t = threading.Thread(target=modify)
    t.start()
    deadline = __import__("time").monotonic() + 2
    n = 0
    while __import__("time").monotonic() < deadline:
        assert len(w) == 200
        n += 1
    stop.set()
    t.join(10)
    assert not t.is_alive(), "the writer deadlocked"
    assert errors and n > 0
    w.close()
