#!/usr/bin/env bash
# A gather over a collection of 64 parts against the same records in one dataset (issue #24):
# `bench gather` of 256 random indices per batch, warm (files read into the page cache before
# each run), one thread, checksums on, every byte consumed, in alternating runs. The parts are
# made with `bench make --seed k` (k = 1..64) and committed; the single dataset holds the same
# total (64 × RECORDS records of 1 KiB). Prints each run and the ratio collection / dataset.
# Usage: benches/collection.sh OUT_DIR [DATA_DIR] [ROUNDS]
set -euo pipefail
out=${1:?usage: collection.sh OUT_DIR [DATA_DIR] [ROUNDS]}
data=${2:-target/bench-data}
rounds=${3:-4}
records=${RECORDS:-16384}
batches=${BATCHES:-4000}
backend=${BACKEND:-mmap}
cd "$(dirname "$0")/.."
mkdir -p "$out" "$data"
z=${ZRECORD:-target/release/zrecord}
[ -n "${ZRECORD:-}" ] || cargo build --release --quiet --features cli
one="$data/coll-one-$records"
coll="$data/coll-64x$records"
if [ ! -d "$one" ]; then
  $z bench make "$one" --records $((64 * records)) --record-bytes 1024 --seed 1 --chunk-bytes 64MiB
fi
if [ ! -d "$coll" ]; then
  parts=()
  for k in $(seq 1 64); do
    $z bench make "$data/coll-part-$k" --records "$records" --record-bytes 1024 --seed "$k" --chunk-bytes 64MiB
    parts+=("$data/coll-part-$k")
  done
  $z collection commit "$coll" "${parts[@]}"
fi
warm() { find "$1" -type f -exec cat {} + > /dev/null; }
run() { warm "$2"; $z bench gather "$2" --backend "$backend" --consume --batches "$batches" --json; }
: > "$out/collection.jsonl"
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order="one coll"; else order="coll one"; fi
  for f in $order; do
    case $f in one) d=$one ;; coll) d=$coll ;; esac
    echo "round $r: $f" >&2
    run "$f" "$d" | sed "s/^{/{\"round\":$r,\"run\":\"$f\",/" | tee -a "$out/collection.jsonl"
  done
done
python3 - "$out/collection.jsonl" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {}
for r in runs:
    by.setdefault(r["round"], {})[r["run"]] = r
print("round  one dataset Mrec/s (cpu s)  collection of 64 Mrec/s (cpu s)  collection / dataset")
ratios = []
for k in sorted(by):
    a, c = by[k]["one"], by[k]["coll"]
    x = c["records_per_s"] / a["records_per_s"]
    ratios.append(x)
    f = lambda r: f'{r["records_per_s"]/1e6:6.2f} ({r["cpu_seconds"]:.2f})'
    print(f"{k:5}  {f(a):>26}  {f(c):>31}  {x:8.2f}x")
ratios.sort()
print(f"range {ratios[0]:.2f}-{ratios[-1]:.2f}x, median {ratios[len(ratios)//2]:.2f}x")
PY
