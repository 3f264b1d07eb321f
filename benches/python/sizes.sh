#!/usr/bin/env bash
# `Dataset.take` from Python against the Rust gather at the other two record sizes the issue
# names, in alternating rounds, one core each (`taskset -c 0`):
#   warm 64 KiB: r64k (30,000 x 64 KiB), files dropped and read back through before each run,
#                the mmap backend;
#   cold 4 KiB:  r4k (500,000 x 4 KiB), files dropped from the page cache before each run, the
#                io_uring backend (`bench gather --evict`; Python: the same drop, then `take`).
# Usage: benches/python/sizes.sh OUT_DIR [DATA_DIR] [ROUNDS]. Run after pairs.sh (its venv).
set -euo pipefail
out=${1:?usage: sizes.sh OUT_DIR [DATA_DIR] [ROUNDS]}
data=${2:-target/bench-data}
rounds=${3:-3}
cd "$(dirname "$0")/../.."
mkdir -p "$out"
z=target/release/zrecord
py=target/py/bench-venv/bin/python
export OPENBLAS_NUM_THREADS=1
[ -d "$data/r64k" ] || $z bench make "$data/r64k" --records 30000 --record-bytes 65536
[ -d "$data/r4k" ] || $z bench make "$data/r4k" --records 500000 --record-bytes 4096
files() { ls "$data/$1"/chunk/* "$data/$1"/*.offsets; }
drop() { for f in "$@"; do dd if="$f" iflag=nocache count=0 status=none; done; }
warm() { drop "$@"; for f in "$@"; do cat "$f" > /dev/null; done; }
rust_64k() { warm $(files r64k); taskset -c 0 $z bench gather "$data/r64k" --backend mmap --batch 32 --batches "${BATCHES_64K:-2000}" --json; }
py_64k() { warm $(files r64k); taskset -c 0 "$py" benches/python/take.py take "$data/r64k" --backend mmap --batch 32 --batches "${BATCHES_64K:-2000}"; }
rust_4k() { taskset -c 0 $z bench gather "$data/r4k" --backend uring --evict --batches 300 --json; }
py_4k() { drop $(files r4k); taskset -c 0 "$py" benches/python/take.py take "$data/r4k" --backend uring --batches 300; }
: > "$out/sizes.jsonl"
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order="rust_64k py_64k rust_4k py_4k"; else order="py_64k rust_64k py_4k rust_4k"; fi
  for f in $order; do
    echo "round $r: $f" >&2
    $f | tail -n 1 | sed "s/^{/{\"round\":$r,\"run\":\"$f\",/" | tee -a "$out/sizes.jsonl"
  done
done
"$py" - "$out/sizes.jsonl" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {}
for r in runs:
    by.setdefault(r["round"], {})[r["run"]] = r
for size in ["64k", "4k"]:
    ratios = []
    for k in sorted(by):
        p, q = by[k].get(f"py_{size}"), by[k].get(f"rust_{size}")
        if p and q:
            ratios.append(p["records_per_s"] / q["records_per_s"])
            print(f"round {k} {size}: python {p['records_per_s']:.0f}/s ({p['cpu_seconds']:.2f} cpu s)  rust {q['records_per_s']:.0f}/s ({q.get('cpu_seconds', 0):.2f} cpu s)  {ratios[-1]:.2f}x")
    print(f"{size}: python take / rust gather {min(ratios):.2f}-{max(ratios):.2f}x")
PY
