#!/usr/bin/env bash
# TP8 T=512 down's 2-tile mma stage with its FP32 products scaled, against main (indexed-kernels.md
# v79). product_scales.diff (tree .ab/ps) gives MmaTile PRODUCT_SCALES: at TT 2 the stage takes
# decode's kScaleProducts and kOffsetCodes (no HADD2 or HMUL2 in the dequantization; FFMAs on the
# partials instead). CHORD_EXP_PRODUCT_SCALES=1 turns it on in that tree's dispatch.
# ptxas fits it only at 2 CTAs an SM (at 3 it spills 158 bytes), so the ring goes to 3 stages
# (CHORD_W4A16_TUNING=STAGES=3, which the projection's 2 CTAs an SM follow from), and main runs the
# same ring as the occupancy control (m3). The tuning also reaches TP8 T=512 gate_up's tile (8 -> 3
# stages): read the down rows only.
# Build the tree first (carry [".whl", ".ab/ps"]):
#   bash benchmarks/ab_tree.sh HEAD ps --patch <this folder>/product_scales.diff
# Usage: OUT=... bash run.sh   (any GPU, ~3 min: the tree's indexed GPU tests with the switch on,
# then do_bench main, ps3, m3, main, ps3, m3 on TP8 T=512, each config checked against the reference)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../../.."
OUT=${OUT:-.out}/ps; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt"
python3 -m pip install -q --no-build-isolation --no-deps -e packages/chord-runtime > "$OUT/install.log" 2>&1
cp packages/chord-runtime/chord_kernels/_launcher*.so .ab/ps/packages/chord-runtime/chord_kernels/ 2>> "$OUT/install.log"
export CHORD_CACHE_DIR=${CHORD_CACHE_DIR:-/tmp/chord-jit}
(cd .ab/ps && CHORD_EXP_PRODUCT_SCALES=1 PYTHONPATH="$PWD/packages/chord-runtime" CHORD_CSRC_DIR="$PWD/csrc" \
  timeout 200 python3 -m pytest -m gpu tests/gpu/test_indexed_gpu.py -q -p no:cacheprovider \
  -k "kimi_shapes or bit_exact or streamk_split or cuda_graph or aligned or non_kimi" > "$OUT/pytest.log" 2>&1)
echo "pytest rc=$?" >> "$OUT/status"; tail -3 "$OUT/pytest.log"
PS="PYTHONPATH=.ab/ps/packages/chord-runtime:CHORD_CSRC_DIR=.ab/ps/csrc:CHORD_EXP_PRODUCT_SCALES=1"
S3="CHORD_W4A16_TUNING=STAGES=3"
OUT=$OUT/tp8 SWEEP_BUDGET_S=40 timeout 240 bash benchmarks/sweep.sh --scenarios tp8 --tokens 512 -- \
  auto "ps3:$PS:$S3" "m3:$S3" auto2 "ps3b:$PS:$S3" "m3b:$S3" > "$OUT/tp8.log" 2>&1
echo "tp8 rc=$?" >> "$OUT/status"
