#!/usr/bin/env bash
# The numpy baseline's Python: a virtual environment under target/bench-venv holding a pinned
# numpy from PyPI (needs python3 with its venv module, and PyPI). Run by benches/run-all.sh,
# never by CI (.ci/run) or tests/run.sh: the tests need no Python package.
# Prints the environment's python.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=target/bench-venv
numpy=2.4.6
py=$venv/bin/python
if ! "$py" -c "import numpy, sys; sys.exit(numpy.__version__ != '$numpy')" 2>/dev/null; then
  python3 -m venv "$venv" >&2
  "$py" -m pip install --quiet --disable-pip-version-check "numpy==$numpy" >&2
fi
echo "$py"
