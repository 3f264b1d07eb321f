#!/usr/bin/env python3
"""Turns a benches/run-all.sh output directory into the figure tables of docs/BENCHMARKS.md.

Usage: benches/report.py OUT_DIR [docs/BENCHMARKS.md]
With a second argument, replaces the text between the `<!-- figures:begin -->` and
`<!-- figures:end -->` markers of that file; otherwise prints the tables.

Every ratio divides by the limit measured in the same run; where limits.sh ran before and after
the figures, the higher of the two is used, so a ratio is never flattered by a slow limit run.
"""
import json
import re
import sys
from pathlib import Path


def limits(out, files=("limits-before.txt", "limits-after.txt")):
    got = {}
    for name in files:
        p = out / name
        if not p.exists():
            continue
        for line in p.read_text().splitlines():
            m = re.match(r"(\S+)\s+(\S+)\s+(?:iops\s+)?([\d.]+) MB/s", line)
            if m:
                iops = float(m.group(2)) if m.group(2) != "-" else None
                mbs = float(m.group(3))
                old = got.get(m.group(1), (0, 0))
                got[m.group(1)] = (max(old[0], iops or 0), max(old[1], mbs))
    return got


def results(out):
    got = {}
    for line in (out / "named.txt").read_text().splitlines():
        name, _, js = line.partition(" ")
        got[name] = json.loads(js)
    return got


def criterion(out, name):
    p = out / name
    if not p.exists():
        return {}
    got, current = {}, None
    for line in p.read_text().splitlines():
        m = re.match(r"^([a-z0-9_]+/\S+)", line)
        if m:
            current = m.group(1)
        m = re.search(r"thrpt:\s+\[\S+ \S+ ([\d.]+) (GiB|MiB)/s", line)
        if m and current:
            scale = 1024**3 if m.group(2) == "GiB" else 1024**2
            got.setdefault(current, {})["bytes_per_s"] = float(m.group(1)) * scale
        m = re.search(r"time:\s+\[\S+ \S+ ([\d.]+) (ns|µs|us|ms|s)\b", line)
        if m and current:
            scale = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1}[m.group(2)]
            got.setdefault(current, {})["seconds"] = float(m.group(1)) * scale
    return got


def fmt_rate(x):
    return f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.1f}k"


def tables(out):
    lim, res = limits(out), results(out)
    rows = []

    def row(what, cmd, figure, limit_text, ratio, target, ok):
        mark = "met" if ok else "**not met**"
        rows.append(f"| {what} | `{cmd}` | {figure} | {limit_text} | {ratio} | {target}: {mark} |")

    def r(name):
        return res.get(name)

    # Warm 1 KiB.
    x = r("warm-1k-mmap-t1")
    if x:
        row("warm 1 KiB, mmap", "bench gather r1k --backend mmap", f"{fmt_rate(x['records_per_s'])} rec/s",
            "-", "-", "≥ 2.5M rec/s", x["records_per_s"] >= 2.5e6)
    u, p = r("warm-1k-uring-t1"), r("warm-1k-pread-loop")
    if u and p:
        q = u["records_per_s"] / p["records_per_s"]
        row("warm 1 KiB, uring", "bench gather r1k --backend uring", f"{fmt_rate(u['records_per_s'])} rec/s",
            f"pread loop {fmt_rate(p['records_per_s'])} rec/s", f"{q:.2f}×", "≥ 1.0× pread loop", q >= 1.0)
    # Warm 64 KiB.
    l64 = lim.get("cached-rand-64k-mmap", (0, 0))[1] * 1e6
    for name in ("warm-64k-auto-t1", "warm-64k-mmap-t1", "warm-64k-auto-1core", "warm-64k-auto-t2"):
        x = r(name)
        if x and l64:
            q = x["bytes_per_s"] / l64
            extra = " (taskset -c 0)" if "1core" in name else f" --threads {x.get('threads', 1)}"
            row(f"warm 64 KiB, {name.split('-')[2]}", f"bench gather r64k --backend {x['backend']}{extra}",
                f"{x['bytes_per_s'] / 1e9:.2f} GB/s", f"cached-rand-64k-mmap {l64 / 1e9:.2f} GB/s", f"{q:.2f}×",
                "≥ 0.8×", q >= 0.8)
    # Cold 4 KiB.
    l4 = lim.get("direct-rand-4k-qd128", (0, 0))[0]
    loop = r("cold-4k-preadloop")
    for name, x in sorted(res.items()):
        if not name.startswith("cold-4k-") or name == "cold-4k-preadloop" or not l4:
            continue
        q = x["records_per_s"] / l4
        q2 = x["records_per_s"] / loop["records_per_s"] if loop else 0
        flags = f"--backend {x['backend']}" + (" --direct" if x.get("direct") else "") + f" --threads {x['threads']}"
        row("cold 4 KiB", f"bench gather r4k {flags} --evict", f"{fmt_rate(x['records_per_s'])} rec/s",
            f"direct-rand-4k-qd128 {fmt_rate(l4)} IOPS; pread loop {fmt_rate(loop['records_per_s']) if loop else '-'} rec/s",
            f"{q:.2f}× / {q2:.1f}×", "≥ 0.9× and ≥ 3× loop", q >= 0.9 and q2 >= 3)
    # Cold 64 KiB.
    l64c = lim.get("direct-rand-64k-qd32", (0, 0))[1] * 1e6
    for name, x in sorted(res.items()):
        if not name.startswith("cold-64k-") or not l64c:
            continue
        q = x["bytes_per_s"] / l64c
        flags = f"--backend {x['backend']}" + (" --direct" if x.get("direct") else "") + f" --threads {x['threads']}"
        row("cold 64 KiB", f"bench gather r64k {flags} --evict", f"{x['bytes_per_s'] / 1e9:.2f} GB/s",
            f"direct-rand-64k-qd32 {l64c / 1e9:.2f} GB/s", f"{q:.2f}×", "≥ 0.9×", q >= 0.9)
    # Deflate: d4k (nibbles, literal-heavy) and t4k (text).
    for ds, what, name in (("d4k", "deflate 4 KiB", "warm-4k-deflate-auto-1core"),
                           ("d4k", "deflate 4 KiB", "warm-4k-deflate-auto-2core"),
                           ("t4k", "deflate 4 KiB text", "warm-4k-text-auto-1core"),
                           ("t4k", "deflate 4 KiB text", "warm-4k-text-auto-2core")):
        x = r(name)
        if not x:
            continue
        base = r(name.replace("auto", "inflate-loop"))
        cores = 1 if "1core" in name else 2
        per_core = x["bytes_per_s"] / cores
        limit_text, ratio = "-", "-"
        if base:
            limit_text = f"libdeflate alone on the same records {base['bytes_per_s'] / 1e9 / cores:.2f} GB/s per core"
            ratio = f"{x['bytes_per_s'] / base['bytes_per_s']:.2f}×"
        how = " (taskset -c 0)" if cores == 1 else " (2 cores)"
        row(f"{what}, output per core", f"bench gather {ds}{how}", f"{per_core / 1e9:.2f} GB/s",
            limit_text, ratio, "≥ 1 GB/s per core", per_core >= 1e9)
    # Loader.
    for name in ("loader-1k-w2", "loader-64k-w2", "loader-1k-w2-bucket"):
        x = r(name)
        if x:
            q = x["ratio_to_gather"]
            row(f"loader, {name[7:]}", f"bench loader {name.split('-')[1]} --workers 2"
                + (" --bucket-buffer 16384" if "bucket" in name else ""),
                f"{fmt_rate(x['records_per_s'])} rec/s", f"raw gather on 2 threads {fmt_rate(x['gather_records_per_s'])} rec/s",
                f"{q:.2f}×", "≥ 0.9× (project target)", q >= 0.9)
    # Writes.
    lw = lim.get("buffered-seq-write-64k+fsync", (0, 0))[1] * 1e6
    for key, x in sorted(criterion(out, "criterion-write.txt").items()):
        if "bytes_per_s" not in x or not lw:
            continue
        m = re.search(r"raw/(\d+)(?:/writers=(\d+))?", key)
        if not m:
            continue
        size, writers = int(m.group(1)), m.group(2) or "1"
        q = x["bytes_per_s"] / lw
        target = 0.85 if size >= 65536 else 0.5
        row(f"append + commit, {size // 1024} KiB records, {writers} writer{'s' if writers != '1' else ''}",
            f"cargo bench --bench write -- raw/{size}/writers={writers}", f"{x['bytes_per_s'] / 1e9:.2f} GB/s",
            f"buffered-seq-write-64k+fsync {lw / 1e9:.2f} GB/s", f"{q:.2f}×", f"≥ {target}×", q >= target)
    x = r("convert-1g-f32")
    lc = limits(out, ("limits-convert.txt",)).get("buffered-seq-write-64k+fsync", (0, 0))[1] * 1e6
    if x and lc:
        lw = lc
        q = x["bytes_per_s"] / lw
        row("convert, 1 GiB float32 .npy", "convert x.npy --out DIR --writers 2 (benches/convert.sh, median of 5)",
            f"{x['bytes_per_s'] / 1e9:.2f} GB/s", f"buffered-seq-write-64k+fsync {lw / 1e9:.2f} GB/s", f"{q:.2f}×",
            "reported", True)
    for key, x in sorted(criterion(out, "criterion-resume.txt").items()):
        if "seconds" in x:
            row(f"resume, {key}", "cargo bench --bench pipeline -- resume_deep", f"{x['seconds'] * 1e3:.3f} ms",
                "-", "-", "-", True)

    head = ("| figure | command (`zrecord …`) | measured | limit, same run | ratio | target |\n"
            "|---|---|---|---|---|---|")
    lim_lines = "\n".join(f"| {k} | {v[0]:.0f} | {v[1]:.1f} |" for k, v in lim.items())
    if lc:
        lim_lines += f"\n| buffered-seq-write-64k+fsync, right after convert (benches/convert.sh) | - | {lc / 1e6:.1f} |"
    return (head + "\n" + "\n".join(rows) + "\n\nLimits of this run (`benches/limits.sh`, the higher of "
            "the runs before and after the figures):\n\n| limit | IOPS | MB/s |\n|---|---|---|\n" + lim_lines + "\n")


def main():
    out = Path(sys.argv[1])
    text = tables(out)
    if len(sys.argv) > 2:
        doc = Path(sys.argv[2])
        old = doc.read_text()
        begin, end = "<!-- figures:begin -->", "<!-- figures:end -->"
        a, b = old.index(begin) + len(begin), old.index(end)
        doc.write_text(old[:a] + "\n" + text + old[b:])
    else:
        print(text)


if __name__ == "__main__":
    main()
