#!/usr/bin/env python3
"""The numpy baseline of `zrecord bench gather`: memmap fancy indexing over the same records and
the same indices.

Usage: numpy_memmap.py DIR [--flat PATH] [--batch 256] [--batches 2000] [--seed 1]
                       [--form memmap|npload] [--zrecord BIN] [--json]

DIR is a dataset made by `zrecord bench make` (one raw field, every record the same length).
What a numpy user would have is one flat array: record i is row i of an (n, record_bytes) uint8
file. The first run builds that file at --flat (default: DIR.flat, beside DIR) from DIR's offset
table and chunk files, untimed, with a sidecar PATH.json naming the dataset commit it was built
from; later runs reuse it while the dataset's meta.json is unchanged. With --zrecord BIN, a few
rows are compared with `BIN cat DIR --index I --format raw` (zrecord's checksummed read), so the
flat file holds the same bytes.

The indices are those of `zrecord bench gather DIR --seed S` on its one thread (`--threads 1`):
the same xorshift64 generator with the same seeding, index = next() % n (src/bin/zrecord/bench.rs,
`gather_on` and `bench_thread`). They are drawn before timing starts.

Timed, per batch: `arr[idx]` on a `numpy.memmap` of the flat file, the way numpy users gather a
batch: one fancy-indexing call copying the batch's rows into a new (batch, record_bytes) array.
Nothing is checked (numpy has no checksums).

With --form npload, the array is `np.load(PATH.npy, mmap_mode='r')` of a `.npy` written by
`np.save` (built once beside the flat file, untimed), and each batch's copy is then read once
more, one 8-byte word per 64-byte cache line (what a consumer of the batch would touch; zrecord's
`bench gather --consume` reads every byte of its batches). Before timing, the flat file's pages are dropped and
the file read through, so it is warm in the page cache in the state `rewarm` in
`benches/run-all.sh` leaves the dataset in. One thread: run it under `taskset -c 0` beside
`taskset -c 0 zrecord bench gather`.

Prints one JSON line shaped like `zrecord bench gather --json` (records_per_s, bytes_per_s,
p50_batch_ms, p99_batch_ms, backend, batch, batches, threads, records, bytes, seconds,
cpu_seconds: the process's user + system time over the timed loop, verify).
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

MASK = (1 << 64) - 1


def indices(seed, batches, batch, n):
    """`bench gather`'s indices on thread 0: xorshift64 (13, 7, 17) seeded with
    (seed * 0x9E3779B97F4A7C15) ^ 1, forced odd; each index is next() % n."""
    x = (((seed * 0x9E37_79B9_7F4A_7C15) & MASK) ^ 1) | 1
    out = np.empty(batches * batch, dtype=np.int64)
    for k in range(batches * batch):
        x ^= (x << 13) & MASK
        x ^= x >> 7
        x ^= (x << 17) & MASK
        out[k] = x % n
    return out.reshape(batches, batch)


def read_meta(ds):
    body = json.loads((ds / "meta.json").read_text())
    meta = body["meta"]
    if meta.get("format") != "zrecord" or meta.get("version") != 1:
        sys.exit(f"{ds}/meta.json: not a zrecord version 1 dataset")
    if len(meta["fields"]) != 1 or meta["fields"][0]["codec"] != "raw":
        sys.exit(f"{ds}: the baseline reads a dataset of one raw field (zrecord bench make --codec raw)")
    return meta, body["crc32c"]


def entries(path, count):
    """The first `count` 24-byte offset entries of `path`."""
    e = np.fromfile(path, dtype=np.uint8, count=24 * count).reshape(-1, 24)
    if len(e) != count:
        sys.exit(f"{path}: {len(e)} entries, the meta says {count}")
    return decode(e)


def decode(e):
    """(chunk, offset, phys_len, codec) of 24-byte entries (docs/FORMAT.md, "Offset table")."""
    count = len(e)
    chunk = e[:, 0:2].copy().view("<u2")[:, 0].astype(np.int64)
    wide = np.zeros((count, 8), dtype=np.uint8)
    wide[:, 0:5] = e[:, 2:7]
    offset = wide.view("<u8")[:, 0].astype(np.int64)
    wide[:] = 0
    wide[:, 0:3] = e[:, 7:10]
    phys = wide.view("<u8")[:, 0].astype(np.int64)
    return chunk, offset, phys, e[:, 10].copy()


def build_flat(ds, meta, flat):
    """Writes record i's stored bytes as row i of `flat`; returns the record length."""
    field = meta["fields"][0]
    table = field["table"]
    stem = ds / f"{field['name']}.{table['generation']}"
    n = meta["len"]
    chunk, offset, phys, codec = entries(stem.with_name(stem.name + ".offsets"), table["table_len"])
    if table["patch_len"]:
        # Patches apply in order, the last for an index wins (docs/FORMAT.md, "Patch log").
        raw = np.fromfile(stem.with_name(stem.name + ".patches"), dtype=np.uint8,
                          count=32 * table["patch_len"]).reshape(-1, 32)
        keys = raw[:, 0:8].copy().view("<u8")[:, 0]
        pc, po, pp, pk = decode(raw[:, 8:32])
        for j, key in enumerate(keys):
            chunk[key], offset[key], phys[key], codec[key] = pc[j], po[j], pp[j], pk[j]
    chunk, offset, phys, codec = chunk[:n], offset[:n], phys[:n], codec[:n]
    lengths = np.unique(phys)
    if len(lengths) != 1 or lengths[0] == 0 or np.any(codec != 0):
        sys.exit(f"{ds}: the baseline needs every record raw and of one non-zero length "
                 f"(found lengths {lengths[:5].tolist()}, codecs {np.unique(codec).tolist()})")
    width = int(lengths[0])
    sizes = {c["id"]: c["size"] for c in meta["chunks"]}
    tmp = flat.with_name(flat.name + ".tmp")
    out = np.memmap(tmp, dtype=np.uint8, mode="w+", shape=(n, width))
    for cid in np.unique(chunk):
        size = sizes.get(int(cid))
        sel = np.nonzero(chunk == cid)[0]
        if size is None or int(offset[sel].max()) + width > size:
            sys.exit(f"{ds}: chunk {cid} is not in the meta, or an entry runs past its size")
        src = np.memmap(ds / "chunk" / f"{int(cid):05}.zr", dtype=np.uint8, mode="r", shape=(size,))
        if np.all(offset[sel] % width == 0) and size % width == 0:
            out[sel] = src.reshape(-1, width)[offset[sel] // width]
        else:
            for i in sel:
                out[i] = src[offset[i]:offset[i] + width]
        del src
    out.flush()
    del out
    os.replace(tmp, flat)
    return width


def spot_check(zrecord, ds, arr, idx):
    for i in idx:
        got = subprocess.run([zrecord, "cat", str(ds), "--index", str(int(i)), "--format", "raw"],
                             check=True, capture_output=True).stdout
        if got != arr[int(i)].tobytes():
            sys.exit(f"{ds}: record {i} differs between the flat file and `zrecord cat`")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir", type=Path)
    p.add_argument("--flat", type=Path)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--batches", type=int, default=2000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--form", choices=["memmap", "npload"], default="memmap",
                   help="memmap: arr[idx] on a numpy.memmap of the flat copy; npload: "
                        "np.load(mmap_mode='r') of a .npy copy, and every cache line of each "
                        "batch's copy read")
    p.add_argument("--zrecord", help="a zrecord binary: compare a few rows with `zrecord cat`")
    p.add_argument("--json", action="store_true", help="accepted for the bench scripts; the output is JSON anyway")
    a = p.parse_args()
    ds = a.dir
    flat = a.flat or ds.with_name(ds.name + ".flat")
    meta, crc = read_meta(ds)
    n = meta["len"]
    stamp = {"dataset": str(ds.resolve()), "meta_crc32c": crc, "len": n}
    side = flat.with_name(flat.name + ".json")
    if not (flat.exists() and side.exists() and json.loads(side.read_text()).get("dataset_meta") == stamp):
        t = time.perf_counter()
        width = build_flat(ds, meta, flat)
        side.write_text(json.dumps({"dataset_meta": stamp, "record_bytes": width}) + "\n")
        print(f"built {flat} ({n} x {width} bytes) in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    width = json.loads(side.read_text())["record_bytes"]
    arr = np.memmap(flat, dtype=np.uint8, mode="r", shape=(n, width))
    if a.form == "npload":
        npy = flat.with_name(flat.name + ".npy")
        if not npy.exists() or npy.stat().st_mtime < flat.stat().st_mtime:
            tmp = npy.with_name(npy.name + ".tmp.npy")
            np.save(tmp, arr)
            os.replace(tmp, npy)
        arr = np.load(npy, mmap_mode="r")
        if arr.shape != (n, width) or width % 8:
            sys.exit(f"{npy}: shape {arr.shape}, expected ({n}, {width}) with 8-byte rows")
        flat = npy

    idx = indices(a.seed, a.batches, a.batch, n)
    if a.zrecord:
        spot_check(a.zrecord, ds, arr, [0, n - 1, idx[0, 0], idx[-1, -1]])
    # Warm, from a known state: the flat file's pages dropped, then read through (as
    # benches/run-all.sh's `rewarm` does to the dataset). How the page cache got a file's pages
    # decides how many pages one fault maps: pages left from writing the file, or partly
    # reclaimed since, cost several times more faults than pages read through at once.
    with open(flat, "rb") as f:
        os.fsync(f.fileno())  # dirty pages (a copy just built) are not dropped
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        while f.read(1 << 24):
            pass

    lat = np.empty(a.batches)
    sink = 0
    cpu = time.process_time()
    start = time.perf_counter()
    touch = a.form == "npload"
    for b in range(a.batches):
        t0 = time.perf_counter()
        out = arr[idx[b]]
        if touch:
            sink ^= int(out.view(np.uint64)[:, ::8].sum())
        lat[b] = time.perf_counter() - t0
        sink ^= int(out[0, 0])
    secs = time.perf_counter() - start
    cpu = time.process_time() - cpu
    records = a.batches * a.batch
    lat.sort()

    def pct(q):
        return float(lat[int(round((len(lat) - 1) * q))] * 1e3) if len(lat) else 0.0

    print(json.dumps({
        "name": "numpy-memmap" if a.form == "memmap" else "numpy-npload-touch",
        "records_per_s": records / secs,
        "bytes_per_s": records * width / secs,
        "p50_batch_ms": pct(0.5),
        "p99_batch_ms": pct(0.99),
        "backend": "numpy-memmap" if a.form == "memmap" else "numpy-npload-touch",
        "batch": a.batch,
        "batches": a.batches,
        "threads": 1,
        "records": records,
        "bytes": records * width,
        "seconds": secs,
        "cpu_seconds": cpu,
        "verify": False,
        "seed": a.seed,
        "flat": str(flat),
        "numpy": np.__version__,
        "python": platform.python_version(),
        "sink": sink & 1,
    }))


if __name__ == "__main__":
    main()
