#!/usr/bin/env bash
# On the lent H200 (python3 3.12, torch 2.11, no network): install Chord, run the GPU tests and
# compute-sanitizer on a small case. Logs go to $OUT (or ./.out). Usage: bash scripts/gpu_check.sh
set -uo pipefail
OUT=${OUT:-.out}; mkdir -p "$OUT"
export CHORD_CACHE_DIR=${CHORD_CACHE_DIR:-/tmp/chord-jit} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv | tee "$OUT/gpu.txt"
for pkg in chord-runtime humming-compat chord-pack; do
  python3 -m pip install -q --no-build-isolation --no-deps -e packages/$pkg 2>&1 | tail -2
done
python3 -m chord_kernels.cli precompile -q
python3 -m pytest -m gpu tests -q -p no:cacheprovider 2>&1 | tee "$OUT/pytest_gpu.log" | tail -25
# racecheck reports hazards on WgmmaTile's producer/consumer ring: it does not model cp.async
# completion through cp.async.mbarrier.arrive (even a producer thread's own rewrite of a slot is
# flagged); the protocol is argued in docs/design/indexed-kernels.md (v8). Any hazard elsewhere
# (MmaTile, simple, grouped mma) is real.
for tool in memcheck racecheck; do
  compute-sanitizer --tool $tool --error-exitcode 9 python3 scripts/gpu_sanitize_case.py \
    > "$OUT/sanitizer_$tool.log" 2>&1; echo "compute-sanitizer $tool exit=$?"; tail -3 "$OUT/sanitizer_$tool.log"
done
