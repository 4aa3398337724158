#!/usr/bin/env bash
# indexed-kernels.md v83: the short-K decode tile holding a 16-row tile over pairs of an expert's
# 8-row blocks (IndexedMmaDecodeDual, dispatch.paired_decode), on the working tree (no .ab tree:
# main's default, PAIRED_DEFAULT 0, launches the 8-row tile; CHORD_W4A16_TUNING=PAIRED=1 takes the
# dual kernel by its route rule, PAIRED=2 wherever it fits).
# Usage: OUT=... bash run.sh   (either GPU, ~5 min, carry [".whl"] not needed):
#   1. the indexed GPU tests (the paired ones, the stream-K and graph ones, the Kimi shapes), 4 workers
#   2. do_bench on TP8 T=64/128/256 uniform and skewed: main (the 8-row tile), the rule (PAIRED=1),
#      the dual everywhere (PAIRED=2), then in reverse; read the down rows (the gate_up is untouched).
#      If the rule's downs gain under skew and hold level at uniform routing: PAIRED_DEFAULT = 1.
#   3. memcheck and racecheck on the sanitizer's "paired" cases
# QUICK=1 for a lease short of time (~3.5 min): the sweep's first half and memcheck only.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../../.."
OUT=${OUT:-.out}/paired TREES=
source benchmarks/tree_setup.sh
timeout 200 python3 -m pytest -m gpu tests/gpu/test_indexed_gpu.py tests/gpu/test_fast_call_gpu.py -n 4 -q \
  -p no:cacheprovider -k "paired or streamk or graph or kimi or fast" > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?" >> "$OUT/status"; tail -3 "$OUT/pytest.log"
configs=(main rule:CHORD_W4A16_TUNING=PAIRED=1 force:CHORD_W4A16_TUNING=PAIRED=2)  # then in reverse
if [[ ${QUICK:-0} == 1 ]]; then configs+=(main2); else configs+=("${configs[2]/force/force2}" "${configs[1]/rule/rule2}" main2); fi
SWEEP_BUDGET_S=30 sweep_step tp8 240 --scenarios tp8 --tokens 64,128,256 --dists uniform,skew -- "${configs[@]}"
tail -30 "$OUT/tp8.log"
for tool in memcheck $([[ ${QUICK:-0} == 1 ]] || echo racecheck); do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 python3 scripts/gpu_sanitize_case.py paired \
    > "$OUT/$tool.log" 2>&1
  echo "$tool rc=$?" >> "$OUT/status"; tail -2 "$OUT/$tool.log"
done
cat "$OUT/status"
