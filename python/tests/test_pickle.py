"""Batch, Ragged and Field pickle (issue #30): a batch comes back with the same fields, values,
indices and loader attributes; and the exception classes fit Python's: zrecord.IOError is an
OSError, zrecord.SchemaError a ValueError."""

from __future__ import annotations

import errno
import pickle

import numpy as np
import pytest

import zrecord


def test_a_batch_pickles_with_its_arrays(small):
    ds = zrecord.open(small)
    b = ds.take([7, 3, 7])
    again = pickle.loads(pickle.dumps(b))
    assert again.keys() == b.keys() and len(again) == 3 and again.nbytes == b.nbytes
    np.testing.assert_array_equal(again.indices, b.indices)
    np.testing.assert_array_equal(again["image"], b["image"])
    assert isinstance(again["tokens"], zrecord.Ragged)
    np.testing.assert_array_equal(again["tokens"].offsets, b["tokens"].offsets)
    np.testing.assert_array_equal(again["tokens"].values, b["tokens"].values)
    assert again.epoch is None and not again.is_pad.any()
    loader = zrecord.Loader(ds, batch_size=50, shuffle=True, seed=3, pad_to_equal=True, shard=(1, 3))
    lb = next(loader)
    lb2 = pickle.loads(pickle.dumps(lb))
    assert (lb2.epoch, lb2.position) == (lb.epoch, lb.position)
    np.testing.assert_array_equal(lb2.is_pad, lb.is_pad)
    np.testing.assert_array_equal(lb2["label"], lb["label"])


def test_ragged_and_field_pickle():
    r = zrecord.Ragged(np.arange(5, dtype=np.int32), [0, 2, 2, 5])
    r2 = pickle.loads(pickle.dumps(r))
    assert len(r2) == 3 and r2[2].tolist() == [2, 3, 4] and r2.values.dtype == np.int32
    f = zrecord.Field("img", "u8", [3, 4], codec="zstd:9")
    assert pickle.loads(pickle.dumps(f)) == f


def test_the_exception_classes_fit_pythons():
    assert issubclass(zrecord.IOError, OSError) and issubclass(zrecord.IOError, zrecord.Error)
    assert issubclass(zrecord.SchemaError, ValueError) and issubclass(zrecord.SchemaError, zrecord.Error)
    e = pickle.loads(pickle.dumps(zrecord.IOError("m")))
    assert type(e) is zrecord.IOError and str(e) == "m"


def test_an_io_error_is_caught_as_os_error(tmp_path):
    (tmp_path / "a-file").write_bytes(b"")
    with pytest.raises(OSError) as e:  # a directory under a file
        zrecord.Writer.create(tmp_path / "a-file" / "x.zr", {"x": "u8"})
    assert isinstance(e.value, zrecord.Error)
    if isinstance(e.value, zrecord.IOError) and getattr(e.value, "op", None):
        assert e.value.errno in (errno.ENOENT, errno.ENOTDIR, None)
