#!/usr/bin/env bash
# Every figure in docs/BENCHMARKS.md, with this machine's limits measured in the same run.
# Usage: benches/run-all.sh OUT_DIR [DATA_DIR]   (DATA_DIR on the disk under test; ~8 GiB free)
set -euo pipefail
out=${1:?usage: run-all.sh OUT_DIR [DATA_DIR]}
data=${2:-target/bench-data}
mkdir -p "$out" "$data"
cd "$(dirname "$0")/.."
limits=benches/limits.sh
z=target/release/zrecord
cargo build --release --quiet --features cli
py=$(bash benches/baselines/setup.sh)  # numpy in target/bench-venv, for the numpy baseline
log() { echo "== $*" | tee -a "$out/log.txt"; }

log "limits (before)"
bash "$limits" "$data/limits" 2G | tee "$out/limits-before.txt"

[ -d "$data/r1k" ]  || $z bench make "$data/r1k"  --records 2000000 --record-bytes 1024
[ -d "$data/r64k" ] || $z bench make "$data/r64k" --records 32768   --record-bytes 65536
[ -d "$data/r4k" ]  || $z bench make "$data/r4k"  --records 1000000 --record-bytes 4096
[ -d "$data/d4k" ]  || $z bench make "$data/d4k"  --records 500000  --record-bytes 4096 --codec deflate
[ -d "$data/t4k" ]  || $z bench make "$data/t4k"  --records 500000  --record-bytes 4096 --codec deflate --content text

run() { # name, args... (args start with a zrecord subcommand, or with `taskset ... $z`)
  local name=$1; shift
  [ "$1" = taskset ] || set -- "$z" "$@"
  log "$name: $*"
  "$@" --json | tee -a "$out/results.jsonl" | sed "s/^/$name /" >> "$out/named.txt"
}
warm() { cat "$data/$1"/chunk/* "$data/$1"/*.offsets > /dev/null; }  # the page cache may have dropped it since (offset tables too: a gather reads an entry per record)
# Warm 1 KiB: every backend, the plain pread loop, verification off, two threads.
warm r1k
for b in auto mmap uring psync; do
  run "warm-1k-$b-t1" bench gather "$data/r1k" --backend $b --batches 20000
done
run "warm-1k-pread-loop" bench gather "$data/r1k" --pread-loop --batches 5000
run "warm-1k-auto-noverify" bench gather "$data/r1k" --backend auto --batches 20000 --no-verify
run "warm-1k-auto-t2" bench gather "$data/r1k" --backend auto --batches 10000 --threads 2
# One core, checksums on, against numpy: benches/baselines/numpy_memmap.py does `arr[idx]` on a
# numpy.memmap of the same records (a flat copy beside the dataset, built once, untimed) over the
# same indices. Back to back, then in the other order, so noise shows.
numpy_1k() { run "$1" taskset -c 0 "$py" benches/baselines/numpy_memmap.py "$data/r1k" --flat "$data/r1k.flat" --zrecord "$z" --batches 20000; }
# Both sides warm in the same state, right before each run: pages dropped, then read through
# (the numpy script does the same to its copy). How a file's pages got into the page cache
# decides how many pages a fault maps: pages left from writing it, or partly reclaimed since
# (this host reclaims file pages unused for about a minute), cost several times more faults.
rewarm() { for f in "$data/$1"/chunk/* "$data/$1"/*.offsets; do dd if="$f" iflag=nocache count=0 status=none; done; warm "$1"; }
rewarm r1k
run "warm-1k-mmap-1core-a" taskset -c 0 $z bench gather "$data/r1k" --backend mmap --batches 20000
numpy_1k "warm-1k-numpy-1core-a"
numpy_1k "warm-1k-numpy-1core-b"
rewarm r1k
run "warm-1k-mmap-1core-b" taskset -c 0 $z bench gather "$data/r1k" --backend mmap --batches 20000
run "loader-1k-w2" bench loader "$data/r1k" --workers 2 --batch 256 --batches 8000
run "loader-1k-w2-bucket" bench loader "$data/r1k" --workers 2 --batch 256 --batches 4000 --bucket-buffer 16384
# Warm 64 KiB.
warm r64k
for b in auto mmap uring psync; do
  run "warm-64k-$b-t1" bench gather "$data/r64k" --backend $b --batches 1500
done
run "warm-64k-auto-t2" bench gather "$data/r64k" --backend auto --batches 1000 --threads 2
# One core for everything (fio's limit is one job): verification cannot spread over both.
run "warm-64k-auto-1core" taskset -c 0 $z bench gather "$data/r64k" --backend auto --batches 1500
run "loader-64k-w2" bench loader "$data/r64k" --workers 2 --batch 256 --batches 800
# Deflate (nibbles, about 3:1), warm: decompressed output per core.
warm d4k
# libdeflate alone on the same records is the limit: the data decides how fast inflating can go.
run "warm-4k-deflate-auto-2core" bench gather "$data/d4k" --backend auto --batches 3000
run "warm-4k-deflate-inflate-loop-2core" bench gather "$data/d4k" --inflate-loop --threads 2 --batches 1500
run "warm-4k-deflate-auto-1core" taskset -c 0 $z bench gather "$data/d4k" --backend auto --batches 3000
run "warm-4k-deflate-inflate-loop-1core" taskset -c 0 $z bench gather "$data/d4k" --inflate-loop --batches 3000
# The same four on text (Zipf words, about 2.6:1): what compressible captions or tokens inflate at.
warm t4k
run "warm-4k-text-auto-2core" bench gather "$data/t4k" --backend auto --batches 3000
run "warm-4k-text-inflate-loop-2core" bench gather "$data/t4k" --inflate-loop --threads 2 --batches 1500
run "warm-4k-text-auto-1core" taskset -c 0 $z bench gather "$data/t4k" --backend auto --batches 3000
run "warm-4k-text-inflate-loop-1core" taskset -c 0 $z bench gather "$data/t4k" --inflate-loop --batches 3000
# Cold: the dataset's pages dropped before each run.
for args in "--backend uring" "--backend uring --threads 4" "--backend uring --direct --threads 4" "--backend psync --threads 4" "--backend auto --threads 4" "--pread-loop"; do
  run "cold-4k-$(echo $args | tr -d ' -')" bench gather "$data/r4k" $args --batches 300 --evict
done
for args in "--backend uring" "--backend uring --threads 2" "--backend uring --direct --threads 2"; do
  run "cold-64k-$(echo $args | tr -d ' -')" bench gather "$data/r64k" $args --batches 40 --evict
done
# The loader on cold data: every run evicts the files, opens the dataset afresh and reads records
# no earlier run of the process read (a seed per run); the raw gathers on as many threads too.
run "loader-4k-cold" bench loader "$data/r4k" --workers 2 --batch 256 --batches 600 --evict --rounds 2 --seed 101
run "loader-64k-cold" bench loader "$data/r64k" --workers 2 --batch 256 --batches 60 --evict --rounds 2 --seed 201

log "criterion: write, pipeline"
ZRECORD_BENCH_DIR="$data" cargo bench --quiet --bench write 2>&1 | grep -E "^[a-z0-9_]+/|time:|thrpt:" | tee "$out/criterion-write.txt"
cargo bench --quiet --bench pipeline -- resume_deep 2>&1 | grep -E "^[a-z0-9_]+/|time:" | tee "$out/criterion-resume.txt"

log "limits (after)"
bash "$limits" "$data/limits" 2G | tee "$out/limits-after.txt"
