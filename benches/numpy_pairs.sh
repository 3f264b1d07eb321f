#!/usr/bin/env bash
# zrecord's one-core checksummed gather against numpy, in alternating pairs: the README's
# "warm 1 KiB, one core" row. Each round runs zrecord (`bench gather --backend mmap --consume`,
# every byte of every batch read) and both numpy forms (benches/baselines/numpy_memmap.py: a
# numpy.memmap of a flat copy; np.load(mmap_mode='r') of a .npy copy with every cache line of
# each batch touched), in an order that rotates every round, each under `taskset -c 0` and
# right after its files' pages were dropped and read back through (how a file's pages entered
# the page cache moves numpy's speed by up to 2x). Prints each run and the ratios' range.
# Usage: benches/numpy_pairs.sh OUT_DIR [DATA_DIR] [ROUNDS]
set -euo pipefail
out=${1:?usage: numpy_pairs.sh OUT_DIR [DATA_DIR] [ROUNDS]}
data=${2:-target/bench-data}
rounds=${3:-4}
cd "$(dirname "$0")/.."
mkdir -p "$out" "$data"
z=target/release/zrecord
cargo build --release --quiet --features cli
py=$(bash benches/baselines/setup.sh)
[ -d "$data/r1k" ] || $z bench make "$data/r1k" --records 2000000 --record-bytes 1024
batches=${BATCHES:-20000}
warm() { for f in "$@"; do dd if="$f" iflag=nocache count=0 status=none; cat "$f" > /dev/null; done; }
ds_files() { ls "$data"/r1k/chunk/* "$data"/r1k/*.offsets; }
zr() { warm $(ds_files); taskset -c 0 $z bench gather "$data/r1k" --backend mmap --consume --batches "$batches" --json; }
np_memmap() { taskset -c 0 "$py" benches/baselines/numpy_memmap.py "$data/r1k" --flat "$data/r1k.flat" --zrecord "$z" --batches "$batches"; }
np_load() { taskset -c 0 "$py" benches/baselines/numpy_memmap.py "$data/r1k" --flat "$data/r1k.flat" --form npload --batches "$batches"; }
: > "$out/pairs.jsonl"
for r in $(seq 1 "$rounds"); do
  case $((r % 3)) in
    1) order="zr np_memmap np_load" ;;
    2) order="np_memmap np_load zr" ;;
    0) order="np_load zr np_memmap" ;;
  esac
  for f in $order; do
    echo "round $r: $f" >&2
    $f | sed "s/^{/{\"round\":$r,\"run\":\"$f\",/" | tee -a "$out/pairs.jsonl"
  done
done
python3 - "$out/pairs.jsonl" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {}
for r in runs:
    by.setdefault(r["round"], {})[r["run"]] = r
print("round  zrecord Mrec/s (cpu s)  memmap Mrec/s (cpu s)  npload+touch Mrec/s (cpu s)  vs memmap  vs npload")
ra, rb = [], []
for k in sorted(by):
    z, a, b = by[k]["zr"], by[k]["np_memmap"], by[k]["np_load"]
    x, y = z["records_per_s"] / a["records_per_s"], z["records_per_s"] / b["records_per_s"]
    ra.append(x); rb.append(y)
    f = lambda r: f'{r["records_per_s"]/1e6:6.2f} ({r["cpu_seconds"]:.2f})'
    print(f"{k:5}  {f(z):>22}  {f(a):>21}  {f(b):>27}  {x:8.2f}x  {y:8.2f}x")
print(f"range: {min(ra):.2f}-{max(ra):.2f}x numpy memmap, {min(rb):.2f}-{max(rb):.2f}x np.load + touch")
PY
