#!/usr/bin/env python3
"""zrecord from Python: `Dataset.take` and `Loader`, the same records and indices as the Rust
benches.

Usage:
  take.py take DIR [--backend mmap] [--batch 256] [--batches 2000] [--seed 1] [--consume]
  take.py loader DIR [--workers 2] [--batch 256] [--batches 2000] [--seed 1] [--backend auto]
  take.py thread DIR [--workers 1] [--seconds 5]
  take.py ctrlc DIR [--rounds 20]

`take`: per batch, `ds.take(idx)` and `b[field]` (the field's NumPy array), the indices of
`zrecord bench gather DIR --seed S` on one thread (benches/baselines/numpy_memmap.py's
`indices`, drawn before timing). With --consume every 64-byte line of each batch's array is read
once (`zrecord bench gather --consume` reads every byte). Counts the Python objects each batch
creates (gc-tracked, before and after one batch with gc off).

`loader`: `zrecord.Loader(ds, batch_size, shuffle=True, seed, workers, epochs=None)`, the first
`batches` batches, each field's array fetched: the figure to set beside `zrecord bench loader`.

`thread`: a pure-Python counting loop alone, then beside a 1-worker loader running flat out
in a thread of the same process; prints the loop's speed in both (the GIL is released while
the loader waits and gathers, so the loop should keep most of its speed).

`ctrlc`: how long a `next()` blocked in a loader takes to raise KeyboardInterrupt after SIGINT
(a small dataset with a corrupt record and a 10 s retry backoff keeps the worker waiting; DIR is
where that dataset is written); the median and maximum latency over the rounds.

Prints one JSON line: records_per_s, bytes_per_s, seconds, cpu_seconds (user + system of the
process over the timed loop), p50/p99 batch ms where measured, objects_per_batch.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "baselines"))
from numpy_memmap import indices  # noqa: E402  (the Rust bench's index generator)

import zrecord  # noqa: E402


def cpu() -> float:
    t = os.times()
    return t.user + t.system


def touch(arr: np.ndarray) -> int:
    flat = arr.reshape(-1).view(np.uint8)
    n = flat.size - flat.size % 8
    return int(flat[:n].view(np.uint64)[::8].sum()) if n else 0


def field_arrays(b):
    out = []
    for name in b.keys():
        v = b[name]
        out.append(v.values if isinstance(v, zrecord.Ragged) else v)
    return out


def bench_take(a) -> dict:
    ds = zrecord.open(a.dir, backend=a.backend)
    idx = indices(a.seed, a.batches, a.batch, len(ds))
    # Warm-up batch, and the object count of one batch.
    field_arrays(ds.take(idx[0]))
    gc.collect()
    gc.disable()
    before = len(gc.get_objects())
    b = ds.take(idx[0])
    arrays = field_arrays(b)
    objects = len(gc.get_objects()) - before
    del b, arrays
    gc.enable()
    times = np.empty(a.batches)
    nbytes = 0
    sink = 0
    c0, t0 = cpu(), time.perf_counter()
    for k in range(a.batches):
        s = time.perf_counter()
        b = ds.take(idx[k])
        for arr in field_arrays(b):
            nbytes += arr.nbytes
            if a.consume:
                sink += touch(arr)
        times[k] = time.perf_counter() - s
    seconds = time.perf_counter() - t0
    cpu_s = cpu() - c0
    records = a.batches * a.batch
    return {
        "bench": "python take",
        "backend": ds.backend,
        "batch": a.batch,
        "batches": a.batches,
        "records": records,
        "bytes": nbytes,
        "seconds": seconds,
        "cpu_seconds": cpu_s,
        "records_per_s": records / seconds,
        "bytes_per_s": nbytes / seconds,
        "p50_batch_ms": float(np.percentile(times, 50) * 1e3),
        "p99_batch_ms": float(np.percentile(times, 99) * 1e3),
        "objects_per_batch": objects,
        "consume": a.consume,
        "sink": sink & 0xFF,
    }


def bench_loader(a) -> dict:
    ds = zrecord.open(a.dir, backend=a.backend)
    loader = zrecord.Loader(ds, batch_size=a.batch, shuffle=True, seed=a.seed, workers=a.workers, epochs=None)
    # Untimed, as `zrecord bench loader` does: every record once, in order, so the first touches
    # of the chunk mappings (page tables, not I/O) are not charged to the timed batches.
    for first in range(0, len(ds), 1 << 16):
        ds.take(np.arange(first, min(len(ds), first + (1 << 16)), dtype=np.uint64))
    it = iter(loader)
    for _ in range(4):  # warm-up: the workers start and fill their queues
        field_arrays(next(it))
    nbytes = 0
    c0, t0 = cpu(), time.perf_counter()
    for _ in range(a.batches):
        b = next(it)
        for arr in field_arrays(b):
            nbytes += arr.nbytes
    seconds = time.perf_counter() - t0
    cpu_s = cpu() - c0
    records = a.batches * a.batch
    return {
        "bench": "python loader",
        "backend": ds.backend,
        "workers": a.workers,
        "batch": a.batch,
        "batches": a.batches,
        "records": records,
        "bytes": nbytes,
        "seconds": seconds,
        "cpu_seconds": cpu_s,
        "records_per_s": records / seconds,
        "bytes_per_s": nbytes / seconds,
    }


def count_for(seconds: float) -> float:
    n = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(1000):
            n += 1
    return n / seconds


def bench_thread(a) -> dict:
    alone = count_for(a.seconds)
    ds = zrecord.open(a.dir, backend=a.backend)
    stop = threading.Event()
    batches = [0]

    def run() -> None:
        loader = zrecord.Loader(ds, batch_size=a.batch, shuffle=True, seed=a.seed, workers=a.workers, epochs=None)
        for b in loader:
            field_arrays(b)
            batches[0] += 1
            if stop.is_set():
                break

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.5)
    before = batches[0]
    beside = count_for(a.seconds)
    loader_rate = (batches[0] - before) * a.batch / a.seconds
    stop.set()
    t.join()
    return {
        "bench": "python thread beside loader",
        "loop_alone_per_s": alone,
        "loop_beside_loader_per_s": beside,
        "ratio": beside / alone,
        "loader_records_per_s": loader_rate,
        "workers": a.workers,
    }


def bench_ctrlc(a) -> dict:
    import signal
    import shutil

    path = Path(a.dir) / "ctrlc.zr"
    shutil.rmtree(path, ignore_errors=True)
    with zrecord.Writer.create(path, {"x": ("u8", [64])}) as w:
        w.append_batch({"x": np.zeros((64, 64), np.uint8)})
    chunk = sorted((path / "chunk").iterdir())[0]
    with open(chunk, "r+b") as f:
        f.seek(5)
        f.write(b"\xff")
    ds = zrecord.open(path)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    lat = []
    for _ in range(a.rounds):
        loader = zrecord.Loader(ds, batch_size=64, shuffle=False, workers=1, retries=2, retry_backoff=10.0)
        sent = [0.0]

        def fire() -> None:
            sent[0] = time.perf_counter()
            os.kill(os.getpid(), signal.SIGINT)

        t = threading.Timer(0.2, fire)
        t.start()
        try:
            next(loader)
        except KeyboardInterrupt:
            lat.append(time.perf_counter() - sent[0])
        t.join()
        del loader
    shutil.rmtree(path, ignore_errors=True)
    return {
        "bench": "ctrl-c latency",
        "rounds": a.rounds,
        "median_ms": float(np.median(lat) * 1e3),
        "max_ms": float(np.max(lat) * 1e3),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["take", "loader", "thread", "ctrlc"])
    p.add_argument("dir")
    p.add_argument("--backend", default=None)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--batches", type=int, default=2000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--consume", action="store_true")
    p.add_argument("--rounds", type=int, default=20)
    a = p.parse_args()
    if a.what == "take":
        r = bench_take(a)
    elif a.what == "loader":
        r = bench_loader(a)
    elif a.what == "ctrlc":
        r = bench_ctrlc(a)
    else:
        if a.workers == 2:
            a.workers = 1
        r = bench_thread(a)
    print(json.dumps(r))


if __name__ == "__main__":
    main()
