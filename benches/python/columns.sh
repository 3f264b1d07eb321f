#!/usr/bin/env bash
# Issue #31's figures: zrecord from Python against the Rust engine laying batches out the same
# way (`--columns`: each field end to end in memory of its own, one copy per record folded into
# its check), and against numpy memmap, in alternating rounds on the same data and indices:
#   take:    `take.py take` vs `zrecord bench gather --columns --backend mmap`, one core each
#            (`taskset -c 0`), at 1 KiB (r1k, batch 256) and 64 KiB (r64k, batch 32);
#   numpy:   `take.py take` vs numpy memmap `arr[idx]` at 64 KiB, one core each;
#   loader:  `take.py loader` vs `zrecord bench loader --columns`, 2 workers, at 1 KiB and 64 KiB
#            (both warm every chunk page into the process's mappings first, untimed);
#   rust:    `zrecord bench loader` against its own raw gathers (`ratio_to_gather`, 1 KiB), plain
#            and with bucketing.
# Before every run the run's files are dropped from the page cache and read back through (warm,
# the same way every time). Prints one report line per pair: the Python/Rust (or Python/numpy)
# ratio of records per second and of CPU seconds per record, min-max over the rounds.
# Usage: benches/python/columns.sh OUT_DIR [DATA_DIR] [ROUNDS]. Not run by CI or the tests.
set -euo pipefail
out=${1:?usage: columns.sh OUT_DIR [DATA_DIR] [ROUNDS]}
data=${2:-target/bench-data}
rounds=${3:-4}
cd "$(dirname "$0")/../.."
mkdir -p "$out" "$data"
z=target/release/zrecord
cargo build --release --quiet --features cli
py=$(bash benches/python/setup.sh)
[ -d "$data/r1k" ] || $z bench make "$data/r1k" --records 2000000 --record-bytes 1024
[ -d "$data/r64k" ] || $z bench make "$data/r64k" --records 30000 --record-bytes 65536
"$py" benches/baselines/numpy_memmap.py "$data/r64k" --batches 1 > /dev/null
export OPENBLAS_NUM_THREADS=1
b1k=${BATCHES_1K:-4000}
b64k=${BATCHES_64K:-3000}
warm() { for f in "$@"; do dd if="$f" iflag=nocache count=0 status=none; cat "$f" > /dev/null; done; }
files() { ls "$data/$1"/chunk/* "$data/$1"/*.offsets; }
rust_take_1k() { warm $(files r1k); taskset -c 0 $z bench gather "$data/r1k" --columns --backend mmap --batch 256 --batches "$b1k" --json; }
py_take_1k() { warm $(files r1k); taskset -c 0 "$py" benches/python/take.py take "$data/r1k" --backend mmap --batch 256 --batches "$b1k"; }
rust_take_64k() { warm $(files r64k); taskset -c 0 $z bench gather "$data/r64k" --columns --backend mmap --batch 32 --batches "$b64k" --json; }
py_take_64k() { warm $(files r64k); taskset -c 0 "$py" benches/python/take.py take "$data/r64k" --backend mmap --batch 32 --batches "$b64k"; }
np_take_64k() { warm "$data/r64k.flat"; taskset -c 0 "$py" benches/baselines/numpy_memmap.py "$data/r64k" --batch 32 --batches "$b64k"; }
rust_loader_1k() { warm $(files r1k); $z bench loader "$data/r1k" --columns --workers 2 --batch 256 --batches "$b1k" --no-compare --rounds 1 --json; }
py_loader_1k() { warm $(files r1k); "$py" benches/python/take.py loader "$data/r1k" --workers 2 --batch 256 --batches "$b1k"; }
rust_loader_64k() { warm $(files r64k); $z bench loader "$data/r64k" --columns --workers 2 --batch 32 --batches "$b64k" --no-compare --rounds 1 --json; }
py_loader_64k() { warm $(files r64k); "$py" benches/python/take.py loader "$data/r64k" --workers 2 --batch 32 --batches "$b64k"; }
rust_own() { warm $(files r1k); $z bench loader "$data/r1k" --workers 2 --batches "$b1k" --rounds 3 --json; }
rust_own_bucket() { warm $(files r1k); $z bench loader "$data/r1k" --workers 2 --batches "$b1k" --rounds 3 --bucket-buffer 4096 --json; }
: > "$out/columns.jsonl"
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) = 1 ]; then
    order="rust_take_1k py_take_1k rust_take_64k py_take_64k np_take_64k rust_loader_1k py_loader_1k rust_loader_64k py_loader_64k"
  else
    order="py_take_1k rust_take_1k np_take_64k py_take_64k rust_take_64k py_loader_1k rust_loader_1k py_loader_64k rust_loader_64k"
  fi
  for f in $order rust_own rust_own_bucket; do
    echo "round $r: $f" >&2
    $f | tail -n 1 | sed "s/^{/{\"round\":$r,\"run\":\"$f\",/" | tee -a "$out/columns.jsonl"
  done
done
"$py" - "$out/columns.jsonl" <<'PY' | tee "$out/columns-report.txt"
import json, sys

runs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {}
for r in runs:
    by.setdefault(r["round"], {})[r["run"]] = r


def rate(r):
    return r["records_per_s"]


def cpu(r):
    """CPU seconds per record: the run's own figure where it gives one (the loaders' timed
    round), else the process's CPU over the timed loop."""
    if "rounds" in r:
        return r["rounds"][0]["cpu_us_per_record"] / 1e6
    return r["cpu_seconds"] / r["records"]


def pair(name, a, b):
    walls, cpus = [], []
    for k in sorted(by):
        x, y = by[k].get(a), by[k].get(b)
        if x and y:
            walls.append(rate(x) / rate(y))
            cpus.append(cpu(y) / cpu(x))  # > 1: a spends less CPU per record than b
            print(f"  round {k} {name}: {a} {rate(x):,.0f}/s {cpu(x)*1e6:.3f} us cpu/rec, "
                  f"{b} {rate(y):,.0f}/s {cpu(y)*1e6:.3f} us cpu/rec")
    if walls:
        print(f"{name}: wall {min(walls):.2f}-{max(walls):.2f}x, per CPU second "
              f"{min(cpus):.2f}-{max(cpus):.2f}x")


pair("take / bench gather --columns, 1 KiB", "py_take_1k", "rust_take_1k")
pair("take / bench gather --columns, 64 KiB", "py_take_64k", "rust_take_64k")
pair("take / numpy memmap arr[idx], 64 KiB", "py_take_64k", "np_take_64k")
pair("Loader / bench loader --columns, 1 KiB", "py_loader_1k", "rust_loader_1k")
pair("Loader / bench loader --columns, 64 KiB", "py_loader_64k", "rust_loader_64k")
for run, name in [("rust_own", "bench loader / its raw gathers, 1 KiB"),
                  ("rust_own_bucket", "bench loader --bucket-buffer 4096 / its raw gathers, 1 KiB")]:
    walls, cpus = [], []
    for k in sorted(by):
        r = by[k].get(run)
        if not r:
            continue
        for x in r["rounds"]:
            if x.get("ratio_to_gather"):
                walls.append(x["ratio_to_gather"])
                cpus.append(x["gather_cpu_us_per_record"] / x["cpu_us_per_record"])
    if walls:
        print(f"{name}: wall {min(walls):.2f}-{max(walls):.2f}x, per CPU second "
              f"{min(cpus):.2f}-{max(cpus):.2f}x")
PY
