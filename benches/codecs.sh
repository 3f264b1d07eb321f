#!/usr/bin/env bash
# Codecs on small and text records (issue #25), in one run: for each content (t4k text records
# of 4 KiB, ~1.5 KiB JSON objects, ~150 B captions) and codec (deflate, zstd, zstd with a
# dictionary), the size ratio (logical bytes / stored bytes of the chunks), the append speed
# (`bench make`, 2 append tasks, wall and CPU), and on one core with checksums on the gather
# speed in decoded bytes per second beside the plain decode loop over the same stored bytes
# (`--inflate-loop`, one context, no checksums, no copies: the limit).
# Usage: benches/codecs.sh OUT_DIR [DATA_DIR] [ZRECORD]
set -euo pipefail
out=${1:?usage: codecs.sh OUT_DIR [DATA_DIR] [ZRECORD]}
data=${2:-target/bench-data}
z=${3:-target/release/zrecord}
mkdir -p "$out" "$data/codecs"
: > "$out/codecs.jsonl"
for spec in "t4k:text:4096:60000" "json:json:1536:150000" "cap:captions:150:1000000"; do
  IFS=: read -r name content bytes records <<< "$spec"
  for codec in deflate zstd zstd-dict; do
    dir=$data/codecs/$name-$codec
    rm -rf "$dir"
    /usr/bin/time -f "%e %U %S" -o "$out/time.txt" \
      "$z" bench make "$dir" --records "$records" --record-bytes "$bytes" --codec "$codec" \
      --content "$content" > "$out/make.txt"
    read -r wall user sys < "$out/time.txt"
    logical=$(grep -o 'records of [0-9]* bytes' "$out/make.txt" | grep -o '[0-9]*' | head -1)
    stored=$(du -b --apparent-size -s "$dir/chunk" | cut -f1)
    cat "$dir"/chunk/* "$dir"/*.offsets > /dev/null
    g=$(taskset -c 0 "$z" bench gather "$dir" --backend auto --batches 2000 --json)
    l=$(taskset -c 0 "$z" bench gather "$dir" --inflate-loop --batches 2000 --json)
    python3 - "$name" "$codec" "$records" "$logical" "$stored" "$wall" "$user" "$sys" "$g" "$l" \
      >> "$out/codecs.jsonl" <<'PY'
import json, sys
name, codec, records, logical, stored, wall, user, sys_ = sys.argv[1:9]
g, l = json.loads(sys.argv[9]), json.loads(sys.argv[10])
total = int(records) * int(logical)
print(json.dumps({"content": name, "codec": codec, "ratio": total / int(stored),
                  "append_mb_s": total / float(wall) / 1e6,
                  "append_cpu_s": float(user) + float(sys_),
                  "gather_mb_s": g["bytes_per_s"] / 1e6, "gather_cpu_s": g["cpu_seconds"],
                  "loop_mb_s": l["bytes_per_s"] / 1e6,
                  "gather_vs_loop": g["bytes_per_s"] / l["bytes_per_s"]}))
PY
    tail -1 "$out/codecs.jsonl"
    rm -rf "$dir"
  done
done
