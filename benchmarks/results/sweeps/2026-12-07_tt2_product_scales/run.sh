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
OUT=${OUT:-.out}/ps TREES=ps
source benchmarks/tree_setup.sh
tree_pytest ps "kimi_shapes or bit_exact or streamk_split or cuda_graph or aligned or non_kimi" CHORD_EXP_PRODUCT_SCALES=1
PS="$(tree_env ps):CHORD_EXP_PRODUCT_SCALES=1"
S3="CHORD_W4A16_TUNING=STAGES=3"
sweep_step tp8 240 --scenarios tp8 --tokens 512 -- auto "ps3:$PS:$S3" "m3:$S3" auto2 "ps3b:$PS:$S3" "m3b:$S3"
