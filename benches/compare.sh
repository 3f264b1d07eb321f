#!/usr/bin/env bash
# Two builds of `zrecord` on the same figures, alternating run by run so host noise falls on
# both: warm gathers (1 KiB one thread, 64 KiB), the loader warm (1 KiB, 64 KiB) and cold
# (4 KiB, pages evicted, a fresh seed per round), and appends (`bench make`: 256 MiB of 1 KiB
# records through the Writer, fsyncs included, timed with its CPU seconds).
# Usage: benches/compare.sh BEFORE_BIN AFTER_BIN OUT_DIR [DATA_DIR] [ROUNDS]
# DATA_DIR holds r1k, r64k and r4k as benches/run-all.sh makes them. Prints a table at the end
# (medians over rounds, after/before) and keeps every JSON line in OUT_DIR/results.jsonl.
set -euo pipefail
before=${1:?usage: compare.sh BEFORE_BIN AFTER_BIN OUT_DIR [DATA_DIR] [ROUNDS]}
after=${2:?}
out=${3:?}
data=${4:-target/bench-data}
rounds=${5:-3}
mkdir -p "$out"
: > "$out/results.jsonl"
warm() { cat "$data/$1"/chunk/* "$data/$1"/*.offsets > /dev/null; }
one() { # label bin name args...
  local label=$1 bin=$2 name=$3; shift 3
  echo "== $label $name: $*" >&2
  "$bin" "$@" --json | sed "s/^/{\"build\":\"$label\",\"name\":\"$name\",\"r\":/; s/\$/}/" >> "$out/results.jsonl"
}
append() { # label bin
  local dir=$data/compare-append t0 t1
  rm -rf "$dir"
  t0=$(date +%s.%N)
  /usr/bin/time -f "%U %S" -o "$out/time.txt" "$2" bench make "$dir" --records 262144 --record-bytes 1024 > /dev/null
  t1=$(date +%s.%N)
  read -r u s < "$out/time.txt"
  awk -v b="$1" -v w="$(echo "$t1 - $t0" | bc)" -v c="$(echo "$u + $s" | bc)" \
    'BEGIN { printf "{\"build\":\"%s\",\"name\":\"append-1k\",\"r\":{\"wall_s\":%.6f,\"cpu_s\":%.2f}}\n", b, w, c }' \
    >> "$out/results.jsonl"
  rm -rf "$dir"
}
for r in $(seq 1 "$rounds"); do
  # Alternate which build goes first.
  if [ $((r % 2)) = 1 ]; then order="before after"; else order="after before"; fi
  for label in $order; do
    bin=$before; [ "$label" = after ] && bin=$after
    warm r1k
    one "$label" "$bin" gather-1k-t1 bench gather "$data/r1k" --backend auto --batches 10000
    one "$label" "$bin" loader-1k-w2 bench loader "$data/r1k" --workers 2 --batch 256 --batches 4000
    warm r64k
    one "$label" "$bin" gather-64k-t1 bench gather "$data/r64k" --backend auto --batches 800
    one "$label" "$bin" loader-64k-w2 bench loader "$data/r64k" --workers 2 --batch 256 --batches 400
    one "$label" "$bin" loader-4k-cold bench loader "$data/r4k" --workers 2 --batch 256 --batches 300 --evict --rounds 1 --seed $((100 + r))
    append "$label" "$bin"
  done
done
python3 "$(dirname "$0")/compare_report.py" "$out/results.jsonl"
