"""Two threads reading one field of one batch both get its array (issue #30): a reader that
finds another thread building it (building calls into Python, where a garbage collection may
run finalizers and let another thread take the GIL) waits for that array instead of failing
with "being built by another thread"."""

from __future__ import annotations

import gc
import sys
import threading

import numpy as np

import zrecord


def _read(batch):
    return batch["flag"]  # the garbage collector callback below looks for this frame


def test_a_second_reader_waits_for_the_array(tmp_path):
    path = tmp_path / "b.zr"
    with zrecord.Writer.create(path, {"flag": ("bool", [4])}) as w:
        w.append_batch({"flag": np.ones((64, 4), bool)})
    ds = zrecord.open(path)
    errors, arrays = [], []
    state = {"batch": None, "main": None, "other": None}

    def other_reader():
        try:
            arrays.append(state["batch"]["flag"])
        except BaseException as e:  # noqa: BLE001 - the test reports it
            errors.append(e)

    def callback(phase, info):
        # A collection that starts inside `_read` on the main thread runs while the field is
        # being built: another thread reads the same field right then.
        if phase != "start" or threading.current_thread() is not state["main"] or state["other"]:
            return
        frame = sys._getframe(1)
        while frame is not None and frame.f_code is not _read.__code__:
            frame = frame.f_back
        if frame is None:
            return
        t = threading.Thread(target=other_reader)
        state["other"] = t
        t.start()
        t.join(0.3)  # it waits for this build (or, before the fix, fails at once)

    state["main"] = threading.current_thread()
    old = gc.get_threshold()
    gc.callbacks.append(callback)
    try:
        for _ in range(50):
            state["batch"] = ds.take(np.arange(64))
            gc.set_threshold(1)
            mine = _read(state["batch"])
            gc.set_threshold(*old)
            if state["other"] is not None:
                break
    finally:
        gc.set_threshold(*old)
        gc.callbacks.remove(callback)
    assert state["other"] is not None, "no collection ran during a build"
    state["other"].join(10)
    assert errors == []
    assert len(arrays) == 1 and arrays[0] is mine
