#!/usr/bin/env bash
# Follow-up of run.sh (indexed-kernels.md v76): the tensor maps without the 256-byte L2 promotion
# (sitecustomize.py, CHORD_EXP_L2_PROMOTION_NONE=1) against main, ABAB, TP8 T=2048/8192 and EP8
# T=2048; kmaj once more at TP8 T=8192 (its gate_up was the noisy point); ncu of the promotion-less
# TP8 T=2048 gate_up (L2 sectors read: 38.7 M on main against Humming's 33.1 M). ~3 min, any GPU.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../../.."
OUT=${OUT:-.out}/promo; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt"
python3 -m pip install -q --no-build-isolation --no-deps -e packages/chord-runtime > "$OUT/install.log" 2>&1
PN="PYTHONPATH=$HERE:CHORD_EXP_L2_PROMOTION_NONE=1"
KM="PYTHONPATH=$HERE:CHORD_EXP_KBLOCK_MAJOR=1"
OUT=$OUT/tp8 SWEEP_BUDGET_S=40 timeout 150 bash benchmarks/sweep.sh --scenarios tp8 --tokens 2048,8192 \
  -- auto "pn:$PN" "kmaj:$KM" auto2 "pn2:$PN" > "$OUT/tp8.log" 2>&1
OUT=$OUT/ep8 SWEEP_BUDGET_S=40 timeout 90 bash benchmarks/sweep.sh --scenarios ep8 --tokens 2048 \
  -- auto "pn:$PN" auto2 "pn2:$PN" > "$OUT/ep8.log" 2>&1
export NCU_SET=basic
export NCU_METRICS=dram__bytes_read.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum,sm__cycles_active.avg
PYTHONPATH=$HERE CHORD_EXP_L2_PROMOTION_NONE=1 timeout 80 bash benchmarks/ncu_point.sh chord tp8 2048 gate_up uniform pn > "$OUT/ncu.log" 2>&1
rm -f "$OUT"/*.ncu-rep "$OUT"/*.sass.csv
