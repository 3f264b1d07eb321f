"""Indices and integer options are read the way NumPy indexes, with the documented error classes
(issue #30): a value of the wrong type is a TypeError, an index array that is not 1-D a
ValueError, a record number out of range an IndexError with `index` (and `len`), an integer
option out of its range a ValueError naming the option and the range; never an OverflowError
or a message from the binding's internals."""

from __future__ import annotations

import numpy as np
import pytest

import zrecord
from conftest import image


def test_what_is_not_an_index_is_a_type_error(small):
    ds = zrecord.open(small)
    for bad in ([True, False, True], np.array([True, False]), b"\x01\x02", bytearray(b"\x01"),
                "12", np.array([0.5]), [1.0, 2.0], [np.float64(1)], [True], 3.0):
        with pytest.raises(TypeError, match="integers"):
            ds.take(bad)
    with pytest.raises(TypeError, match="mask"):
        ds.take([True, False])
    with pytest.raises(TypeError):
        ds[True]


def test_an_index_array_is_one_dimensional(small):
    ds = zrecord.open(small)
    with pytest.raises(ValueError, match="1-D"):
        ds.take(np.array([[1, 2], [3, 4]]))
    with pytest.raises(ValueError, match="1-D"):
        ds.take([[1, 2], [3, 4]])


def test_one_integer_is_one_index(small):
    ds = zrecord.open(small)
    for one in (np.int64(3), np.uint8(3), 3, np.array(3)):
        b = ds.take(one)
        assert b.indices.tolist() == [3]
        np.testing.assert_array_equal(b["image"][0], image(3))
    np.testing.assert_array_equal(ds[np.int32(-1)]["label"], [199])


def test_out_of_range_is_an_index_error_with_index(small):
    ds = zrecord.open(small)
    for bad in ([2**64], [2**70], [-1], np.array([-1]), [0, 200], np.array([200], np.uint64), -5):
        with pytest.raises(IndexError) as e:
            ds.take(bad)
        wanted = bad if isinstance(bad, int) else int(np.asarray(bad, dtype=object).reshape(-1)[-1])
        assert e.value.index == wanted
        assert e.value.len == 200
    with pytest.raises(IndexError) as e:
        ds[2**70]
    assert e.value.index == 2**70


def test_a_field_name_is_one_field(small):
    ds = zrecord.open(small)
    assert ds.take([1], fields="tokens").keys() == ["tokens"]
    assert next(iter(zrecord.Loader(ds, batch_size=10, fields="label"))).keys() == ["label"]
    with pytest.raises(TypeError, match="field name"):
        ds.take([1], fields=b"tokens")
    with pytest.raises(TypeError, match="field name"):
        ds.take([1], fields=[1, 2])


def test_ragged_errors_name_plain_values():
    with pytest.raises(ValueError) as e:
        zrecord.Ragged(np.arange(3), [0, 5])
    assert "end at 5" in str(e.value) and "Some" not in str(e.value)
    with pytest.raises(ValueError, match="integers"):
        zrecord.Ragged(np.arange(3), [0.0, 1.5, 3.0])  # was truncated to [0, 1, 3]
    with pytest.raises(ValueError, match="1-D"):
        zrecord.Ragged(np.arange(3), [[0, 3]])


def test_a_negative_record_number_is_refused_as_take_refuses_it(small):
    with zrecord.Writer.open(small) as w:
        for call in (lambda: w.modify(-1, "label", np.array([1], np.int64)),
                     lambda: w.delete(-1)):
            with pytest.raises(IndexError) as e:  # was OverflowError
                call()
            assert (e.value.index, e.value.len) == (-1, 200)
        with pytest.raises(IndexError) as e:
            w.modify(2**64, "label", np.array([1], np.int64))
        assert e.value.index == 2**64
        with pytest.raises(TypeError):
            w.delete(True)
        w.modify(np.int64(3), "label", np.array([7], np.int64))
    assert zrecord.open(small).take(3)["label"].tolist() == [[7]]


@pytest.mark.parametrize("option,value", [("seed", -1), ("seed", 2**64), ("batch_size", -1),
                                          ("workers", -2), ("epochs", -1), ("retries", 2**40),
                                          ("shard", (-1, 2))])
def test_an_integer_option_out_of_range_is_a_value_error(small, option, value):
    ds = zrecord.open(small)
    with pytest.raises(ValueError, match=r"from 0 to") as e:  # was OverflowError
        zrecord.Loader(ds, **{option: value})
    assert not isinstance(e.value, OverflowError)
    assert option.split("_")[0] in str(e.value)
