"""A batch's arrays are views of the Rust batch's memory, not copies: they own no data, their
base is a zrecord buffer, and they stay right after the batch, the loader and the dataset are
gone and other allocations have reused memory."""

from __future__ import annotations

import gc

import numpy as np

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
        assert not x.flags.writeable
        assert isinstance(x.base, zrecord.Buffer), type(x.base)
        assert x.base is b["x"].base  # cached: one array per field per batch
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
