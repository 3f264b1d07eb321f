#!/usr/bin/env bash
# Two builds of `zrecord` against one S3 server (s3s-fs on 127.0.0.1), on the request pattern of
# range coalescing (issue #34): requests per batch and bytes fetched per byte asked for
# (deterministic: one thread, seed 1), then records/s, alternating the builds run by run.
#
#   bash benches/coalesce.sh BEFORE_BIN AFTER_BIN [OUT_DIR] [ROUNDS]   (default target/bench-coalesce, 3)
#
# Random gathers (`bench gather`) and sequential scans (`bench gather --sequential`: batches of
# consecutive records) of 1 KiB records (200,000, batches of 256) and 64 KiB records (4,000,
# batches of 64), 100 batches each; no chunk cache (`--cache` not given, ZRECORD_CACHE_BYTES
# unset): every record comes from the server. Both builds need `--sequential` (commit 341d528
# on). Needs s3s-fs (`cargo install --locked s3s-fs@0.14.1 --features binary`). Every JSON line
# goes to OUT_DIR/results.jsonl; a table is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
before=${1:?usage: coalesce.sh BEFORE_BIN AFTER_BIN [OUT_DIR] [ROUNDS]}
after=${2:?}
out=${3:-target/bench-coalesce}
rounds=${4:-3}
mkdir -p "$out"
: > "$out/results.jsonl"
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$work/s3/bench"
s3s-fs --host 127.0.0.1 --port "$port" --access-key zrecord --secret-key zrecord-secret "$work/s3" \
  >"$work/s3s.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do
  (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break
  sleep 0.05
done
export AWS_ACCESS_KEY_ID=zrecord AWS_SECRET_ACCESS_KEY=zrecord-secret AWS_REGION=us-east-1
export AWS_ALLOW_HTTP=true AWS_ENDPOINT=http://127.0.0.1:$port
export ZRECORD_CACHE_DIR=$work/cache
unset ZRECORD_CACHE_BYTES

one() { # label bin name args...
  local label=$1 bin=$2 name=$3
  shift 3
  echo "== $label $name: $*" >&2
  "$bin" "$@" --json | sed "s/^/{\"build\":\"$label\",\"name\":\"$name\",\"r\":/; s/\$/}/" >> "$out/results.jsonl"
}

for size in 1K 64K; do
  case $size in
    1K) records=200000 batch=256 ;;
    64K) records=4000 batch=64 ;;
  esac
  "$after" bench make "$work/local-$size" --records "$records" --record-bytes "$size" --chunk-bytes 64MiB >/dev/null
  "$after" push "$work/local-$size" "s3://bench/r$size" >/dev/null
  rm -rf "$work/local-$size"
done

for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order="before after"; else order="after before"; fi
  for size in 1K 64K; do
    case $size in
      1K) batch=256 ;;
      64K) batch=64 ;;
    esac
    for label in $order; do
      bin=$before; [ "$label" = after ] && bin=$after
      one "$label" "$bin" "random-$size" bench gather "s3://bench/r$size" --batch "$batch" --batches 100
      one "$label" "$bin" "sequential-$size" bench gather "s3://bench/r$size" --batch "$batch" --batches 100 --sequential
    done
  done
done

python3 - "$out/results.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for x in rows:
    by.setdefault((x["name"], x["build"]), []).append(x["r"])
print("| figure | build | requests/batch | bytes fetched / asked | records/s (median, runs) |")
print("|---|---|---|---|---|")
for name in dict.fromkeys(x["name"] for x in rows):
    for build in ("before", "after"):
        rs = by.get((name, build), [])
        if not rs:
            continue
        rem = rs[0]["remote"]
        batches = rs[0].get("batches") or 100
        rates = [r["records_per_s"] for r in rs]
        print(f"| {name} | {build} | {rem['requests'] / batches:.2f} | "
              f"{rem['fetched_per_requested']:.4f} | {statistics.median(rates):,.0f} "
              f"({', '.join(f'{v:,.0f}' for v in rates)}) |")
EOF
