#!/usr/bin/env bash
# Issue #32 §4: the vision input pipeline, zrecord against torch, Grain and SPDL (vision.py).
#
#   benches/python/vision.sh [OUT] [N]
#
# OUT (default target/bench-data/vision) gets N JPEGs (default 30000) from make_jpegs.py, as
# files and as OUT/train.zr, then OUT/train.array_record for Grain; then ROUNDS (default 3)
# alternating rounds of every system, one epoch each, median reported. Raw JSON per round and
# the table go to JSON_DIR (default docs/bench-runs/<today>-vision). The venv is
# target/py/bench-venv (`INSTALL_VISION=1 benches/python/setup.sh` installs the peers); a peer
# that is not installed is skipped. Needs target/release/zrecord for the `limit` row.
set -euo pipefail
cd "$(dirname "$0")/../.."
py=${PY:-target/py/bench-venv/bin/python}
out=${1:-target/bench-data/vision}
n=${2:-30000}
json_dir=${JSON_DIR:-docs/bench-runs/$(date -u +%F)-vision}
"$py" benches/python/make_jpegs.py "$out" "$n"
"$py" benches/python/vision.py prepare "$out"
echo "# load before: $(uptime)" >&2
"$py" benches/python/vision.py bench "$out" --rounds "${ROUNDS:-3}" --json-dir "$json_dir" \
  ${SYSTEMS:+--systems "$SYSTEMS"} ${LIMIT:+--limit "$LIMIT"}
echo "# load after: $(uptime)" >&2
