"""The transform stage from Python: built-in image operations turn JPEG bytes into one
(batch, height, width, 3) uint8 array; the same record gets the same random crop with any
worker count, after a state_dict() resume and after an elastic resume on another world size;
a Python callable runs on the workers (with a seeded numpy Generator from random_map); a
corrupt JPEG or a raising callable is a TransformError naming the record, field and op."""

from __future__ import annotations

import io
import json
import threading

import numpy as np
import pytest
from PIL import Image

import zrecord
from zrecord import transform as T

N = 48


def _jpeg(i: int) -> bytes:
    w, h = 24 + i % 17, 20 + i % 13
    y, x = np.mgrid[0:h, 0:w]
    px = np.stack([x * 255 // w, y * 255 // h, (x * 7 + y * 13 + i * 31) % 256], axis=-1)
    out = io.BytesIO()
    Image.fromarray(px.astype(np.uint8)).save(out, format="JPEG", quality=90)
    return out.getvalue()


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("jpegs") / "jpegs.zr"
    with zrecord.Writer.create(path, {"image": "bytes", "label": ("i64", [])}) as w:
        for i in range(N):
            data = b"\xff\xd8\xff not a JPEG" if i == 29 else _jpeg(i)
            w.append({"image": np.frombuffer(data, np.uint8), "label": np.int64(i % 10)})
    return path


def _ops():
    return {"image": [T.decode(), T.random_resized_crop(16), T.random_flip()]}


def _crops(loader) -> dict[tuple[int, int], bytes]:
    out = {}
    for b in loader:
        images = b.array("image")
        assert images.shape == (len(b.indices), 16, 16, 3) and images.dtype == np.uint8
        for i, img in zip(b.indices.tolist(), images):
            out[(b.epoch, i)] = img.tobytes()
    return out


def _loader(ds, **kw):
    kw.setdefault("transform", _ops())
    kw.setdefault("fields", ["image", "label"])
    return zrecord.Loader(ds, batch_size=5, seed=4, epochs=2, **kw)



def test_vision_batch_and_exact_resume(jpegs, tmp_path):
    # A copy without the corrupt record: rewrite index 29 with a good image.
    good = tmp_path / "good.zr"
    with zrecord.Writer.create(good, {"image": "bytes", "label": ("i64", [])}) as w:
        for i in range(N):
            w.append({"image": np.frombuffer(_jpeg(i), np.uint8), "label": np.int64(i % 10)})
    ds = zrecord.open(good)
    whole = _crops(_loader(ds, workers=1))
    assert len(whole) == 2 * N
    assert sum(whole[(0, i)] != whole[(1, i)] for i in range(N)) > N - 5
    assert _crops(_loader(ds, workers=3)) == whole
    for split, workers in [(1, 2), (7, 1), (12, 3)]:
        loader = _loader(ds, workers=2)
        it = iter(loader)
        seen = {}
        for _ in range(split):
            b = next(it)
            for i, img in zip(b.indices.tolist(), b.array("image")):
                seen[(b.epoch, i)] = img.tobytes()
        state = json.loads(json.dumps(loader.state_dict()))
        seen.update(_crops(_loader(ds, workers=workers, state=state)))
        assert seen == whole, split
    # Elastic: two ranks stop early in epoch 0, three ranks go on.
    seen, states = {}, []
    for rank, batches in [(0, 2), (1, 3)]:
        loader = _loader(ds, workers=1, shard=(rank, 2))
        it = iter(loader)
        for _ in range(batches):
            b = next(it)
            for i, img in zip(b.indices.tolist(), b.array("image")):
                seen[(b.epoch, i)] = img.tobytes()
        states.append(loader.state_dict())
    for rank in range(3):
        seen.update(_crops(_loader(ds, workers=2, shard=(rank, 3), resume_from=states)))
    assert seen == whole
    labels = next(iter(_loader(ds))).array("label")
    assert labels.dtype == np.int64


def test_python_callables_on_the_workers(jpegs, tmp_path):
    good = tmp_path / "good.zr"
    with zrecord.Writer.create(good, {"image": "bytes"}) as w:
        for i in range(20):
            w.append({"image": np.frombuffer(_jpeg(i), np.uint8)})
    ds = zrecord.open(good)
    threads = set()

    def pil_decode(x: bytes) -> np.ndarray:
        threads.add(threading.get_ident())
        return np.asarray(Image.open(io.BytesIO(x)).convert("RGB").resize((8, 8)))

    def jitter(img: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return (img.astype(np.int16) + rng.integers(0, 5)).clip(0, 255).astype(np.uint8)

    def run(workers: int):
        tf = {"image": [pil_decode, T.random_map(jitter), T.random_flip()]}
        out = {}
        for b in zrecord.Loader(ds, batch_size=4, seed=1, workers=workers, transform=tf):
            imgs = b.array("image")
            assert imgs.shape == (len(b.indices), 8, 8, 3)
            for i, img in zip(b.indices.tolist(), imgs):
                out[i] = img.tobytes()
        return out

    one = run(1)
    assert run(2) == one
    assert threading.get_ident() not in threads, "the callable ran on the worker threads"


def test_corrupt_jpeg_is_a_transform_error(jpegs):
    ds = zrecord.open(jpegs)
    loader = zrecord.Loader(ds, batch_size=4, shuffle=False, workers=2, transform=_ops())
    with pytest.raises(zrecord.TransformError) as e:
        for _ in loader:
            pass
    assert (e.value.field, e.value.index) == ("image", 29)
    assert e.value.op.startswith(("decode", "random_resized_crop"))
    assert "JPEG" in e.value.reason and "record 29" in str(e.value)
    assert isinstance(e.value, zrecord.Error)
    kept = []
    with pytest.warns(RuntimeWarning, match="skipped a batch.*record 29"):
        for b in zrecord.Loader(ds, batch_size=4, shuffle=False, on_error="skip", transform=_ops()):
            kept += b.indices.tolist()
    assert kept == [i for i in range(N) if not 28 <= i < 32]


def test_raising_callable_names_the_record(jpegs):
    def boom(x: bytes) -> bytes:
        if x.startswith(b"\xff\xd8\xff not"):
            raise ValueError("not an image I know")
        return x

    ds = zrecord.open(jpegs)
    loader = zrecord.Loader(ds, batch_size=8, shuffle=False, transform={"image": boom})
    with pytest.raises(zrecord.TransformError) as e:
        list(loader)
    assert (e.value.index, e.value.field) == (29, "image")
    assert "boom" in e.value.op and "ValueError: not an image I know" in e.value.reason


def test_bad_arguments_raise_at_once(jpegs):
    with pytest.raises(ValueError, match="1 to 16384"):
        T.random_resized_crop(0)
    with pytest.raises(ValueError, match="scale"):
        T.random_resized_crop(8, scale=(0.5, 0.1))
    with pytest.raises(ValueError, match="layout"):
        T.normalize(layout="NCHW")
    with pytest.raises(ValueError, match="operation"):
        zrecord.Loader(zrecord.open(jpegs), transform={"image": [3]})
    assert repr(T.decode()) == "zrecord.transform.decode()"


def test_normalize_gives_chw_floats(tmp_path):
    path = tmp_path / "one.zr"
    with zrecord.Writer.create(path, {"image": "bytes"}) as w:
        for i in range(3):
            w.append({"image": np.frombuffer(_jpeg(i), np.uint8)})
    tf = {"image": [T.decode(), T.resize(20), T.center_crop(16), T.normalize()]}
    b = next(iter(zrecord.Loader(zrecord.open(path), batch_size=3, transform=tf)))
    x = b.array("image")
    assert x.shape == (3, 3, 16, 16) and x.dtype == np.float32
    assert -2.2 < float(x.min()) and float(x.max()) < 2.7


def test_exit_with_callables_running(tmp_path):
    """A process that leaves a loader whose workers are inside Python callables exits at once
    (the workers wait on the GIL during finalization; nothing joins them)."""
    import subprocess
    import sys
    import textwrap

    path = tmp_path / "exit.zr"
    with zrecord.Writer.create(path, {"image": "bytes"}) as w:
        for i in range(64):
            w.append({"image": np.frombuffer(_jpeg(i), np.uint8)})
    script = textwrap.dedent(
        f"""
        import io, time, numpy as np, zrecord
        from PIL import Image
        def slow(x):
            time.sleep(0.01)
            return np.asarray(Image.open(io.BytesIO(x)).convert("RGB").resize((8, 8)))
        loader = zrecord.Loader(zrecord.open({str(path)!r}), batch_size=4, workers=2,
                                epochs=None, transform={{"image": slow}})
        it = iter(loader)
        next(it)
        print("exiting", flush=True)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "exiting" in out.stdout


def _jitter(img: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return img


def test_ops_pickle(jpegs):
    """Operations pickle (a spawned torch or Grain worker gets the loader's options pickled):
    built-in ones as the call that made them, a callable by reference."""
    import pickle

    ops = [T.decode(channels=None), T.random_resized_crop((12, 16), scale=(0.5, 1.0)),
           T.random_crop(8), T.resize((10, 20)), T.center_crop(4), T.random_flip(p=0.25),
           T.normalize(dtype="bfloat16", layout="HWC"), T.random_map(_jitter)]
    for op in ops:
        assert pickle.loads(pickle.dumps(op)).name == op.name
    tf = pickle.loads(pickle.dumps({"image": [T.decode(), T.random_crop(8)]}))
    b = next(iter(zrecord.Loader(zrecord.open(jpegs), batch_size=4, shuffle=False, transform=tf)))
    assert b.array("image").shape == (4, 8, 8, 3)


def test_fork_child_exits_at_once(tmp_path):
    """A child forked while the parent's workers are inside Python callables exits at once:
    the parent's calls in progress are not the child's to wait for at exit."""
    import subprocess
    import sys
    import textwrap

    path = tmp_path / "fork.zr"
    with zrecord.Writer.create(path, {"image": "bytes"}) as w:
        for i in range(64):
            w.append({"image": np.frombuffer(_jpeg(i), np.uint8)})
    script = textwrap.dedent(
        f"""
        import os, sys, time, numpy as np, zrecord
        def slow(x):
            time.sleep(0.05)
            return x
        loader = zrecord.Loader(zrecord.open({str(path)!r}), batch_size=4, workers=2,
                                epochs=None, worker_queue_size=1000,
                                transform={{"image": slow}})
        it = iter(loader)
        next(it)
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            sys.exit(0)  # runs the atexit hooks, zrecord's among them
        os.waitpid(pid, 0)
        print(f"child took {{time.monotonic() - start:.2f}}", flush=True)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    took = float(out.stdout.split()[-1])
    assert took < 5, out.stdout
