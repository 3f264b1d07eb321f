#!/usr/bin/env python3
"""Peers of zrecord from Python on the same records and indices: Lance `take` (pylance), Grain
over ArrayRecord (`ArrayRecordDataSource.__getitems__`, and `grain.DataLoader` with shuffle and
2 workers), and numpy memmap fancy indexing.

Usage:
  peers.py build DIR            # DIR.lance and DIR.arrayrecord from DIR.flat (untimed, once)
  peers.py lance DIR  [--batch 256] [--batches 200] [--seed 1]
  peers.py grain DIR  [--batch 256] [--batches 200] [--seed 1]
  peers.py arrayrecord DIR [--batch 256] [--batches 200] [--seed 1]   # the bare reader
  peers.py grain-loader DIR [--batch 256] [--batches 200] [--workers 2] [--seed 1]
  peers.py torch-loader DIR [--batch 256] [--batches 200] [--workers 2] [--seed 1]
           # torch.utils.data.DataLoader over a numpy memmap of DIR.flat: a random BatchSampler,
           # each batch one fancy-indexing copy turned into a tensor, in 2 worker processes

DIR is a dataset made by `zrecord bench make` (one raw field, records of one length), whose
flat copy DIR.flat benches/baselines/numpy_memmap.py builds. The indices are the Rust bench's
(numpy_memmap.indices). Each run prints one JSON line: records_per_s, seconds, cpu_seconds.
Lance returns an Arrow column per batch (converted to one NumPy array, as a trainer needs);
Grain returns one `bytes` per record (what its data sources give), joined into one array.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "baselines"))
from numpy_memmap import indices  # noqa: E402


def cpu() -> float:
    t = os.times()
    return t.user + t.system


def flat(dir_: str) -> tuple[np.memmap, int]:
    meta = json.load(open(Path(dir_ + ".flat.json")))
    n = meta["dataset_meta"]["len"]
    rb = meta["record_bytes"]
    arr = np.memmap(dir_ + ".flat", dtype=np.uint8, mode="r").reshape(n, rb)
    return arr, n


def build(dir_: str) -> None:
    import pyarrow as pa
    import lance
    from array_record.python.array_record_module import ArrayRecordWriter

    arr, n = flat(dir_)
    rb = arr.shape[1]
    lpath = dir_ + ".lance"
    if not Path(lpath).exists():
        def batches():
            for s in range(0, n, 65536):
                rows = np.ascontiguousarray(arr[s : s + 65536])
                col = pa.FixedSizeBinaryArray.from_buffers(pa.binary(rb), len(rows), [None, pa.py_buffer(rows)])
                yield pa.record_batch([col], names=["x"])
        schema = pa.schema([("x", pa.binary(rb))])
        lance.write_dataset(pa.RecordBatchReader.from_batches(schema, batches()), lpath)
    apath = dir_ + ".arrayrecord"
    if not Path(apath).exists():
        # group_size:1 (one record per chunk, for random access) and no compression: the kindest
        # configuration for random reads (the default compresses with brotli, ~20x slower here).
        w = ArrayRecordWriter(apath, "group_size:1,uncompressed")
        for i in range(n):
            w.write(arr[i].tobytes())
        w.close()


def source(grain, dir_: str):
    # max_parallelism:0 reads each batch's records on the calling thread: 3.5x faster here
    # than the reader's default thread pool (22k against 6k records/s for 256-record reads).
    return grain.sources.ArrayRecordDataSource(dir_ + ".arrayrecord", reader_options={"max_parallelism": "0"})


def timed(name: str, n_batches: int, batch: int, step) -> dict:
    step(0)
    c0, t0 = cpu(), time.perf_counter()
    for k in range(n_batches):
        step(k)
    seconds = time.perf_counter() - t0
    return {
        "bench": name,
        "batch": batch,
        "batches": n_batches,
        "records": n_batches * batch,
        "seconds": seconds,
        "cpu_seconds": cpu() - c0,
        "records_per_s": n_batches * batch / seconds,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["build", "lance", "grain", "arrayrecord", "grain-loader", "torch-loader"])
    p.add_argument("dir")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    if a.what == "build":
        build(a.dir)
        return
    _, n = flat(a.dir)
    idx = indices(a.seed, a.batches, a.batch, n)
    if a.what == "lance":
        import lance

        ds = lance.dataset(a.dir + ".lance")

        def step(k):
            t = ds.take(idx[k].tolist(), columns=["x"])
            col = t.column("x").combine_chunks()
            np.frombuffer(col.buffers()[1], dtype=np.uint8)

        r = timed("lance take", a.batches, a.batch, step)
    elif a.what == "arrayrecord":
        from array_record.python.array_record_module import ArrayRecordReader

        reader = ArrayRecordReader(a.dir + ".arrayrecord", "readahead_buffer_size:0,max_parallelism:0")

        def step(k):
            recs = reader.read(idx[k].tolist())
            np.frombuffer(b"".join(recs), dtype=np.uint8)

        r = timed("ArrayRecordReader.read", a.batches, a.batch, step)
    elif a.what == "grain":
        import grain

        src = source(grain, a.dir)

        def step(k):
            recs = src.__getitems__(idx[k].tolist())
            np.frombuffer(b"".join(recs), dtype=np.uint8)

        r = timed("grain ArrayRecord __getitems__", a.batches, a.batch, step)
    elif a.what == "torch-loader":
        import torch

        path = a.dir + ".flat"

        class Flat(torch.utils.data.Dataset):
            def __init__(self):
                self.arr = None

            def __len__(self):
                return n

            def __getitem__(self, batch_indices):
                if self.arr is None:  # opened in the worker process
                    self.arr, _ = flat(a.dir)
                return torch.from_numpy(self.arr[np.asarray(batch_indices)])

        g = torch.Generator().manual_seed(a.seed)
        sampler = torch.utils.data.BatchSampler(
            torch.utils.data.RandomSampler(range(n), generator=g), a.batch, drop_last=True
        )
        loader = torch.utils.data.DataLoader(Flat(), sampler=sampler, batch_size=None, num_workers=a.workers)
        it = iter(loader)
        for _ in range(4):
            next(it)

        def step(k):
            next(it)

        r = timed(f"torch DataLoader over numpy memmap, {a.workers} workers", a.batches, a.batch, step)
    else:
        import grain

        src = source(grain, a.dir)
        sampler = grain.samplers.IndexSampler(num_records=n, shuffle=True, seed=a.seed, num_epochs=1)
        loader = grain.DataLoader(
            data_source=src,
            sampler=sampler,
            operations=[grain.transforms.Batch(batch_size=a.batch, drop_remainder=True)],
            worker_count=a.workers,
        )
        it = iter(loader)
        for _ in range(4):
            next(it)

        def step(k):
            next(it)

        r = timed(f"grain.DataLoader {a.workers} workers", a.batches, a.batch, step)
    print(json.dumps(r))


if __name__ == "__main__":
    main()
