#!/usr/bin/env bash
# First random batch of 256 over 10M x 64 B on s3s-fs, cold page file, by requests in flight;
# and the store's limit (one range GET per record, straight through the client).
set -euo pipefail
# Z: a release build of zrecord (cargo build --release --features cli); D: a scratch directory.
Z=${ZRECORD:-target/release/zrecord}
D=${1:-target/first-batch}
mkdir -p "$D"
[ -d $D/ds ] || $Z bench make $D/ds --records 10000000 --record-bytes 64 --json > $D/make.json
port=39555
mkdir -p $D/s3/bench
s3s-fs --host 127.0.0.1 --port $port --access-key zrecord --secret-key zrecord-secret $D/s3 > $D/s3s.log 2>&1 &
spid=$!
trap 'kill $spid' EXIT
sleep 1
export AWS_ACCESS_KEY_ID=zrecord AWS_SECRET_ACCESS_KEY=zrecord-secret AWS_REGION=us-east-1 AWS_ALLOW_HTTP=true AWS_ENDPOINT=http://127.0.0.1:$port
[ -f $D/pushed ] || { ZRECORD_CACHE_DIR=$D/pushcache $Z push $D/ds s3://bench/r10m && touch $D/pushed; }
for round in 1 2 3; do
  for r in 32 64 128 256; do
    rm -rf $D/cache; export ZRECORD_CACHE_DIR=$D/cache
    echo "{\"round\":$round,\"requests\":$r,\"open\":$($Z bench open s3://bench/r10m --requests $r --seed $round$r)}" >> $D/open.jsonl
    echo "{\"round\":$round,\"requests\":$r,\"limit\":$($Z bench gather s3://bench/r10m --range-get-loop --batch 256 --batches 3 --requests $r --json 2>/dev/null | tail -n1)}" >> $D/limit.jsonl
  done
done
