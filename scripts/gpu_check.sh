#!/usr/bin/env bash
# On the lent H200 (python3 3.12, torch 2.11, no network): install Chord, run the GPU tests and
# compute-sanitizer on small cases. Logs, a summary and one archive of both go to $OUT (or ./.out).
#
#   bash scripts/gpu_check.sh [PYTEST_TARGET ...]     default: tests (every GPU test, several minutes)
#   e.g. bash scripts/gpu_check.sh tests/gpu/test_grouped_gpu.py
#
# Environment: SANITIZE (the cases of scripts/gpu_sanitize_case.py, e.g. "grouped", or
# "grouped:wide" for the grouped cases whose label holds "wide"; default all, "none" to skip),
# PYTEST_K (a -k expression), PRECOMPILE=0 to skip the profiles' precompile.
# The device tool brings back only a few files from $OUT: read $OUT/gpu_check.tgz.
set -uo pipefail
OUT=${OUT:-.out}; mkdir -p "$OUT/gpu_check"
L=$OUT/gpu_check
export CHORD_CACHE_DIR=${CHORD_CACHE_DIR:-/tmp/chord-jit} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv | tee "$L/gpu.txt"
for pkg in chord-runtime humming-compat chord-pack; do
  python3 -m pip install -q --no-build-isolation --no-deps -e packages/$pkg 2>&1 | tail -2
done
[[ ${PRECOMPILE:-1} == 0 ]] || python3 -m chord_kernels.cli precompile -q
targets=("$@"); [[ ${#targets[@]} -gt 0 ]] || targets=(tests)
kexpr=(); [[ -n ${PYTEST_K:-} ]] && kexpr=(-k "$PYTEST_K")
python3 -m pytest -m gpu "${targets[@]}" "${kexpr[@]}" -q -p no:cacheprovider > "$L/pytest_gpu.log" 2>&1
echo "pytest -m gpu ${targets[*]} ${kexpr[*]}: exit=$?" | tee "$L/summary"
tail -3 "$L/pytest_gpu.log" | tee -a "$L/summary"
# racecheck reports hazards on WgmmaTile's producer/consumer ring: it does not model cp.async
# completion through cp.async.mbarrier.arrive (even a producer thread's own rewrite of a slot is
# flagged); the protocol is argued in docs/design/indexed-kernels.md (v8). Any hazard elsewhere
# (MmaTile, simple, grouped mma) is real.
if [[ ${SANITIZE:-} != none ]]; then
  for tool in memcheck racecheck; do
    compute-sanitizer --tool $tool --error-exitcode 9 python3 scripts/gpu_sanitize_case.py ${SANITIZE:-} \
      > "$L/sanitizer_$tool.log" 2>&1
    echo "compute-sanitizer $tool ${SANITIZE:-all}: exit=$?" | tee -a "$L/summary"
    tail -2 "$L/sanitizer_$tool.log" | tee -a "$L/summary"
  done
fi
tar czf "$OUT/gpu_check.tgz" -C "$OUT" gpu_check
