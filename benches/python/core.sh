#!/usr/bin/env bash
# The two ratios the issue sets a target for, measured alone and in more rounds than pairs.sh:
# Python `take` / Rust `bench gather` (one core each, mmap, warm 1 KiB) and Python `Loader` /
# Rust `bench loader` (2 workers, auto), order alternating every round, each run right after its
# dataset's pages were dropped and read back through. Run after pairs.sh (its venv and data).
# Usage: benches/python/core.sh OUT_DIR [DATA_DIR] [ROUNDS]
set -euo pipefail
out=${1:?usage: core.sh OUT_DIR [DATA_DIR] [ROUNDS]}
data=${2:-target/bench-data}
rounds=${3:-6}
cd "$(dirname "$0")/../.."
mkdir -p "$out"
z=target/release/zrecord
py=target/py/bench-venv/bin/python
export OPENBLAS_NUM_THREADS=1
batches=${BATCHES:-8000}
warm() { for f in "$@"; do dd if="$f" iflag=nocache count=0 status=none; cat "$f" > /dev/null; done; }
ds_files() { ls "$data"/r1k/chunk/* "$data"/r1k/*.offsets; }
rust_take() { warm $(ds_files); taskset -c 0 $z bench gather "$data/r1k" --backend mmap --batches "$batches" --json; }
py_take() { warm $(ds_files); taskset -c 0 "$py" benches/python/take.py take "$data/r1k" --backend mmap --batches "$batches"; }
rust_loader() { warm $(ds_files); $z bench loader "$data/r1k" --workers 2 --batches "$batches" --no-compare --rounds 1 --json; }
py_loader() { warm $(ds_files); "$py" benches/python/take.py loader "$data/r1k" --workers 2 --batches "$batches"; }
: > "$out/core.jsonl"
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order="rust_take py_take rust_loader py_loader"; else order="py_take rust_take py_loader rust_loader"; fi
  for f in $order; do
    echo "round $r: $f" >&2
    $f | tail -n 1 | sed "s/^{/{\"round\":$r,\"run\":\"$f\",/" | tee -a "$out/core.jsonl"
  done
done
"$py" benches/python/report.py "$out/core.jsonl" | tee "$out/core-report.txt"
