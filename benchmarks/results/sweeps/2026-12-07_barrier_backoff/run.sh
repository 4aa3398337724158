#!/usr/bin/env bash
# The ring barriers' wait with a back-off, against main, in one do_bench sweep (indexed-kernels.md
# v77). v76 found the waits' retries (a TRYWAIT and a BRA each) at 8 % of the issued instructions
# at TP8 T=2048 gate_up, where Humming's waits back off with NANOSLEEP.
#   ns:   backoff_nanosleep.diff, `nanosleep.u32 32` after each failed try_wait;
#   hint: backoff_suspend_hint.diff, try_wait with a 10 ms suspend-time hint (the thread sleeps in
#         the barrier until it completes or the hint runs out, so the loop rarely turns).
# Build the trees first (carry [".whl", ".ab/ns", ".ab/hint"]):
#   bash benchmarks/ab_tree.sh HEAD ns --patch <this folder>/backoff_nanosleep.diff
#   bash benchmarks/ab_tree.sh HEAD hint --patch <this folder>/backoff_suspend_hint.diff
# Usage: OUT=... bash run.sh   (any GPU, ~5 min: main, ns, hint, then again, on TP8 T=512/2048 and
# EP8 T=128/2048; each config's benchmark checks its results against the reference)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../../.."
OUT=${OUT:-.out}/backoff; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt"
python3 -m pip install -q --no-build-isolation --no-deps -e packages/chord-runtime > "$OUT/install.log" 2>&1
tree() { echo "PYTHONPATH=.ab/$1/packages/chord-runtime:CHORD_CSRC_DIR=.ab/$1/csrc"; }
for t in ns hint; do  # the fast call's module, built by the install above (the trees hold sources only)
  cp packages/chord-runtime/chord_kernels/_launcher*.so ".ab/$t/packages/chord-runtime/chord_kernels/" 2>> "$OUT/install.log"
done
CONFIGS=(auto "ns:$(tree ns)" "hint:$(tree hint)" auto2 "ns2:$(tree ns)" "hint2:$(tree hint)")
sweep() {  # sweep NAME TIMEOUT SCENARIO TOKENS
  OUT=$OUT/$1 SWEEP_BUDGET_S=40 timeout "$2" bash benchmarks/sweep.sh --scenarios "$3" --tokens "$4" \
    -- "${CONFIGS[@]}" > "$OUT/$1.log" 2>&1
  echo "$1 rc=$?" >> "$OUT/status"
}
sweep tp8 240 tp8 512,2048
sweep ep8 240 ep8 128,2048
