#!/usr/bin/env bash
# `zrecord convert` throughput on a 1 GiB float32 .npy (262144 × 1024, C order, raw), next to
# fio's buffered sequential 64 KiB write + fsync measured right after, in the same run.
# Usage: benches/convert.sh OUT_DIR [DATA_DIR]   (appends to OUT_DIR/named.txt and limits-convert.txt)
set -euo pipefail
out=${1:?usage: convert.sh OUT_DIR [DATA_DIR]}
data=${2:-target/bench-data}
cd "$(dirname "$0")/.."
mkdir -p "$out" "$data"
z=target/release/zrecord
cargo build --release --quiet --features cli
npy=$data/convert-f32.npy
[ -f "$npy" ] || python3 - "$npy" 262144 1024 <<'EOF'
# A C-order little-endian float32 .npy of shape (ROWS, COLS), without numpy.
import array, struct, sys
path, rows, cols = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, cols)
header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
block_rows = 256
block = array.array('f', [float((r * 7919 + c) % 100003) * 0.001
                          for r in range(block_rows) for c in range(cols)]).tobytes()
with open(path, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    done = 0
    while done < rows:
        n = min(block_rows, rows - done)
        f.write(block[: n * cols * 4])
        done += n
EOF
cat "$npy" > /dev/null
bytes=$(stat -c %s "$npy")
secs=()
for i in 1 2 3 4 5; do
  rm -rf "$data/convert-out.zr"; sync
  t0=$(date +%s.%N)
  $z convert "$npy" --out "$data/convert-out.zr" --writers 2 > /dev/null
  t1=$(date +%s.%N)
  secs+=("$(python3 -c "print($t1 - $t0)")")
done
rm -rf "$data/convert-out.zr"
median=$(printf '%s\n' "${secs[@]}" | sort -g | sed -n 3p)
echo "convert-1g-f32 {\"bytes_per_s\": $(python3 -c "print($bytes / $median)"), \"seconds_median\": $median, \"seconds\": [$(IFS=,; echo "${secs[*]}")]}" | tee -a "$out/named.txt"
fio --name=seqwrite --filename="$data/limits-w.dat" --size=1G --ioengine=psync --direct=0 --rw=write --bs=64k \
    --end_fsync=1 --output-format=terse 2>/dev/null | awk -F';' '{printf "%-34s %10s      %9.1f MB/s\n", "buffered-seq-write-64k+fsync", "-", $48/1024}' |
  tee "$out/limits-convert.txt"
rm -f "$data/limits-w.dat"
