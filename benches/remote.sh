#!/usr/bin/env bash
# Object-storage benchmarks (issue #13): each zrecord figure beside its baseline from the same
# run, through a real S3 server (s3s-fs) on 127.0.0.1.
#
#   bash benches/remote.sh [OUT_DIR]        (default target/bench-remote)
#
# - gather:  `zrecord bench gather s3://…` against `--range-get-loop` (one range GET per record
#            at the same concurrency, straight through object_store: the store's limit here),
#            for 1 KiB and 64 KiB records; bytes fetched per byte asked for (coalescing).
# - loader:  `zrecord bench loader s3://…` with and without 20 ms added per request (the
#            `s3_proxy` example in front of the server), lookahead on.
# - cache:   the loader on a cold cache, on a warm cache (every chunk cached), and on the same
#            dataset on local disk.
# Needs s3s-fs (`cargo install --locked s3s-fs@0.14.1 --features binary`). Prints one JSON line
# per run into OUT_DIR/*.json.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/bench-remote}
mkdir -p "$out"
cargo build --release --features cli --quiet
cargo build --release --features testing --example s3_proxy --quiet
bin=target/release/zrecord
proxy_bin=target/release/examples/s3_proxy
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 200); do
    (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "nothing listens on port $1" >&2
  exit 1
}

port=$(free_port)
mkdir -p "$work/s3/bench"
s3s-fs --host 127.0.0.1 --port "$port" --access-key zrecord --secret-key zrecord-secret "$work/s3" \
  >"$work/s3s.log" 2>&1 &
pids+=($!)
wait_port "$port"
export AWS_ACCESS_KEY_ID=zrecord AWS_SECRET_ACCESS_KEY=zrecord-secret AWS_REGION=us-east-1
export AWS_ALLOW_HTTP=true AWS_ENDPOINT=http://127.0.0.1:$port
export ZRECORD_CACHE_DIR=$work/cache

# Two proxies in front of the server: 0 ms and 20 ms added per request. The loader's
# latency figure compares them, so the proxy's own cost (a connection and a copy per request)
# is on both sides.
start_proxy() { # latency-ms -> prints the endpoint
  "$proxy_bin" --upstream "http://127.0.0.1:$port" --latency-ms "$1" >"$work/proxy-$1.out" 2>&1 &
  pids+=($!)
  for _ in $(seq 200); do
    ep=$(head -n1 "$work/proxy-$1.out" 2>/dev/null || true)
    [ -n "$ep" ] && { echo "$ep"; return; }
    sleep 0.05
  done
  echo "the proxy did not start: $(cat "$work/proxy-$1.out")" >&2
  exit 1
}
fast=$(start_proxy 0)
slow=$(start_proxy 20)

run() { # name, then the command
  local name=$1
  shift
  echo "== $name: $*" >&2
  "$@" --json | tee "$out/$name.json"
}

for size in 1K 64K; do
  case $size in
    1K) records=200000 batch=256 batches=100 ;;
    64K) records=4000 batch=64 batches=100 ;;
  esac
  local_ds=$work/local-$size
  "$bin" bench make "$local_ds" --records "$records" --record-bytes "$size" --chunk-bytes 64MiB >/dev/null
  url=s3://bench/r$size
  "$bin" push "$local_ds" "$url" >/dev/null

  for rep in 1 2; do
    run "gather-$size-range-get-loop-$rep" "$bin" bench gather "$url" --batch "$batch" --batches "$batches" --range-get-loop
    run "gather-$size-zrecord-$rep" "$bin" bench gather "$url" --batch "$batch" --batches "$batches"
  done

  for rep in 1 2; do
    for la in 4 0; do
      AWS_ENDPOINT=$fast run "loader-$size-0ms-lookahead$la-$rep" \
        "$bin" bench loader "$url" --batch "$batch" --batches "$batches" --no-compare --lookahead "$la" --workers 4
      AWS_ENDPOINT=$slow run "loader-$size-20ms-lookahead$la-$rep" \
        "$bin" bench loader "$url" --batch "$batch" --batches "$batches" --no-compare --lookahead "$la" --workers 4
    done
  done
  rm -rf "$ZRECORD_CACHE_DIR"
  # Cold cache: the epoch from the store fills it. Warm: every chunk cached, read locally.
  run "loader-$size-cache-cold" "$bin" bench loader "$url" --batch "$batch" --batches "$batches" --no-compare --cache 8GiB
  for _ in $(seq 100); do
    n=$(find "$ZRECORD_CACHE_DIR/objects" -name 'data__chunk__*' 2>/dev/null | wc -l)
    want=$(find "$local_ds/chunk" -type f | wc -l)
    [ "$n" -ge "$want" ] && break
    sleep 0.2
  done
  for rep in 1 2; do
    run "loader-$size-cache-warm-$rep" "$bin" bench loader "$url" --batch "$batch" --batches "$batches" --no-compare --cache 8GiB
    run "loader-$size-local-$rep" "$bin" bench loader "$local_ds" --batch "$batch" --batches "$batches" --no-compare
  done
  rm -rf "$local_ds"
done
echo "results in $out" >&2
