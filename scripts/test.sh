#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the CPU test suite; extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m pytest "$@"
