#!/usr/bin/env python3
"""Issue #32 §4: the vision input pipeline, zrecord against its peers, side by side.

Every system does the same work per image of the set `make_jpegs.py OUT N` writes: JPEG decode →
RandomResizedCrop(224, scale (0.08, 1), ratio (3/4, 4/3)) → random horizontal flip, into
(256, 224, 224, 3) uint8 batches (one shuffled epoch; every batch's array is touched: one byte
per image summed), with 2 workers (threads or processes, each system's own kind):

  zrecord-builtin         zrecord.Loader, transform=[T.decode(), T.random_resized_crop(224),
                          T.random_flip()] (Rust, no GIL, DCT-scaled partial decode)
  zrecord-pillow-threads  zrecord.Loader, transform=T.random_map(pil_rrc_flip) (Pillow on the
                          loader's 2 worker threads)
  zrecord-pillow-loop     zrecord.Loader without a transform (2 workers read the bytes), Pillow
                          in the training loop per record, then np.stack (what users do today)
  torch                   torch.utils.data.DataLoader(num_workers=2) over the files (a
                          map-style Dataset of paths and labels), Pillow per item, default collate
  grain                   grain.DataLoader(worker_count=2) over OUT/train.array_record (the same
                          JPEG bytes, group_size:1, uncompressed), RandomMap(Pillow), Batch(256)
  spdl                    an SPDL pipeline over the file paths: read + Pillow with concurrency 2
                          (threads), aggregate(256), stack
  litdata                 litdata.StreamingDataLoader(num_workers=2) over a StreamingDataset
                          of OUT/litdata (optimize() of the same JPEG bytes, 16 MB chunks, shuffled),
                          Pillow as the dataset's transform (a Generator per worker process)
  limit                   `zrecord bench transform OUT/train.zr --epochs 1`: decode + crop + flip
                          in a tight loop on ONE core; images/s × the machine's cores (the
                          binary: $ZRECORD_BIN, else target/release/zrecord)

pil_rrc_flip is one function for every Pillow-based system: decode with Pillow, torchvision's
RandomResizedCrop parameters drawn from a numpy Generator, im.resize((224, 224), BILINEAR,
box=crop) (Pillow's resize is antialiased, as torchvision's on PIL images), flip with p = 0.5.

Each system runs in its own subprocess (`vision.py one SYSTEM OUT`), which prints one JSON line;
the parent takes the subprocess's CPU time from getrusage(RUSAGE_CHILDREN) deltas around it
(the subprocess's own threads plus its worker processes, which it joins before exiting) and
subtracts the CPU the subprocess spent before its timed section (interpreter start and
imports: the subprocess reports it); the subprocess leaves with os._exit after joining its
workers, so the interpreter's teardown (0.6 CPU s once torch is imported) is not counted. Rounds alternate the systems (round-robin, each round
starting one system later) so a slow phase of the host hits all of them alike.

Usage:
  vision.py prepare OUT                  # OUT/train.array_record, OUT/litdata (once, untimed)
  vision.py bench OUT [--rounds 3] [--systems a,b,..] [--json-dir DIR] [--limit N]
  vision.py one SYSTEM OUT [--limit N]   # one run, one JSON line (what bench calls)
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

SYSTEMS = [
    "zrecord-builtin",
    "zrecord-pillow-threads",
    "zrecord-pillow-loop",
    "torch",
    "grain",
    "spdl",
    "litdata",
    "limit",
]
BATCH = 256
WORKERS = 2
SIZE = 224
SEED = 0
ROOT = Path(__file__).resolve().parent.parent.parent


class Skip(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# The per-image work shared by every Pillow-based system.


def rrc_params(w: int, h: int, rng: np.random.Generator, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision.transforms.RandomResizedCrop.get_params, with a numpy Generator: (left, top,
    width, height)."""
    area = w * h
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
        cw = int(round(math.sqrt(target_area * aspect)))
        ch = int(round(math.sqrt(target_area / aspect)))
        if 0 < cw <= w and 0 < ch <= h:
            top = int(rng.integers(0, h - ch + 1))
            left = int(rng.integers(0, w - cw + 1))
            return left, top, cw, ch
    in_ratio = w / h
    if in_ratio < min(ratio):
        cw, ch = w, int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        ch, cw = h, int(round(h * max(ratio)))
    else:
        cw, ch = w, h
    return (w - cw) // 2, (h - ch) // 2, cw, ch


def pil_rrc_flip(x, rng: np.random.Generator) -> np.ndarray:
    """JPEG bytes (any bytes-like object) → (224, 224, 3) uint8."""
    from PIL import Image

    im = Image.open(io.BytesIO(x))
    if im.mode != "RGB":
        im = im.convert("RGB")
    left, top, cw, ch = rrc_params(im.width, im.height, rng)
    im = im.resize((SIZE, SIZE), Image.BILINEAR, box=(left, top, left + cw, top + ch))
    if rng.random() < 0.5:
        im = im.transpose(Image.FLIP_LEFT_RIGHT)
    return np.asarray(im)


def files(out: Path) -> tuple[list[str], np.ndarray]:
    """The JPEG files in make_jpegs.py's order (record i is files/class{i%10}/{i:06d}.jpg)."""
    n = int((out / "done").read_text())
    paths = [str(out / "files" / f"class{i % 10}" / f"{i:06d}.jpg") for i in range(n)]
    return paths, np.arange(n, dtype=np.int64) % 10


def rng_for(i: int) -> np.random.Generator:
    return np.random.default_rng([SEED, int(i)])


# ---------------------------------------------------------------------------------------------
# One system, one epoch. Each returns (images, batches, first_batch_seconds, checksum) and runs
# from building its loader (workers start inside the timed section) to its last batch, with the
# workers shut down.


def check(images, labels, n_expected: int | None = None) -> int:
    images = np.asarray(images)
    assert images.dtype == np.uint8 and images.shape[1:] == (SIZE, SIZE, 3), images.shape
    assert len(labels) == len(images)
    return int(images[:, SIZE // 2, SIZE // 2, 0].sum())  # one byte per image


def epoch_zrecord(out: Path, mode: str, limit: int | None):
    import zrecord
    from zrecord import transform as T

    ds = zrecord.open(str(out / "train.zr"))
    if mode == "builtin":
        transform = {"image": [T.decode(), T.random_resized_crop(SIZE), T.random_flip()]}
    elif mode == "threads":
        transform = {"image": T.random_map(pil_rrc_flip)}
    else:
        transform = None
    loader = zrecord.Loader(
        ds, batch_size=BATCH, shuffle=True, seed=SEED, workers=WORKERS,
        transform=transform, fields=["image", "label"],
    )
    rng = np.random.default_rng(SEED)
    n = nb = s = 0
    t0 = time.perf_counter()
    first = None
    for batch in loader:
        labels = batch.array("label")
        if mode == "loop":
            raw = batch.ragged("image")
            images = np.stack([pil_rrc_flip(raw[j], rng) for j in range(len(raw))])
        else:
            images = batch.array("image")
        s += check(images, labels)
        n += len(labels)
        nb += 1
        if first is None:
            first = time.perf_counter() - t0
        if limit and n >= limit:
            break
    del loader
    return n, nb, first, s


def epoch_torch(out: Path, limit: int | None):
    try:
        import torch
        import torch.utils.data
    except ImportError as e:
        raise Skip(f"torch not importable ({e})")
    paths, labels = files(out)

    class Files(torch.utils.data.Dataset):
        def __len__(self):
            return len(paths)

        def __getitem__(self, i):
            with open(paths[i], "rb") as f:
                data = f.read()
            return pil_rrc_flip(data, rng_for(i)), int(labels[i])

    g = torch.Generator().manual_seed(SEED)
    loader = torch.utils.data.DataLoader(
        Files(), batch_size=BATCH, shuffle=True, num_workers=WORKERS, generator=g
    )
    n = nb = s = 0
    t0 = time.perf_counter()
    first = None
    it = iter(loader)
    for images, lab in it:
        s += check(images.numpy(), lab)
        n += len(lab)
        nb += 1
        if first is None:
            first = time.perf_counter() - t0
        if limit and n >= limit:
            break
    it._shutdown_workers()  # joins the workers (so RUSAGE_CHILDREN sees them)
    del it, loader
    return n, nb, first, s


def epoch_grain(out: Path, limit: int | None):
    try:
        import grain
    except ImportError as e:
        raise Skip(f"grain not importable ({e})")
    path = out / "train.array_record"
    if not path.exists():
        raise Skip(f"{path} missing (run `vision.py prepare {out}`)")

    class RrcFlip(grain.transforms.RandomMap):
        def random_map(self, element, rng):
            label = int.from_bytes(element[:8], "little")
            return {"image": pil_rrc_flip(memoryview(element)[8:], rng), "label": np.int64(label)}

    src = grain.sources.ArrayRecordDataSource(str(path))
    n_all = len(src)
    sampler = grain.samplers.IndexSampler(num_records=n_all, shuffle=True, seed=SEED, num_epochs=1)
    loader = grain.DataLoader(
        data_source=src,
        sampler=sampler,
        operations=[RrcFlip(), grain.transforms.Batch(batch_size=BATCH, drop_remainder=False)],
        worker_count=WORKERS,
    )
    n = nb = s = 0
    t0 = time.perf_counter()
    first = None
    it = iter(loader)
    for batch in it:
        s += check(batch["image"], batch["label"])
        n += len(batch["label"])
        nb += 1
        if first is None:
            first = time.perf_counter() - t0
        if limit and n >= limit:
            break
    # Grain's iterator stops its worker processes when it is collected.
    del it, loader
    import gc

    gc.collect()
    return n, nb, first, s


def epoch_spdl(out: Path, limit: int | None):
    try:
        from spdl.pipeline import PipelineBuilder
    except ImportError as e:
        raise Skip(f"spdl not importable ({e})")
    paths, labels = files(out)
    order = np.random.default_rng(SEED).permutation(len(paths))

    def load(i):
        with open(paths[i], "rb") as f:
            data = f.read()
        return pil_rrc_flip(data, rng_for(i)), int(labels[i])

    def collate(items):
        return np.stack([x for x, _ in items]), np.array([y for _, y in items], dtype=np.int64)

    pipeline = (
        PipelineBuilder()
        .add_source(order.tolist())
        .pipe(load, concurrency=WORKERS)
        .aggregate(BATCH)
        .pipe(collate)
        .add_sink(2)
        .build(num_threads=WORKERS)
    )
    n = nb = s = 0
    t0 = time.perf_counter()
    first = None
    with pipeline.auto_stop():
        for images, lab in pipeline:
            s += check(images, lab)
            n += len(lab)
            nb += 1
            if first is None:
                first = time.perf_counter() - t0
            if limit and n >= limit:
                break
    return n, nb, first, s


class _LitTransform:
    """litdata's per-item transform: {"image": JPEG bytes, "label"} → (image, label)."""

    def __init__(self):
        self.rng = None

    def __call__(self, item):
        if self.rng is None:  # one Generator per worker process
            self.rng = np.random.default_rng([SEED, os.getpid()])
        return pil_rrc_flip(item["image"], self.rng), item["label"]


def _lit_item(path_label):
    path, label = path_label
    return {"image": Path(path).read_bytes(), "label": int(label)}


def epoch_litdata(out: Path, limit: int | None):
    try:
        import litdata
    except ImportError as e:
        raise Skip(f"litdata not importable ({e})")
    path = out / "litdata"
    if not (path / "index.json").exists():
        raise Skip(f"{path} missing (run `vision.py prepare {out}`)")
    ds = litdata.StreamingDataset(str(path), shuffle=True, seed=SEED, transform=_LitTransform())
    loader = litdata.StreamingDataLoader(ds, batch_size=BATCH, num_workers=WORKERS)
    n = nb = s = 0
    t0 = time.perf_counter()
    first = None
    it = iter(loader)
    for images, lab in it:
        s += check(images.numpy(), lab)
        n += len(lab)
        nb += 1
        if first is None:
            first = time.perf_counter() - t0
        if limit and n >= limit:
            break
    if hasattr(it, "_shutdown_workers"):
        it._shutdown_workers()
    del it, loader
    return n, nb, first, s


def cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime + c.ru_utime + c.ru_stime


def one(system: str, out: Path, limit: int | None) -> dict:
    """Runs in the subprocess: one epoch of `system`; the JSON has startup_cpu_seconds (CPU
    before the timed section) for the parent to subtract."""
    # Imports first (outside the timed section): each system's own libraries.
    try:
        if system.startswith("zrecord"):
            import zrecord.transform  # noqa: F401
        if system != "zrecord-builtin":
            import PIL.Image  # noqa: F401
        if system == "torch":
            import torch.utils.data  # noqa: F401
        elif system == "grain":
            import grain  # noqa: F401
        elif system == "spdl":
            import spdl.pipeline  # noqa: F401
        elif system == "litdata":
            import litdata  # noqa: F401
    except ImportError as e:
        return {"system": system, "skipped": f"{type(e).__name__}: {e}"}
    startup_cpu = cpu_self()
    t0 = time.perf_counter()
    try:
        if system == "zrecord-builtin":
            n, nb, first, s = epoch_zrecord(out, "builtin", limit)
        elif system == "zrecord-pillow-threads":
            n, nb, first, s = epoch_zrecord(out, "threads", limit)
        elif system == "zrecord-pillow-loop":
            n, nb, first, s = epoch_zrecord(out, "loop", limit)
        elif system == "torch":
            n, nb, first, s = epoch_torch(out, limit)
        elif system == "grain":
            n, nb, first, s = epoch_grain(out, limit)
        elif system == "spdl":
            n, nb, first, s = epoch_spdl(out, limit)
        elif system == "litdata":
            n, nb, first, s = epoch_litdata(out, limit)
        else:
            raise ValueError(system)
    except Skip as e:
        return {"system": system, "skipped": str(e)}
    seconds = time.perf_counter() - t0
    # Reap every worker process still around (their CPU lands in RUSAGE_CHILDREN only then).
    import multiprocessing

    left = multiprocessing.active_children()
    for proc in left:
        proc.join(timeout=30)
    return {
        "system": system,
        "images": n,
        "batches": nb,
        "seconds": seconds,
        "first_batch_seconds": first,
        "images_per_s": n / seconds,
        "startup_cpu_seconds": startup_cpu,
        "self_cpu_seconds_in_epoch": cpu_self() - startup_cpu,
        "checksum": s,
        "workers_left_at_end": len(left),
    }


# ---------------------------------------------------------------------------------------------
# The parent.


def children_cpu() -> tuple[float, float]:
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return c.ru_utime, c.ru_stime


def run_limit(out: Path, limit: int | None) -> dict:
    exe = Path(os.environ.get("ZRECORD_BIN") or ROOT / "target" / "release" / "zrecord")
    if not exe.exists():
        return {"system": "limit", "skipped": f"{exe} missing (cargo build --release)"}
    cmd = [str(exe), "bench", "transform", str(out / "train.zr"), "--epochs", "1"]
    if limit:
        cmd += ["--records", str(limit)]
    u0, s0 = children_cpu()
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    u1, s1 = children_cpu()
    if p.returncode != 0:
        return {"system": "limit", "skipped": f"exit {p.returncode}: {p.stderr.strip()[-300:]}"}
    r = json.loads(p.stdout.strip().splitlines()[-1])
    cores = os.cpu_count() or 1
    one_core = r["images_per_s"]
    images = r.get("images") or r.get("records") or 0
    return {
        "system": "limit",
        "images": images,
        "images_per_s": one_core * cores,
        "one_core_images_per_s": one_core,
        "cores": cores,
        # The bench's own CPU time per image (on a busy host its wall-clock rate is lower).
        "cpu_s_per_1000": r["cpu_us_per_image"] / 1000,
        "images_per_s_from_cpu": cores * 1e6 / r["cpu_us_per_image"],
        "process_cpu_seconds": (u1 - u0) + (s1 - s0),
        "process_wall_seconds": wall,
        "bench_json": r,
        "command": " ".join(cmd),
    }


def run_one(system: str, out: Path, limit: int | None) -> dict:
    if system == "limit":
        return run_limit(out, limit)
    cmd = [sys.executable, str(Path(__file__).resolve()), "one", system, str(out)]
    if limit:
        cmd += ["--limit", str(limit)]
    u0, s0 = children_cpu()
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    u1, s1 = children_cpu()
    if p.returncode != 0:
        return {"system": system, "skipped": f"exit {p.returncode}: {p.stderr.strip()[-500:]}"}
    r = json.loads(p.stdout.strip().splitlines()[-1])
    if "skipped" in r:
        return r
    total = (u1 - u0) + (s1 - s0)
    r["process_cpu_seconds"] = total
    r["process_user_seconds"] = u1 - u0
    r["process_sys_seconds"] = s1 - s0
    r["process_wall_seconds"] = wall
    r["epoch_cpu_seconds"] = total - r["startup_cpu_seconds"]
    r["cpu_s_per_1000"] = 1000 * r["epoch_cpu_seconds"] / r["images"]
    return r


def loadavg() -> list[float]:
    try:
        return list(os.getloadavg())
    except OSError:
        return []


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for name in ["zrecord", "numpy", "pillow", "torch", "grain", "array-record", "spdl"]:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            pass
    return out


def warm(out: Path) -> float:
    """Reads every input once (untimed), so every system starts from a warm page cache."""
    t0 = time.perf_counter()
    paths, _ = files(out)
    for p in paths:
        with open(p, "rb") as f:
            f.read()
    for big in [out / "train.array_record", *sorted((out / "train.zr").rglob("*"))]:
        if big.is_file():
            with open(big, "rb") as f:
                while f.read(1 << 24):
                    pass
    return time.perf_counter() - t0


def bench(out: Path, systems: list[str], rounds: int, json_dir: Path | None, limit: int | None):
    print(f"# warming the page cache: {warm(out):.1f} s", file=sys.stderr)
    results: dict[str, list[dict]] = {s: [] for s in systems}
    skipped: dict[str, str] = {}
    meta = {
        "dataset": str(out),
        "images_in_set": int((out / "done").read_text()),
        "limit": limit,
        "batch": BATCH,
        "workers": WORKERS,
        "cores": os.cpu_count(),
        "versions": versions(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "loadavg_before": loadavg(),
    }
    print(f"# {meta}", file=sys.stderr)
    for rnd in range(rounds):
        order = systems[rnd % len(systems):] + systems[: rnd % len(systems)]
        round_rows = []
        for system in order:
            if system in skipped:
                continue
            la = loadavg()
            r = run_one(system, out, limit)
            r["round"] = rnd
            r["loadavg_before"] = la
            round_rows.append(r)
            if "skipped" in r:
                skipped[system] = r["skipped"]
                print(f"{system}: skipped: {r['skipped']}", file=sys.stderr)
                continue
            results[system].append(r)
            print(
                f"round {rnd} {system:24s} {r['images_per_s']:8.1f} images/s "
                f"{r['cpu_s_per_1000']:6.2f} CPU s/1000 (load {la[0] if la else '?'})",
                file=sys.stderr,
            )
        if json_dir:
            json_dir.mkdir(parents=True, exist_ok=True)
            (json_dir / f"round-{rnd}.json").write_text(
                json.dumps({"meta": meta, "round": rnd, "order": order, "runs": round_rows}, indent=1)
            )
    meta["loadavg_after"] = loadavg()
    meta["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    table = summary(results, skipped)
    if json_dir:
        (json_dir / "summary.json").write_text(
            json.dumps({"meta": meta, "table": table, "skipped": skipped}, indent=1)
        )
        (json_dir / "table.md").write_text(markdown(table, skipped, meta))
    print(markdown(table, skipped, meta))


def summary(results: dict[str, list[dict]], skipped: dict[str, str]) -> list[dict]:
    rows = []
    for system, runs in results.items():
        if not runs:
            continue
        ips = [r["images_per_s"] for r in runs]
        cpu = [r["cpu_s_per_1000"] for r in runs]
        rows.append({
            "system": system,
            "rounds": len(runs),
            "images_per_s_median": statistics.median(ips),
            "images_per_s_min": min(ips),
            "images_per_s_max": max(ips),
            "cpu_s_per_1000_median": statistics.median(cpu),
            "first_batch_s_median": statistics.median(
                [r["first_batch_seconds"] for r in runs if r.get("first_batch_seconds") is not None] or [0]
            ),
        })
    torch_ips = next((r["images_per_s_median"] for r in rows if r["system"] == "torch"), None)
    for r in rows:
        r["ratio_to_torch"] = r["images_per_s_median"] / torch_ips if torch_ips else None
    return rows


def markdown(rows: list[dict], skipped: dict[str, str], meta: dict) -> str:
    lines = [
        "| system | images/s (median) | min–max | CPU s per 1,000 images | × torch |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        ratio = f"{r['ratio_to_torch']:.2f}" if r["ratio_to_torch"] else "–"
        lines.append(
            f"| {r['system']} | {r['images_per_s_median']:.0f} | "
            f"{r['images_per_s_min']:.0f}–{r['images_per_s_max']:.0f} | "
            f"{r['cpu_s_per_1000_median']:.2f} | {ratio} |"
        )
    for s, why in skipped.items():
        lines.append(f"| {s} | skipped: {why[:120]} | | | |")
    lines.append("")
    lines.append(
        f"{meta['images_in_set']} images{' (first ' + str(meta['limit']) + ')' if meta['limit'] else ''}, "
        f"batch {BATCH}, {WORKERS} workers, {meta['cores']} cores; "
        f"load average {meta['loadavg_before']} before, {meta.get('loadavg_after')} after"
    )
    return "\n".join(lines) + "\n"


def prepare(out: Path) -> None:
    """OUT/train.array_record (record i = label, 8 bytes little-endian, + JPEG i's bytes) and,
    if litdata is installed, OUT/litdata (its optimize(): {"image": bytes, "label": int})."""
    path = out / "train.array_record"
    paths, labels = files(out)
    if path.exists():
        print(f"{path} already there")
    else:
        write_array_record(path, paths, labels)
    try:
        import litdata
    except ImportError:
        print("litdata not installed: no OUT/litdata")
        return
    lpath = out / "litdata"
    if (lpath / "index.json").exists():
        print(f"{lpath} already there")
        return
    litdata.optimize(
        fn=_lit_item, inputs=list(zip(paths, labels.tolist())), output_dir=str(lpath),
        chunk_bytes="16MB", num_workers=2, verbose=False,
    )
    print(f"{lpath}: {len(paths)} items")


def write_array_record(path: Path, paths: list[str], labels: np.ndarray) -> None:
    from array_record.python.array_record_module import ArrayRecordWriter

    tmp = str(path) + ".tmp"
    # group_size:1 (one record per chunk: random access) and uncompressed (JPEGs do not compress).
    w = ArrayRecordWriter(tmp, "group_size:1,uncompressed")
    for p, label in zip(paths, labels):
        w.write(int(label).to_bytes(8, "little") + Path(p).read_bytes())
    w.close()
    os.replace(tmp, path)
    print(f"{path}: {len(paths)} records")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["prepare", "bench", "one"])
    p.add_argument("args", nargs="+")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--json-dir", type=Path)
    p.add_argument("--limit", type=int, default=0, help="stop after this many images (0: the epoch)")
    a = p.parse_args()
    if a.what == "prepare":
        prepare(Path(a.args[0]))
    elif a.what == "one":
        system, out = a.args[0], Path(a.args[1])
        print(json.dumps(one(system, out, a.limit or None)), flush=True)
        sys.stderr.flush()
        # Skips the interpreter's teardown (0.6 CPU s with torch imported), which is no part of
        # an epoch; the workers are joined already.
        os._exit(0)
    else:
        systems = [s for s in a.systems.split(",") if s]
        for s in systems:
            if s not in SYSTEMS:
                p.error(f"unknown system {s} (known: {', '.join(SYSTEMS)})")
        bench(Path(a.args[0]), systems, a.rounds, a.json_dir, a.limit or None)


if __name__ == "__main__":
    main()
