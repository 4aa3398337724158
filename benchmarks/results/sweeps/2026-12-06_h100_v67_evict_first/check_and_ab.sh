#!/usr/bin/env bash
# v67 on the device (indexed-kernels.md v67): main's evict-first weight loads, checked and timed.
# Run from the checkout's root with OUT set, after plan.sh's install; the tree before it is
# .ab/c3e1f77 (bash benchmarks/ab_tree.sh c3e1f77, carried). Each step appends to $OUT/plan/v67/status.
set -uo pipefail
D=$OUT/plan/v67; mkdir -p "$D"; export CHORD_CACHE_DIR=${CHORD_CACHE_DIR:-/tmp/chord-jit} PYTHONUNBUFFERED=1
st() { echo "$1 rc=$2 t=$SECONDS" | tee -a "$D/status"; }
B=.ab/c3e1f77; BASE="PYTHONPATH=$PWD/$B/packages/chord-runtime:CHORD_CSRC_DIR=$PWD/$B/csrc"
# 1. the decode kernels' GPU tests (both families; the evict-first path runs on every small weight)
timeout 240 python3 -m pytest -m gpu tests/gpu/test_indexed_gpu.py tests/gpu/test_grouped_gpu.py -q -p no:cacheprovider \
  -k "(kimi_shapes_random and (auto or mma_sk)) or streamk or stream_k or wide_decode or one_wave or sparse_decode or graph" \
  > "$D/pytest.log" 2>&1; st pytest $?; tail -2 "$D/pytest.log"
# 2. memcheck and racecheck on the mma stream-K cases and the grouped decode cases
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 python3 scripts/gpu_sanitize_case.py mma_sk mma_sk2 \
    grouped:decode grouped:K384 > "$D/$tool.log" 2>&1; st $tool $?; tail -1 "$D/$tool.log"
done
# 3. do_bench (zero flush, the grid's timing), ABBA: the tree before against main
OUT=$D/idx SWEEP_BUDGET_S=60 timeout 200 bash benchmarks/sweep.sh --family indexed --scenarios ep8,tp8 --tokens 1,8,20,128 -- \
  "base:$BASE" new new2 "base2:$BASE" > "$D/idx.log" 2>&1; st idx_sweep $?
OUT=$D/grp SWEEP_BUDGET_S=60 timeout 260 bash benchmarks/sweep.sh --family grouped --scenarios ep8,ep16,ep32 --tokens 1,8,20 -- \
  "base:$BASE" new new2 "base2:$BASE" > "$D/grp.log" 2>&1; st grp_sweep $?
