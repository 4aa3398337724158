#!/usr/bin/env bash
# Create .venv and install Chord with its test tools (CPU torch from the local wheel cache).
# Usage: bash scripts/setup.sh            (idempotent; re-running only re-checks)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
VPIP=".venv/bin/python -m pip"
$VPIP install -q --upgrade pip setuptools wheel pybind11 >/dev/null
# torch first and pinned, so nothing pulls a multi-GB CUDA build on a CPU machine.
$VPIP install -q "torch==2.13.0"
$VPIP install -q -r requirements-dev.txt
# --no-build-isolation: the launcher builds against the pybind11/setuptools installed above.
$VPIP install -q --no-build-isolation -e packages/chord-runtime -e packages/humming-compat \
  -e "packages/chord-pack[fixtures]"
.venv/bin/python -c "import chord_kernels, chord_pack, humming; print('chord installed:', chord_kernels.__version__)"
