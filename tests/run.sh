#!/usr/bin/env bash
# The test suite, on any machine with the Rust toolchain and Python 3.11+: installs the two S3
# servers the object-store tests start (s3s-fs and Garage, from crates.io, once: about 3 and 14
# minutes to build on 2 cores) when they are missing, then runs `cargo test` with any arguments
# given and, without arguments, `cargo test` of the library and of the test machinery crate
# (testing/, zrecord-testing: one build, the features are the same) and then the Python
# package's tests (python/tests/run.sh: the abi3 manylinux wheel python/build-wheel.sh builds,
# installed into a fresh venv with no cargo on PATH, then pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
S3S_FS_VERSION=0.14.1
GARAGE_VERSION=2.5.0
bin=${CARGO_HOME:-$HOME/.cargo}/bin
have() { command -v "$1" >/dev/null || [ -x "$bin/$1" ]; }
if ! have s3s-fs; then
  echo "tests/run.sh: installing s3s-fs $S3S_FS_VERSION (once)" >&2
  cargo install --locked "s3s-fs@$S3S_FS_VERSION" --features binary
fi
if ! have garage; then
  echo "tests/run.sh: installing garage $GARAGE_VERSION (once)" >&2
  cargo install --locked "garage@$GARAGE_VERSION"
fi
if [ $# -eq 0 ]; then
  cargo test -p zrecord -p zrecord-testing
  bash python/tests/run.sh
else
  cargo test "$@"
fi
