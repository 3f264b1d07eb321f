"""In a child of fork() the parent's Writer and Loader refuse with one class, ConfigError, on
every method, `Writer.close()` included (issue #30)."""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest

import zrecord


def _try_everything(loader, writer, conn) -> None:
    out = {}
    calls = {
        "loader.next": lambda: next(loader),
        "loader.state_dict": loader.state_dict,
        "loader.stats": loader.stats,
        "writer.append": lambda: writer.append({"x": np.array([1], np.uint8)}),
        "writer.commit": writer.commit,
        "writer.len": lambda: len(writer),
        "writer.close": writer.close,
    }
    for name, call in calls.items():
        try:
            call()
            out[name] = "ran"
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            out[name] = type(e).__name__ + (": another process" if "another process" in str(e) else "")
    conn.send(out)
    conn.close()


def test_a_forked_child_gets_config_error_from_every_method(small, tmp_path):
    ds = zrecord.open(small)
    loader = zrecord.Loader(ds, batch_size=10, workers=1, epochs=None)
    next(loader)
    writer = zrecord.Writer.create(tmp_path / "w.zr", {"x": "u8"})
    ctx = mp.get_context("fork")
    parent_end, child_end = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_try_everything, args=(loader, writer, child_end))
    p.start()
    child_end.close()
    if not parent_end.poll(60):
        p.kill()
        p.join()
        pytest.fail("the child hung")
    out = parent_end.recv()
    p.join(30)
    assert out == {name: "ConfigError: another process" for name in out}, out
    writer.append({"x": np.array([1], np.uint8)})  # the parent's writer is untouched
    writer.close()
    assert len(zrecord.open(tmp_path / "w.zr")) == 0
