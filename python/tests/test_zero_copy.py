"""A batch's arrays are views of the Rust batch's memory, not copies: they own no data, their
base is a zrecord buffer, and they stay right after the batch, the loader and the dataset are
gone and other allocations have reused memory."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import zrecord


def test_arrays_view_rust_memory_and_outlive_everything(tmp_path):
    # 1 KiB records of one field: the gather's slab holds them back to back, so even the
    # psync/uring paths hand NumPy the slab itself.
    path = tmp_path / "k.zr"
    rows = np.arange(512 * 128, dtype=np.uint64).reshape(512, 128)  # 1 KiB per record
    with zrecord.Writer.create(path, {"x": ("u64", [128])}) as w:
        w.append_batch({"x": rows})
    idx = np.random.default_rng(1).permutation(512)[:256]
    for backend in ["psync", "uring", "mmap"]:
        ds = zrecord.open(path, backend=backend)
        b = ds.take(idx)
        x = b["x"]
        assert not x.flags.owndata
        assert isinstance(x.base, zrecord.Buffer), type(x.base)
        assert x.base is b["x"].base  # cached: one array per field per batch
        if backend in ("psync", "uring"):
            # The gather's own slab, no copy by the binding; nothing else holds it: writable.
            assert x.base.zero_copy and x.base.writable
        # Writable exactly when the memory is the array's alone.
        assert x.flags.writeable == x.base.writable
        want = rows[idx].copy()
        loader = zrecord.Loader(ds, batch_size=64, shuffle=True, seed=3, workers=2)
        lb = next(iter(loader))
        ly = lb["x"]
        lidx = lb.indices.copy()
        del b, ds, loader, lb
        gc.collect()
        # Churn the allocator: if the memory had been freed, these would reuse it.
        junk = [np.full(128 * 256, 0xAB, dtype=np.uint64) for _ in range(64)]
        junk2 = [bytes(1024) * 64 for _ in range(64)]
        np.testing.assert_array_equal(x, want)
        np.testing.assert_array_equal(ly, rows[lidx])
        del junk, junk2


def test_shared_memory_is_read_only_and_owned_memory_is_private(tmp_path):
    # Neighbouring raw records through the mmap backend can be a view of the chunk mapping:
    # read-only (a write would fault). Copies and private slabs are writable, and writing into
    # one batch's array changes nothing another batch or the dataset sees.
    path = tmp_path / "m.zr"
    rows = np.arange(64 * 512, dtype=np.uint64).reshape(64, 512)  # 4 KiB records
    with zrecord.Writer.create(path, {"x": ("u64", [512])}) as w:
        w.append_batch({"x": rows})
    for backend in ["mmap", "psync", "uring", "auto"]:
        ds = zrecord.open(path, backend=backend)
        x = ds.take(np.arange(8))["x"]
        if x.flags.writeable:
            x[:] = 7
        else:
            assert not x.base.writable
            with pytest.raises(ValueError):
                x[0, 0] = 7
        np.testing.assert_array_equal(ds.take(np.arange(8))["x"], rows[:8])

def test_a_batch_is_one_object_and_fields_are_arrays(tmp_path):
    path = tmp_path / "t.zr"
    with zrecord.Writer.create(path, {"x": ("f32", [4]), "t": "i32"}) as w:
        w.append_batch({"x": np.ones((100, 4), np.float32), "t": [np.arange(i % 3, dtype=np.int32) for i in range(100)]})
    ds = zrecord.open(path)
    gc.collect()
    before = len(gc.get_objects())
    b = ds.take(np.arange(100))
    x, t = b["x"], b["t"]
    after = len(gc.get_objects())
    # The batch, two arrays and the ragged's two arrays (and their buffers): a handful, not one
    # per record.
    assert after - before < 20, after - before
    assert t.values.base is not None and not t.values.flags.owndata


def test_every_field_is_its_own_column_on_every_backend(tmp_path):
    # The gather lays each field out in a buffer of its own (ReadConfig::with_columns): every
    # array of a shuffled multi-field batch is the gather's memory (no copy by the binding) and
    # writable, whichever backend read it; writing into it changes nothing the dataset serves.
    path = tmp_path / "c.zr"
    n = 300
    x = np.arange(n * 24, dtype=np.float32).reshape(n, 24)
    y = np.arange(n, dtype=np.int64) * 7
    t = [np.arange(i % 5, dtype=np.int32) + i for i in range(n)]
    with zrecord.Writer.create(path, {"x": ("f32", [24]), "y": ("i64", []), "t": "i32"}) as w:
        w.append_batch({"x": x, "y": y, "t": t})
    idx = np.random.default_rng(7).permutation(n)[:64]
    for backend in ["mmap", "psync", "uring", "auto"]:
        ds = zrecord.open(path, backend=backend)
        b = ds.take(idx)
        for name in ["x", "y"]:
            arr = b[name]
            assert arr.base.zero_copy, (backend, name)
            assert arr.base.writable and arr.flags.writeable, (backend, name)
        np.testing.assert_array_equal(b["x"], x[idx])
        np.testing.assert_array_equal(b["y"], y[idx])
        ragged = b["t"]
        assert ragged.values.base.zero_copy, backend
        for j, i in enumerate(idx):
            np.testing.assert_array_equal(ragged[j], t[i])
        b["x"][:] = -1
        np.testing.assert_array_equal(ds.take(idx)["x"], x[idx])
        # Without the column layout, records read through mappings are views of them, and the
        # binding copies them together: still the same values.
        plain = zrecord.open(path, backend=backend, copy_mapped=False)
        np.testing.assert_array_equal(plain.take(idx)["x"], x[idx])
