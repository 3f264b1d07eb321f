#!/usr/bin/env bash
# Builds the Python package as a wheel a user installs without Rust: one abi3 wheel (CPython
# 3.11 and later) for x86_64 Linux, linked by zig against glibc 2.28 and checked by maturin's
# manylinux audit (manylinux_2_28: RHEL 8, Debian 10, Ubuntu 18.10 and later), into
# target/wheels/. maturin and zig come from PyPI (python/requirements-build.txt) into
# target/py/build-venv; the Rust build goes to target/wheel/ (apart from `cargo build`'s, whose C
# compiler differs), so a second run rebuilds only what changed.
# Usage: bash python/build-wheel.sh [extra maturin args]   (prints the wheel's path last)
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
build=target/py/build-venv
want=$(sed -n 's/^maturin==//p' python/requirements-build.txt)
if ! "$build/bin/maturin" --version 2>/dev/null | grep -qx "maturin $want" \
    || ! "$build/bin/python" -c "import ziglang" 2>/dev/null; then
  echo "build-wheel.sh: installing maturin $want and zig into $build" >&2
  rm -rf "$build"
  "$python" -m venv "$build"
  "$build/bin/pip" install --quiet --disable-pip-version-check -r python/requirements-build.txt
fi
if ! command -v nasm >/dev/null; then
  echo "build-wheel.sh: warning: no nasm on PATH: the JPEG decoder is built without its SIMD" \
    "code (slower decoding); install it (Debian: apt-get install nasm) for a wheel" \
    "to ship" >&2
fi
rm -rf target/wheels
echo "build-wheel.sh: building the extension (release, cargo's progress below; about 6 minutes of" \
  "CPU the first time)" >&2
start=$SECONDS
# Overflow checks on (an integer wrap panics, and the binding turns the panic into
# InternalError), as in CI's `cargo test --release`.
PATH="$PWD/$build/bin:$PATH" CARGO_TARGET_DIR=target/wheel CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS=true \
  "$build/bin/maturin" build --release --zig --compatibility manylinux_2_28 \
  --manifest-path python/Cargo.toml --out target/wheels "$@" >&2
wheel=$(ls target/wheels/zrecord-*.whl)
echo "build-wheel.sh: built in $((SECONDS - start)) s" >&2
echo "$wheel"
