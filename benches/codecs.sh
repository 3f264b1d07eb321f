#!/usr/bin/env bash
# Codecs on small and text records (issue #25), in one run: for each content (t4k text records
# of 4 KiB, ~1.5 KiB JSON objects, ~150 B captions) and codec (deflate, zstd, zstd with a
# dictionary), the size ratio (logical bytes / stored bytes of the chunks), the append speed
# of one append task on records generated before the clock starts (`bench make --prepared
# --writers 1`, wall and CPU) beside the writer's encoder compressing the same records in a plain
# loop with the same dictionary (`--compress-loop`: the limit), and on one core with checksums on the gather
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
    m=$("$z" bench make "$dir" --records "$records" --record-bytes "$bytes" --codec "$codec" \
      --content "$content" --writers 1 --prepared --compress-loop --json)
    stored=$(du -b --apparent-size -s "$dir/chunk" | cut -f1)
    cat "$dir"/chunk/* "$dir"/*.offsets > /dev/null
    g=$(taskset -c 0 "$z" bench gather "$dir" --backend auto --batches 2000 --json)
    l=$(taskset -c 0 "$z" bench gather "$dir" --inflate-loop --batches 2000 --json)
    python3 - "$name" "$codec" "$stored" "$m" "$g" "$l" >> "$out/codecs.jsonl" <<'PY'
import json, sys
name, codec, stored = sys.argv[1:4]
m, g, l = (json.loads(a) for a in sys.argv[4:7])
print(json.dumps({"content": name, "codec": codec, "ratio": m["bytes"] / int(stored),
                  "append_mb_s": m["mb_per_s"], "append_cpu_s": m["cpu_seconds"],
                  "compress_loop_mb_s": m["loop_mb_per_s"],
                  "compress_loop_cpu_s": m["loop_cpu_seconds"],
                  "append_vs_loop": m["append_vs_loop"],
                  "append_commit_s": m.get("commit_seconds"),
                  "gather_mb_s": g["bytes_per_s"] / 1e6, "gather_cpu_s": g["cpu_seconds"],
                  "loop_mb_s": l["bytes_per_s"] / 1e6,
                  "gather_vs_loop": g["bytes_per_s"] / l["bytes_per_s"]}))
PY
    tail -1 "$out/codecs.jsonl"
    rm -rf "$dir"
  done
done
