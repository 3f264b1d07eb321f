#!/usr/bin/env bash
# zrecord from Python against the Rust engine and the peers, in alternating rounds on the same
# dataset (2M x 1 KiB, `zrecord bench make`) and the same indices:
#   take:   `zrecord bench gather --backend mmap` (Rust) vs `take.py take` (Python) vs numpy
#           memmap fancy indexing, each under `taskset -c 0`, order rotating every round, files
#           dropped from the page cache and read back through before each run (warm, the same
#           way every time);
#   loader: `zrecord bench loader --workers 2 --no-compare` vs `take.py loader --workers 2`;
#   thread: a pure-Python loop beside a 1-worker loader, against the loop alone;
#   peers:  Lance `take` and Grain over ArrayRecord (`__getitems__`, and `grain.DataLoader` with
#           2 workers), fewer batches (they are slower), once per round.
# Usage: benches/python/pairs.sh OUT_DIR [DATA_DIR] [ROUNDS]. Not run by CI or the tests.
set -euo pipefail
out=${1:?usage: pairs.sh OUT_DIR [DATA_DIR] [ROUNDS]}
data=${2:-target/bench-data}
rounds=${3:-3}
cd "$(dirname "$0")/../.."
mkdir -p "$out" "$data"
z=target/release/zrecord
cargo build --release --quiet --features cli
py=$(bash benches/python/setup.sh)
[ -d "$data/r1k" ] || $z bench make "$data/r1k" --records 2000000 --record-bytes 1024
# The flat copy numpy reads, and the Lance and ArrayRecord copies (untimed, once).
"$py" benches/baselines/numpy_memmap.py "$data/r1k" --batches 1 > /dev/null
"$py" benches/python/peers.py build "$data/r1k"
batches=${BATCHES:-4000}
# numpy's OpenBLAS threads spin after use; none of these runs does linear algebra.
export OPENBLAS_NUM_THREADS=1
warm() { for f in "$@"; do dd if="$f" iflag=nocache count=0 status=none; cat "$f" > /dev/null; done; }
ds_files() { ls "$data"/r1k/chunk/* "$data"/r1k/*.offsets; }
rust_take() { warm $(ds_files); taskset -c 0 $z bench gather "$data/r1k" --backend mmap --batches "$batches" --json; }
py_take() { warm $(ds_files); taskset -c 0 "$py" benches/python/take.py take "$data/r1k" --backend mmap --batches "$batches"; }
np_take() { warm "$data/r1k.flat"; taskset -c 0 "$py" benches/baselines/numpy_memmap.py "$data/r1k" --batches "$batches"; }
rust_loader() { warm $(ds_files); $z bench loader "$data/r1k" --workers 2 --batches "$batches" --no-compare --rounds 1 --json; }
py_loader() { warm $(ds_files); "$py" benches/python/take.py loader "$data/r1k" --workers 2 --batches "$batches"; }
py_thread() { warm $(ds_files); "$py" benches/python/take.py thread "$data/r1k" --workers 1 --seconds 5; }
lance_take() { warm $(find "$data/r1k.lance" -type f); taskset -c 0 "$py" benches/python/peers.py lance "$data/r1k" --batches 200; }
grain_take() { warm "$data/r1k.arrayrecord"; taskset -c 0 "$py" benches/python/peers.py grain "$data/r1k" --batches 200; }
arrayrecord_take() { warm "$data/r1k.arrayrecord"; taskset -c 0 "$py" benches/python/peers.py arrayrecord "$data/r1k" --batches 200; }
grain_loader() { warm "$data/r1k.arrayrecord"; timeout 300 "$py" benches/python/peers.py grain-loader "$data/r1k" --batches 40 --workers 2 || echo "{\"bench\": \"grain.DataLoader\", \"timeout\": true}"; }
: > "$out/pairs.jsonl"
for r in $(seq 1 "$rounds"); do
  case $((r % 3)) in
    1) order="rust_take py_take np_take rust_loader py_loader" ;;
    2) order="py_take np_take rust_take py_loader rust_loader" ;;
    0) order="np_take rust_take py_take rust_loader py_loader" ;;
  esac
  for f in $order py_thread lance_take grain_take arrayrecord_take grain_loader; do
    echo "round $r: $f" >&2
    $f | tail -n 1 | sed "s/^{/{\"round\":$r,\"run\":\"$f\",/" | tee -a "$out/pairs.jsonl"
  done
done
"$py" benches/python/report.py "$out/pairs.jsonl" | tee "$out/report.txt"
