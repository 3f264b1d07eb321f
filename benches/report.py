#!/usr/bin/env python3
"""Turns a benches/run-all.sh output directory into the figure tables of docs/BENCHMARKS.md.

Usage: benches/report.py OUT_DIR [docs/BENCHMARKS.md] [--svg PATH]
With a second argument, replaces the text between the `<!-- figures:begin -->` and
`<!-- figures:end -->` markers of that file and draws the chart into benchmarks.svg beside it
(docs/benchmarks.svg, shown in the README); otherwise prints the tables. `--svg PATH` draws the
chart into PATH. The chart needs no package: it is SVG written by hand.

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
    if not (out / "named.txt").exists():  # a run of the criterion benches alone
        return got
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


def span(runs):
    """`lo–hi` records/s of several runs of one figure."""
    rates = sorted(x["records_per_s"] for x in runs)
    return fmt_rate(rates[0]) if len(rates) == 1 else f"{fmt_rate(rates[0])}–{fmt_rate(rates[-1])}"


def tables(out):
    lim, res = limits(out), results(out)
    rows, bars = [], []

    def row(what, cmd, figure, limit_text, ratio, target, ok, bar=None):
        """`bar`: (label, ratios, reference, target ratio or None[, measured]) for the chart."""
        mark = "met" if ok else "**not met**"
        rows.append(f"| {what} | `{cmd}` | {figure} | {limit_text} | {ratio} | {target}: {mark} |")
        if bar:
            label, ratios, ref, goal = bar[:4]
            shown = ratio.split(" (")[0] if ratio != "-" else " / ".join(f"{q:.2f}×" for q in ratios)
            if len(ratios) > 2:
                shown = f"{min(ratios):.2f}–{max(ratios):.2f}× ({len(ratios)} pairs)"
            measured = bar[4] if len(bar) > 4 else figure
            bars.append({"label": label, "ratios": ratios, "detail": f"{measured} vs {ref}", "ratio": shown,
                         "goal": f"target {target}", "target": goal, "ok": ok})

    def r(name):
        return res.get(name)

    # Warm 1 KiB.
    x = r("warm-1k-mmap-t1")
    if x:
        row("warm 1 KiB, mmap", "bench gather r1k --backend mmap", f"{fmt_rate(x['records_per_s'])} rec/s",
            "-", "-", "≥ 2.5M rec/s", x["records_per_s"] >= 2.5e6,
            ("warm 1 KiB, mmap, 1 thread", [x["records_per_s"] / 2.5e6], "its target, 2.5M rec/s (no limit)",
             1.0))
    u, p = r("warm-1k-uring-t1"), r("warm-1k-pread-loop")
    if u and p:
        q = u["records_per_s"] / p["records_per_s"]
        row("warm 1 KiB, uring", "bench gather r1k --backend uring", f"{fmt_rate(u['records_per_s'])} rec/s",
            f"pread loop {fmt_rate(p['records_per_s'])} rec/s", f"{q:.2f}×", "≥ 1.0× pread loop", q >= 1.0,
            ("warm 1 KiB, uring forced", [q], f"a pread loop, {fmt_rate(p['records_per_s'])} rec/s", 1.0))
    # Warm 1 KiB, one core, against numpy memmap fancy indexing: pairs run back to back
    # (run-all.sh: `-a`, then `-b` in the other order); the lower ratio is the one that counts.
    keys = sorted(k[len("warm-1k-numpy-1core-"):] for k in res if k.startswith("warm-1k-numpy-1core-"))
    pairs = [(r(f"warm-1k-mmap-1core-{k}"), r(f"warm-1k-numpy-1core-{k}")) for k in keys]
    pairs = [(z, n) for z, n in pairs if z and n]
    if pairs:
        qs = [z["records_per_s"] / n["records_per_s"] for z, n in pairs]
        zs = " / ".join(fmt_rate(z["records_per_s"]) for z, _ in pairs)
        ns = " / ".join(fmt_rate(n["records_per_s"]) for _, n in pairs)
        # The median batch, beside: on a shared host, preemption lands in a few batches of
        # either side and swings the means; the medians show the per-batch work.
        p50 = " / ".join(f"{n['p50_batch_ms'] / z['p50_batch_ms']:.2f}×" for z, n in pairs)
        # And records per CPU second (user + system, both processes on the same records): what
        # the code costs, whatever else ran on the core.
        if all(z.get("cpu_seconds") and n.get("cpu_seconds") for z, n in pairs):
            p50 += "; per CPU second: " + " / ".join(
                f"{(z['records'] / z['cpu_seconds']) / (n['records'] / n['cpu_seconds']):.2f}×" for z, n in pairs)
        row("warm 1 KiB one core vs numpy memmap (target ≥ 1.2×)",
            "bench gather r1k --backend mmap (taskset -c 0)", f"{zs} rec/s",
            f"numpy memmap `arr[idx]`, same records and indices, {ns} rec/s",
            " / ".join(f"{q:.2f}×" for q in qs) + f" (median batch: {p50})", "≥ 1.2× numpy", min(qs) >= 1.2,
            ("warm 1 KiB, one core, vs numpy", qs, f"numpy memmap {span([n for _, n in pairs])} rec/s", 1.2,
             f"{span([z for z, _ in pairs])} rec/s"))
    # Warm 64 KiB.
    l64 = lim.get("cached-rand-64k-mmap", (0, 0))[1] * 1e6
    for name in ("warm-64k-auto-t1", "warm-64k-mmap-t1", "warm-64k-auto-1core", "warm-64k-auto-t2"):
        x = r(name)
        if x and l64:
            q = x["bytes_per_s"] / l64
            extra = " (taskset -c 0)" if "1core" in name else f" --threads {x.get('threads', 1)}"
            row(f"warm 64 KiB, {name.split('-')[2]}", f"bench gather r64k --backend {x['backend']}{extra}",
                f"{x['bytes_per_s'] / 1e9:.2f} GB/s", f"cached-rand-64k-mmap {l64 / 1e9:.2f} GB/s", f"{q:.2f}×",
                "≥ 0.8×", q >= 0.8,
                (f"warm 64 KiB, {x['backend']}, " + ("one core" if "1core" in name else
                                                     f"{x.get('threads', 1)} thread{'s' if x.get('threads', 1) > 1 else ''}"),
                 [q], f"fio cached-rand-64k-mmap {l64 / 1e9:.2f} GB/s", 0.8))
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
            f"{q:.2f}× / {q2:.1f}×", "≥ 0.9× and ≥ 3× loop", q >= 0.9 and q2 >= 3,
            (f"cold 4 KiB, {x['backend']}{' direct' if x.get('direct') else ''}, {x['threads']} thread"
             + ("s" if x["threads"] > 1 else ""), [q], f"fio direct-rand-4k-qd128 {fmt_rate(l4)} IOPS", 0.9))
    # Cold 64 KiB.
    l64c = lim.get("direct-rand-64k-qd32", (0, 0))[1] * 1e6
    for name, x in sorted(res.items()):
        if not name.startswith("cold-64k-") or not l64c:
            continue
        q = x["bytes_per_s"] / l64c
        flags = f"--backend {x['backend']}" + (" --direct" if x.get("direct") else "") + f" --threads {x['threads']}"
        row("cold 64 KiB", f"bench gather r64k {flags} --evict", f"{x['bytes_per_s'] / 1e9:.2f} GB/s",
            f"direct-rand-64k-qd32 {l64c / 1e9:.2f} GB/s", f"{q:.2f}×", "≥ 0.9×", q >= 0.9,
            (f"cold 64 KiB, {x['backend']}{' direct' if x.get('direct') else ''}, {x['threads']} thread"
             + ("s" if x["threads"] > 1 else ""), [q], f"fio direct-rand-64k-qd32 {l64c / 1e9:.2f} GB/s", 0.9))
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
        limit_text, ratio, bar = "-", "-", None
        how = " (taskset -c 0)" if cores == 1 else " (2 cores)"
        if base:
            base_core = base["bytes_per_s"] / cores
            limit_text = f"libdeflate alone on the same records {base_core / 1e9:.2f} GB/s per core"
            ratio = f"{x['bytes_per_s'] / base['bytes_per_s']:.2f}×"
            # The target is 1 GB/s per core whatever libdeflate does: in the chart's units,
            # 1 GB/s over libdeflate's rate.
            bar = (f"{what}, {'one core' if cores == 1 else 'two cores'}", [x["bytes_per_s"] / base["bytes_per_s"]],
                   f"libdeflate alone {base_core / 1e9:.2f} GB/s per core", 1e9 / base_core)
        row(f"{what}, output per core", f"bench gather {ds}{how}", f"{per_core / 1e9:.2f} GB/s",
            limit_text, ratio, "≥ 1 GB/s per core", per_core >= 1e9, bar)
    # Loader.
    for name in ("loader-1k-w2", "loader-64k-w2", "loader-1k-w2-bucket"):
        x = r(name)
        if x:
            q = x["ratio_to_gather"]
            target = 0.9 if "bucket" in name else 0.95
            # CPU per record, loader over raw (medians over the rounds): what the loader adds.
            cpu = sorted(rd["cpu_us_per_record"] / rd["gather_cpu_us_per_record"]
                         for rd in x.get("rounds", []) if rd.get("gather_cpu_us_per_record"))
            cpu_text = f"; CPU/record {cpu[len(cpu) // 2]:.2f}× raw's" if cpu else ""
            row(f"loader, {name[7:]}", f"bench loader {name.split('-')[1]} --workers 2"
                + (" --bucket-buffer 16384" if "bucket" in name else ""),
                f"{fmt_rate(x['records_per_s'])} rec/s{cpu_text}",
                f"raw gather on 2 threads {fmt_rate(x['gather_records_per_s'])} rec/s",
                f"{q:.2f}×", f"≥ {target}×", q >= target,
                (f"loader, {name.split('-')[1]}, 2 workers" + (", bucketing" if "bucket" in name else ""), [q],
                 f"raw gather on 2 threads {fmt_rate(x['gather_records_per_s'])} rec/s", target))
    # The loader on cold data, against fio's direct random reads at queue depth.
    for name, ds, key, scale, unit in (("loader-4k-cold", "r4k", "direct-rand-4k-qd128", 0, "IOPS"),
                                       ("loader-64k-cold", "r64k", "direct-rand-64k-qd32", 1, "GB/s")):
        x = r(name)
        lv = lim.get(key, (0, 0))
        if not x or not lv[0]:
            continue
        if scale == 0:
            q = x["records_per_s"] / lv[0]
            measured, limit_text = f"{fmt_rate(x['records_per_s'])} rec/s", f"{key} {fmt_rate(lv[0])} IOPS"
        else:
            q = x["bytes_per_s"] / (lv[1] * 1e6)
            measured, limit_text = f"{x['bytes_per_s'] / 1e9:.2f} GB/s", f"{key} {lv[1] / 1e3:.2f} GB/s"
        raw = x.get("ratio_to_gather")
        row(f"loader, cold {ds[1:]}", f"bench loader {ds} --workers 2 --evict",
            measured + (f"; {raw:.2f}× raw cold gathers on 2 threads" if raw else ""),
            limit_text, f"{q:.2f}×", "≥ 0.9×", q >= 0.9,
            (f"loader, cold {ds[1:]}, 2 workers", [q], f"fio {key}", 0.9))
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
            f"buffered-seq-write-64k+fsync {lw / 1e9:.2f} GB/s", f"{q:.2f}×", f"≥ {target}×", q >= target,
            (f"append + commit, {size // 1024} KiB, {writers} writer{'s' if writers != '1' else ''}", [q],
             f"fio buffered-seq-write-64k+fsync {lw / 1e9:.2f} GB/s", target))
    x = r("convert-1g-f32")
    lc = limits(out, ("limits-convert.txt",)).get("buffered-seq-write-64k+fsync", (0, 0))[1] * 1e6
    if x and lc:
        lw = lc
        q = x["bytes_per_s"] / lw
        row("convert, 1 GiB float32 .npy", "convert x.npy --out DIR --writers 2 (benches/convert.sh, median of 5)",
            f"{x['bytes_per_s'] / 1e9:.2f} GB/s", f"buffered-seq-write-64k+fsync {lw / 1e9:.2f} GB/s", f"{q:.2f}×",
            "reported", True,
            ("convert, 1 GiB float32 .npy", [q], f"fio buffered-seq-write-64k+fsync {lw / 1e9:.2f} GB/s", None))
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
            "the runs before and after the figures):\n\n| limit | IOPS | MB/s |\n|---|---|---|\n" + lim_lines + "\n",
            bars)


def esc(text):
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def svg(bars, title):
    """A bar chart of `bars`: per figure, its limit or baseline as a grey bar of length 1 and
    zrecord's ratio to it beside it (green when its target is met, red when not), the target a
    dashed mark."""
    width, left, right, top, row_h = 1180, 440, 220, 104, 40
    x0, x1 = left, width - right
    biggest = max([max(b["ratios"]) for b in bars] + [b["target"] or 0 for b in bars] + [1.5])
    xmax = min(3.0, -(-biggest * 1.05 // 0.5) * 0.5)

    def x(v):
        return x0 + (x1 - x0) * min(v, xmax) / xmax

    height = top + row_h * len(bars) + 40
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
         f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">',
         f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
         f'<text x="16" y="28" font-size="18" font-weight="bold">{esc(title)}</text>',
         '<text x="16" y="50" font-size="12" fill="#444">Each figure as a ratio to its limit or baseline '
         'measured in the same run (fio, a plain loop, libdeflate alone, numpy): 1× is the limit.</text>']
    legend = [("#b0b0b0", "limit or baseline (1×)"), ("#2e7d32", "zrecord, target met"),
              ("#c62828", "zrecord, target not met")]
    lx = 16
    for color, name in legend:
        o.append(f'<rect x="{lx}" y="62" width="14" height="10" fill="{color}"/>')
        o.append(f'<text x="{lx + 20}" y="71" font-size="12">{esc(name)}</text>')
        lx += 30 + 7 * len(name)
    o.append(f'<line x1="{lx + 6}" y1="60" x2="{lx + 6}" y2="74" stroke="#111" stroke-width="2" '
             f'stroke-dasharray="3,2"/><text x="{lx + 14}" y="71" font-size="12">target</text>')
    bottom = top + row_h * len(bars)
    for i, b in enumerate(bars):
        y = top + i * row_h
        if i % 2 == 0:
            o.append(f'<rect x="0" y="{y}" width="{width}" height="{row_h}" fill="#f4f4f4"/>')
    step = 0.25 if xmax <= 1.5 else 0.5
    v = 0.0
    while v <= xmax + 1e-9:
        gx = x(v)
        o.append(f'<line x1="{gx:.1f}" y1="{top - 6}" x2="{gx:.1f}" y2="{bottom}" '
                 f'stroke="{"#555" if v == 1.0 else "#d0d0d0"}" stroke-width="{1.5 if v == 1.0 else 1}"/>')
        o.append(f'<text x="{gx:.1f}" y="{top - 10}" font-size="11" text-anchor="middle" fill="#444">{v:g}×</text>')
        o.append(f'<text x="{gx:.1f}" y="{bottom + 16}" font-size="11" text-anchor="middle" fill="#444">{v:g}×</text>')
        v += step
    for i, b in enumerate(bars):
        y = top + i * row_h
        o.append(f'<text x="16" y="{y + 17}" font-size="13" font-weight="bold">{esc(b["label"])}</text>')
        o.append(f'<text x="16" y="{y + 32}" font-size="10.5" fill="#555">{esc(b["detail"])}</text>')
        o.append(f'<rect x="{x0}" y="{y + 7}" width="{x(1.0) - x0:.1f}" height="9" fill="#b0b0b0"/>')
        lo, hi = min(b["ratios"]), max(b["ratios"])
        color = "#2e7d32" if b["ok"] else "#c62828"
        o.append(f'<rect x="{x0}" y="{y + 18}" width="{max(x(lo) - x0, 1):.1f}" height="14" fill="{color}"/>')
        if hi > lo:  # two runs of one figure: the bar is the lower, the whisker reaches the higher
            o.append(f'<line x1="{x(lo):.1f}" y1="{y + 25}" x2="{x(hi):.1f}" y2="{y + 25}" stroke="{color}" '
                     f'stroke-width="2"/><line x1="{x(hi):.1f}" y1="{y + 19}" x2="{x(hi):.1f}" y2="{y + 31}" '
                     f'stroke="{color}" stroke-width="2"/>')
        if hi > xmax:
            o.append(f'<text x="{x1 - 2}" y="{y + 29}" font-size="12" fill="#fff" text-anchor="end">▶</text>')
        if b["target"] is not None:
            tx = x(b["target"])
            o.append(f'<line x1="{tx:.1f}" y1="{y + 3}" x2="{tx:.1f}" y2="{y + row_h - 3}" stroke="#111" '
                     f'stroke-width="2" stroke-dasharray="3,2"/>')
        o.append(f'<text x="{x1 + 10}" y="{y + 21}" font-size="12">{esc(b["ratio"])}</text>')
        o.append(f'<text x="{x1 + 10}" y="{y + 34}" font-size="9.5" fill="#555">{esc(b["goal"])}</text>')
    o.append("</svg>")
    return "\n".join(o) + "\n"


def main():
    args = sys.argv[1:]
    svg_path = None
    if "--svg" in args:
        k = args.index("--svg")
        svg_path = Path(args[k + 1])
        del args[k:k + 2]
    out = Path(args[0])
    text, bars = tables(out)
    if len(args) > 1 and svg_path is None:
        svg_path = Path(args[1]).parent / "benchmarks.svg"
    if svg_path:
        svg_path.write_text(svg(bars, f"zrecord against its limits and baselines: run {out.resolve().name}"))
    if len(args) > 1:
        doc = Path(args[1])
        old = doc.read_text()
        begin, end = "<!-- figures:begin -->", "<!-- figures:end -->"
        a, b = old.index(begin) + len(begin), old.index(end)
        doc.write_text(old[:a] + "\n" + text + old[b:])
    else:
        print(text)


if __name__ == "__main__":
    main()
