#!/usr/bin/env bash
# TP8 T=512 down's 16-row stream-K mma tile at 4 CTAs an SM (16 warps, Humming's count there),
# against main's 3 (indexed-kernels.md v80). ctas.diff (tree .ab/c4) lets CHORD_EXP_MMA_SK_CTAS
# set the indexed stream-K mma launches' CTAs an SM at TT 2 (launch bounds and resident grid).
# ptxas: NT 4 at 4 CTAs an SM fits 128 registers with 24 bytes spilled; NT 2 (128 weight rows)
# with none.
# Build the tree first (carry [".whl", ".ab/c4"]):
#   bash benchmarks/ab_tree.sh HEAD c4 --patch <this folder>/ctas.diff
# Usage: OUT=... bash run.sh   (any GPU, ~4 min: the tree's stream-K GPU tests at 4 CTAs an SM, then
# do_bench on TP8 T=512, each config checked against the reference; read the down rows: NT and
# STAGES tunings reach only the mma tiles, and T=512 gate_up is a wgmma tile)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../../.."
OUT=${OUT:-.out}/c4 TREES=c4
source benchmarks/tree_setup.sh
tree_pytest c4 "kimi_shapes or streamk_split or cuda_graph or aligned" CHORD_EXP_MMA_SK_CTAS=4
C4="$(tree_env c4):CHORD_EXP_MMA_SK_CTAS=4"
SWEEP_BUDGET_S=30 sweep_step tp8 300 --scenarios tp8 --tokens 512 -- \
  auto "c4:$C4" "n2:$(tree_env c4):CHORD_W4A16_TUNING=NT=2" "n2c4:$C4:CHORD_W4A16_TUNING=NT=2" \
  "n2s2c4:$C4:CHORD_W4A16_TUNING=NT=2,STAGES=2" auto2 "c4b:$C4" "n2c4b:$C4:CHORD_W4A16_TUNING=NT=2"
