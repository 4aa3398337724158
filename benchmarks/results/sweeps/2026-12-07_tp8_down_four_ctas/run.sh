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
OUT=${OUT:-.out}/c4; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt"
python3 -m pip install -q --no-build-isolation --no-deps -e packages/chord-runtime > "$OUT/install.log" 2>&1
cp packages/chord-runtime/chord_kernels/_launcher*.so .ab/c4/packages/chord-runtime/chord_kernels/ 2>> "$OUT/install.log"
export CHORD_CACHE_DIR=${CHORD_CACHE_DIR:-/tmp/chord-jit}
(cd .ab/c4 && CHORD_EXP_MMA_SK_CTAS=4 PYTHONPATH="$PWD/packages/chord-runtime" CHORD_CSRC_DIR="$PWD/csrc" \
  timeout 150 python3 -m pytest -m gpu tests/gpu/test_indexed_gpu.py -q -p no:cacheprovider \
  -k "kimi_shapes or streamk_split or cuda_graph or aligned" > "$OUT/pytest.log" 2>&1)
echo "pytest rc=$?" >> "$OUT/status"; tail -3 "$OUT/pytest.log"
T="PYTHONPATH=.ab/c4/packages/chord-runtime:CHORD_CSRC_DIR=.ab/c4/csrc"
C4="$T:CHORD_EXP_MMA_SK_CTAS=4"
OUT=$OUT/tp8 SWEEP_BUDGET_S=30 timeout 300 bash benchmarks/sweep.sh --scenarios tp8 --tokens 512 -- \
  auto "c4:$C4" "n2:$T:CHORD_W4A16_TUNING=NT=2" "n2c4:$C4:CHORD_W4A16_TUNING=NT=2" \
  "n2s2c4:$C4:CHORD_W4A16_TUNING=NT=2,STAGES=2" auto2 "c4b:$C4" "n2c4b:$C4:CHORD_W4A16_TUNING=NT=2" \
  > "$OUT/tp8.log" 2>&1
echo "tp8 rc=$?" >> "$OUT/status"
