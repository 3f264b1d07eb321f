"""`Batch.array(name)` and `Batch.ragged(name)` return the very object `b[name]` does (the
same zero-copy view, built once), for batches of `take`, of a loader and of pickle; a field of
the other kind raises `FieldKindError` (a `zrecord.Error` and a `TypeError`) naming the field
and both kinds, an unknown one `KeyError`. `Loader[T]` is a generic alias at run time."""

from __future__ import annotations

import pickle
import types

import numpy as np
import pytest

import zrecord
from conftest import image, tokens


def check_accessors(b: zrecord.Batch) -> None:
    idx = [int(i) for i in b.indices]
    img = b.array("image")
    assert isinstance(img, np.ndarray)
    assert img is b["image"]  # the cached view, not a copy
    np.testing.assert_array_equal(img, np.stack([image(i) for i in idx]))
    np.testing.assert_array_equal(b.array("label"), np.array([[i] for i in idx]))
    toks = b.ragged("tokens")
    assert isinstance(toks, zrecord.Ragged)
    assert toks is b["tokens"]
    assert len(toks) == len(idx)
    for j, i in enumerate(idx):
        np.testing.assert_array_equal(toks[j], tokens(i))


@pytest.mark.parametrize("backend", ["psync", "uring", "mmap"])
def test_take_batches(small, backend):
    ds = zrecord.open(small, backend=backend)
    b = ds.take(np.array([7, 3, 7, 150]))
    check_accessors(b)
    # The accessors first, then b[name]: the same objects either way round.
    b = ds.take([11, 12, 13])
    img, toks = b.array("image"), b.ragged("tokens")
    assert img is b["image"] and toks is b["tokens"]
    # Zero-copy as b[name] is: a view of the batch's Rust memory.
    assert not img.flags.owndata and isinstance(img.base, zrecord.Buffer)
    assert not toks.values.flags.owndata and isinstance(toks.values.base, zrecord.Buffer)


def test_loader_and_unpickled_batches(small):
    loader = zrecord.Loader(zrecord.open(small), batch_size=32, seed=5, epochs=1)
    batches = list(loader)
    assert batches and all(type(b) is zrecord.Batch for b in batches)
    for b in batches:
        check_accessors(b)
    again = pickle.loads(pickle.dumps(batches[0]))
    check_accessors(again)
    with pytest.raises(zrecord.FieldKindError):
        again.array("tokens")


def test_the_wrong_kind_raises_field_kind_error(small):
    b = zrecord.open(small).take([1, 2])
    with pytest.raises(zrecord.FieldKindError) as e:
        b.array("tokens")
    assert isinstance(e.value, TypeError) and isinstance(e.value, zrecord.Error)
    assert (e.value.field, e.value.expected, e.value.actual) == ("tokens", "array", "ragged")
    assert 'batch.ragged("tokens")' in str(e.value)
    # Found by pickle as zrecord.FieldKindError (another process, a torch worker's error).
    assert type(pickle.loads(pickle.dumps(e.value))) is zrecord.FieldKindError
    with pytest.raises(TypeError) as e:
        b.ragged("image")
    assert isinstance(e.value, zrecord.FieldKindError)
    assert (e.value.field, e.value.expected, e.value.actual) == ("image", "ragged", "array")
    assert 'batch.array("image")' in str(e.value)
    # The error leaves the field readable as what it is.
    check_accessors(b)


def test_an_unknown_field_raises_key_error(small):
    b = zrecord.open(small).take([1], fields="image")
    for read in (b.array, b.ragged):
        with pytest.raises(KeyError):
            read("tokens")
        with pytest.raises(KeyError):
            read("nope")


def test_loader_is_generic_at_run_time(small):
    alias = zrecord.Loader[zrecord.Batch]
    assert isinstance(alias, types.GenericAlias)
    assert alias.__origin__ is zrecord.Loader and alias.__args__ == (zrecord.Batch,)
    loader = zrecord.Loader(zrecord.open(small), batch_size=8, epochs=1,
                            collate=lambda b: b.array("label").sum())
    assert isinstance(next(loader), np.integer)
