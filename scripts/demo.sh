#!/usr/bin/env bash
# The main job on the bundled default: convert the tiny Kimi checkpoint into all three layouts,
# verify them, and on an SM90 GPU run the kernels against the reference with a latency table.
#   bash scripts/demo.sh                               (creates .venv via scripts/setup.sh)
#   CHORD_USE_SYSTEM_PYTHON=1 bash scripts/demo.sh     (offline GPU image that already has torch)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${CHORD_USE_SYSTEM_PYTHON:-0}" = 1 ]; then
  PY=${PYTHON:-python3}
  for pkg in chord-runtime humming-compat chord-pack; do
    "$PY" -m pip install -q --no-build-isolation --no-deps -e "packages/$pkg"
  done
else
  bash scripts/setup.sh
  PY=.venv/bin/python
fi
exec "$PY" scripts/demo.py "$@"
