#!/usr/bin/env python3
"""Summarises benches/python/pairs.sh's pairs.jsonl: per round, records/s (and CPU seconds) of
each run, and the ratios the issue names (Python take / Rust gather, Python loader / Rust
loader, zrecord take / each peer), with their range over the rounds."""

import json
import sys

runs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by: dict = {}
for r in runs:
    by.setdefault(r["round"], {})[r["run"]] = r


def rate(r):
    return r.get("records_per_s") or 0.0


def cpu(r):
    if "cpu_seconds" in r:
        return r["cpu_seconds"]
    rounds = r.get("rounds") or [{}]
    us = rounds[0].get("cpu_us_per_record")
    records = r.get("records") or r.get("batches", 0) * r.get("batch", 0)
    return us * records / 1e6 if us is not None else 0.0


ratios: dict = {}
for k in sorted(by):
    rd = by[k]
    line = [f"round {k}:"]
    for name in ["rust_take", "py_take", "np_take", "rust_loader", "py_loader", "lance_take", "grain_take", "arrayrecord_take", "grain_loader"]:
        if name in rd:
            line.append(f"{name} {rate(rd[name]) / 1e6:.3f}M/s ({cpu(rd[name]):.2f} cpu s)")
    print("  ".join(line))
    pairs = {
        "py take / rust gather": ("py_take", "rust_take"),
        "py take / numpy memmap": ("py_take", "np_take"),
        "py loader / rust loader": ("py_loader", "rust_loader"),
        "py take / lance take": ("py_take", "lance_take"),
        "py take / grain ArrayRecord": ("py_take", "grain_take"),
        "py take / bare ArrayRecordReader": ("py_take", "arrayrecord_take"),
        "py loader / grain DataLoader": ("py_loader", "grain_loader"),
    }
    for label, (a, b) in pairs.items():
        if a in rd and b in rd and rate(rd[b]):
            ratios.setdefault(label, []).append(rate(rd[a]) / rate(rd[b]))
    if "py_thread" in rd:
        ratios.setdefault("python loop beside a loader / alone", []).append(rd["py_thread"]["ratio"])
    if "py_take" in rd:
        ratios.setdefault("python objects per take batch", []).append(rd["py_take"]["objects_per_batch"])
for label, v in ratios.items():
    m = sorted(v)[len(v) // 2]
    print(f"{label}: {min(v):.2f}-{max(v):.2f} (median {m:.2f}, {len(v)} rounds)")
