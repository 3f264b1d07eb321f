#!/usr/bin/env bash
# The Python tests: builds the wheel with `pip install ./python` (maturin, from PyPI, pinned in
# python/pyproject.toml) into a fresh virtual environment, then runs pytest. The Rust build
# goes to the workspace's target/ (release profile), so a second run rebuilds nothing.
# The S3 tests start s3s-fs (tests/run.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/../.."
python=${PYTHON:-python3}
venv=target/py/test-venv
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r python/requirements-test.txt
start=$SECONDS
# Overflow checks on in the tested wheel (an integer wrap panics, and the binding turns the panic
# into InternalError), the same profile setting as CI's `cargo test --release` step: the two
# release builds share their dependencies instead of compiling them twice.
CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS=true \
  "$venv/bin/pip" install --quiet --disable-pip-version-check ./python
echo "python/tests/run.sh: wheel built and installed in $((SECONDS - start)) s" >&2
cd python/tests
exec "../../$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
