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
# Usage: OUT=... bash run.sh   (any GPU, ~4 min: main, ns, hint, then again, on TP8 T=512/2048 and
# EP8 T=128/2048; each config's benchmark checks its results against the reference)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../../.."
OUT=${OUT:-.out}/backoff TREES="ns hint"
source benchmarks/tree_setup.sh
CONFIGS=(auto "ns:$(tree_env ns)" "hint:$(tree_env hint)" auto2 "ns2:$(tree_env ns)" "hint2:$(tree_env hint)")
sweep_step tp8 240 --scenarios tp8 --tokens 512,2048 -- "${CONFIGS[@]}"
sweep_step ep8 240 --scenarios ep8 --tokens 128,2048 -- "${CONFIGS[@]}"
