#!/usr/bin/env bash
# The Python benchmarks' environment: target/py/bench-venv with zrecord's wheel (built from
# python/ in release) and pinned peers: numpy, pylance (Lance), grain + array-record
# (ArrayRecord), pyarrow. torch is left out by default: its PyPI wheel pulls ~3 GB of CUDA
# packages (INSTALL_TORCH=1 adds it); INSTALL_JAX=1 adds jax[cpu] (examples/python/train_jax.py);
# INSTALL_VISION=1 adds the vision benchmark's peers (benches/python/vision.py): torch, Pillow,
# SPDL and LitData.
# Never run by CI or the tests. Prints the venv's python.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=target/py/bench-venv
py=$venv/bin/python
if [ ! -x "$py" ]; then
  python3 -m venv "$venv" >&2
fi
"$py" -m pip install --quiet --disable-pip-version-check \
  numpy==2.3.5 pyarrow==26.0.1 pylance==14.0.2 grain==0.2.18 array-record==0.8.6 >&2
if [ "${INSTALL_JAX:-0}" = 1 ]; then
  "$py" -m pip install --quiet --disable-pip-version-check "jax[cpu]==0.10.2" >&2
fi
if [ "${INSTALL_TORCH:-0}" = 1 ]; then
  "$py" -m pip install --quiet --disable-pip-version-check torch==2.15.0 >&2
fi
if [ "${INSTALL_VISION:-0}" = 1 ]; then
  "$py" -m pip install --quiet --disable-pip-version-check \
    torch==2.15.0 pillow==13.0.0 spdl==0.8.0 litdata==0.2.76 >&2
fi
"$py" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps ./python >&2
echo "$py"
