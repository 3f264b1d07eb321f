#!/usr/bin/env python3
"""The table of benches/compare.sh: medians over rounds of each figure, before and after.
Usage: benches/compare_report.py OUT_DIR/results.jsonl"""
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def figure(r):
    """(value, unit, cpu seconds, loader/raw-gather ratio) of one result."""
    r = r["r"]
    if "wall_s" in r:
        return 256 / r["wall_s"], "MiB/s", r["cpu_s"], None
    return r["records_per_s"], "rec/s", r.get("cpu_seconds"), r.get("ratio_to_gather")
names = list(dict.fromkeys(r["name"] for r in rows))
print(f"{'figure':16} {'before':>12} {'after':>12} {'after/before':>12} {'unit':>6}  {'loader/raw before':>17} {'after':>6}")
for n in names:
    med, ratio = {}, {}
    for b in ("before", "after"):
        vals = [figure(r) for r in rows if r["name"] == n and r["build"] == b]
        med[b] = statistics.median(v[0] for v in vals)
        unit = vals[0][1]
        rs = [v[3] for v in vals if v[3] is not None]
        ratio[b] = f"{statistics.median(rs):.2f}" if rs else "-"
    print(f"{n:16} {med['before']:>12,.0f} {med['after']:>12,.0f} {med['after'] / med['before']:>11.2f}× {unit:>6}  {ratio['before']:>17} {ratio['after']:>6}")
