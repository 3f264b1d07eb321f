#!/usr/bin/env bash
# The Python tests, against the wheel a user installs: python/build-wheel.sh builds the abi3
# manylinux wheel (one Rust build), then a fresh virtual environment whose PATH holds no cargo
# or rustc installs it (binary only: nothing is compiled) with the pinned test requirements,
# and runs pytest there. The S3 tests start s3s-fs (tests/run.sh installs it; conftest.py finds
# it in cargo's bin directory without PATH).
set -euo pipefail
cd "$(dirname "$0")/../.."
python=$(command -v "${PYTHON:-python3}")
venv=target/py/test-venv
wheel=$(bash python/build-wheel.sh | tail -n 1)
# PATH without the directories that hold cargo or rustc.
clean=""
IFS=: read -ra dirs <<< "$PATH"
for d in "${dirs[@]}"; do
  if [ -z "$d" ] || [ -x "$d/cargo" ] || [ -x "$d/rustc" ]; then continue; fi
  clean="${clean:+$clean:}$d"
done
rm -rf "$venv"
"$python" -m venv "$venv"
export PATH="$PWD/$venv/bin:$clean"
unset CARGO RUSTC RUSTUP_TOOLCHAIN
if command -v cargo > /dev/null || command -v rustc > /dev/null; then
  echo "python/tests/run.sh: cargo or rustc is still on PATH ($PATH)" >&2
  exit 1
fi
pip install --quiet --disable-pip-version-check -r python/requirements-test.txt
pip install --quiet --disable-pip-version-check --no-deps --only-binary=:all: "$wheel"
echo "python/tests/run.sh: installed $(basename "$wheel") with no cargo on PATH" >&2
cd python/tests
exec python -m pytest -q -p no:cacheprovider "$@"
