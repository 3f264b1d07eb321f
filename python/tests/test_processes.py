"""Processes: a child forked after the parent used a dataset (and its rings, pools and
threads) reads right on every backend, and so does a spawned one given the pickled dataset;
a `Dataset` pickles as its path and options; Ctrl-C interrupts a blocked `next()`; a forked
child never holds its parent's writer lock."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import socket
import threading
import time

import numpy as np
import pytest

import zrecord
from conftest import BACKENDS, image


def _child_sum(ds, indices) -> int:
    b = ds.take(indices)
    loader = zrecord.Loader(ds, batch_size=32, shuffle=True, seed=1, workers=2)
    n = sum(len(x) for x in loader)
    return int(b["label"].sum()) * 1000 + n


def _expect(indices, n) -> int:
    return int(np.sum(indices)) * 1000 + n


def _child(ds, indices, conn) -> None:
    try:
        conn.send(("ok", _child_sum(ds, indices)))
    except BaseException as e:  # report, never hang the parent
        conn.send(("error", repr(e)))
    finally:
        conn.close()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_child_after_the_parent_used_the_dataset(small, backend, method):
    ds = zrecord.open(small, backend=backend)
    # The parent uses the dataset first: rings, pools, worker threads all exist now.
    np.testing.assert_array_equal(ds.take([5])["image"][0], image(5))
    list(zrecord.Loader(ds, batch_size=50, workers=2))
    indices = np.arange(0, 200, 3)
    ctx = mp.get_context(method)
    # With fork the children use the parent's own handle (inherited, not pickled); with spawn
    # they get it pickled (its path and options) and reopen it.
    children = []
    for idx in (indices, indices[::-1]):
        parent_end, child_end = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_child, args=(ds, idx, child_end))
        p.start()
        child_end.close()
        children.append((p, parent_end))
    for p, conn in children:
        ready = conn.poll(120)
        if not ready:
            p.kill()
            p.join()
            pytest.fail(f"a {method}ed child on {backend} hung for 120 s")
        status, value = conn.recv()
        p.join(30)
        assert status == "ok", value
        assert value == _expect(indices, 200)
        assert p.exitcode == 0
    # The parent still reads.
    np.testing.assert_array_equal(ds.take([7])["image"][0], image(7))
    assert len(list(zrecord.Loader(ds, batch_size=50, workers=2))) == 4


def test_a_dataset_pickles_as_its_path_and_options(small):
    ds = zrecord.open(small, backend="psync", verify=False)
    ds2 = pickle.loads(pickle.dumps(ds))
    assert ds2.path == ds.path and len(ds2) == len(ds)
    assert ds2.backend == ds.backend
    np.testing.assert_array_equal(ds2.take([9])["image"], ds.take([9])["image"])


class _Hanger:
    """A TCP forwarder to `upstream` (host, port) on 127.0.0.1 that, once `hang()` is called,
    cuts the connections it forwards and takes new ones without ever answering them: a request
    through it waits for its timeout."""

    def __init__(self, upstream):
        self.upstream = upstream
        self.hanging = threading.Event()
        self.held = []
        self.piped = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            if self.hanging.is_set():
                self.held.append(conn)
                continue
            up = socket.create_connection(self.upstream)
            self.piped += [conn, up]
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def hang(self):
        self.hanging.set()
        for c in self.piped:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.listener.close()
        for c in self.held:
            c.close()


def test_ctrl_c_interrupts_a_blocked_next(small, s3):
    # A dataset on a store whose requests stop being answered once it is open: the worker's
    # range request waits for its 30 s timeout, so next() blocks; SIGINT must end it with
    # KeyboardInterrupt well before. (A corrupt record no longer blocks: the loader returns a
    # checksum mismatch at once, without retrying it.)
    url = s3.url("py/ctrl-c")
    zrecord.push(small, url, storage_options=s3.options)
    host, port = s3.endpoint.removeprefix("http://").split(":")
    hanger = _Hanger((host, int(port)))
    options = dict(s3.options, aws_endpoint=hanger.endpoint)
    try:
        ds = zrecord.open(url, storage_options=options, cache_bytes=0)
        hanger.hang()
        loader = zrecord.Loader(ds, batch_size=200, shuffle=False, workers=1)
        # Python's own SIGINT handler, whatever the process inherited (a shell's background job
        # starts with SIGINT ignored).
        old = signal.signal(signal.SIGINT, signal.default_int_handler)
        timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
        start = time.monotonic()
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                next(iter(loader))
        finally:
            timer.cancel()
            signal.signal(signal.SIGINT, old)
        latency = time.monotonic() - start - 0.3
        assert latency < 2.0, latency
    finally:
        hanger.close()


def _use_parents_loader(loader, writer, conn) -> None:
    out = []
    try:
        next(iter(loader))
        out.append("loader ran")
    except zrecord.ConfigError as e:
        out.append("loader refused" if "another process" in str(e) else repr(e))
    try:
        writer.commit()
        out.append("writer ran")
    except zrecord.Error as e:
        out.append("writer refused" if "another process" in str(e) else repr(e))
    del loader, writer  # dropping the parent's objects must not wait on its threads
    import gc

    gc.collect()
    conn.send(out)
    conn.close()


def test_a_forked_child_is_refused_the_parents_loader_and_writer(small, tmp_path):
    ds = zrecord.open(small)
    loader = zrecord.Loader(ds, batch_size=10, workers=2, epochs=None)
    it = iter(loader)
    next(it)
    writer = zrecord.Writer.create(tmp_path / "w.zr", {"x": "u8"})
    writer.append({"x": np.array([1], np.uint8)})
    ctx = mp.get_context("fork")
    parent_end, child_end = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_use_parents_loader, args=(loader, writer, child_end))
    p.start()
    child_end.close()
    if not parent_end.poll(60):
        p.kill()
        p.join()
        pytest.fail("the child hung on the parent's loader or writer")
    assert parent_end.recv() == ["loader refused", "writer refused"]
    p.join(30)
    assert p.exitcode == 0
    # The parent's own loader and writer carry on.
    assert len(next(it)) == 10
    assert writer.commit() >= 1
    writer.close()
    assert len(zrecord.open(tmp_path / "w.zr")) == 1


def _outlive_the_parents_writer(path, conn, go) -> None:
    try:
        zrecord.Writer.open(path)
        conn.send("taken")
    except zrecord.WriterBusyError:
        conn.send("refused")
    except BaseException as e:  # report, never hang the parent
        conn.send(repr(e))
    conn.close()
    go.wait(60)  # lives on, with copies of the parent's descriptors, until the parent reopens


def test_a_forked_child_never_keeps_the_parents_writer_busy(tmp_path):
    # A DataLoader's worker forked while a writer is open must not hold the writer's lock
    # after the parent closes the writer: the parent's next writer opens at once.
    path = tmp_path / "w.zr"
    writer = zrecord.Writer.create(path, {"x": "u8"})
    writer.append({"x": np.array([1], np.uint8)})
    ctx = mp.get_context("fork")
    parent_end, child_end = ctx.Pipe(duplex=False)
    go = ctx.Event()
    p = ctx.Process(target=_outlive_the_parents_writer, args=(path, child_end, go))
    p.start()
    child_end.close()
    try:
        assert parent_end.poll(60), "the child hung"
        assert parent_end.recv() == "refused"  # the parent holds it
        writer.commit()
        writer.close()
        assert p.is_alive()
        again = zrecord.Writer.open(path)  # was WriterBusyError: the child held the lock
        again.append({"x": np.array([2], np.uint8)})
        again.commit()
        again.close()
    finally:
        go.set()
        p.join(30)
    assert p.exitcode == 0
    assert len(zrecord.open(path)) == 2


def test_ctrl_c_never_loses_a_batch(seq_dataset):
    # SIGINT every ~10 ms while a fast loader runs. The handler raises only while the test is
    # inside next() (elsewhere a KeyboardInterrupt would end the test itself, not test the
    # loader). Every interrupted next() keeps the batch it may have received, so the batches
    # handed out are exactly the uninterrupted run's, and a checkpoint taken right after an
    # interrupt resumes with the batch that call did not return.
    options = dict(batch_size=10, shuffle=True, seed=8, epochs=40, workers=2)
    ds = zrecord.open(seq_dataset)
    whole = [b.indices.tolist() for b in zrecord.Loader(ds, **options)]
    loader = zrecord.Loader(ds, **options)
    stop = threading.Event()
    armed = [False]

    def handler(signum, frame):
        if armed[0]:
            raise KeyboardInterrupt

    def pester() -> None:
        while not stop.is_set():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)

    old = signal.signal(signal.SIGINT, handler)
    got, interrupts, checked = [], 0, 0
    t = threading.Thread(target=pester)
    t.start()
    try:
        while True:
            armed[0] = True
            try:
                b = next(loader)
            except KeyboardInterrupt:
                armed[0] = False
                interrupts += 1
                if checked < 3:
                    checked += 1
                    state = loader.state_dict()
                    resumed = zrecord.Loader(ds, **options, state=state)
                    assert next(resumed).indices.tolist() == whole[len(got)]
                continue
            except StopIteration:
                break
            finally:
                armed[0] = False
            got.append(b.indices.tolist())
    finally:
        stop.set()
        t.join()
        signal.signal(signal.SIGINT, old)
    assert interrupts > 0
    assert got == whole
