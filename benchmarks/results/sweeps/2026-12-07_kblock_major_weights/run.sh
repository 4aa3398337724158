#!/usr/bin/env bash
# Does the packed weight's DRAM order cost the wgmma tile loop? (indexed-kernels.md v76) do_bench
# sweeps of main against main reading a K-block-major copy of qweight (sitecustomize.py here:
# same kernel, same shared-memory bytes, only the tensor map's strides and the copy differ), ABAB,
# on TP8 and EP8 prefill; then ncu (basic set + DRAM/L2 metrics) of the copy on TP8 T=2048 gate_up
# beside gate_up_profile.sh's profile of main. Usage: OUT=... bash run.sh (any GPU, ~6 min)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../../.."
OUT=${OUT:-.out}/kmaj; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt"
python3 -m pip install -q --no-build-isolation --no-deps -e packages/chord-runtime > "$OUT/install.log" 2>&1
KM="kmaj:PYTHONPATH=$HERE:CHORD_EXP_KBLOCK_MAJOR=1"
KM2="kmaj2:PYTHONPATH=$HERE:CHORD_EXP_KBLOCK_MAJOR=1"
OUT=$OUT/tp8 SWEEP_BUDGET_S=50 timeout 240 bash benchmarks/sweep.sh --scenarios tp8 --tokens 2048,8192 \
  -- auto "$KM" auto2 "$KM2" > "$OUT/tp8.log" 2>&1
OUT=$OUT/ep8 SWEEP_BUDGET_S=50 timeout 240 bash benchmarks/sweep.sh --scenarios ep8 --tokens 512,2048,8192 \
  -- auto "$KM" auto2 "$KM2" > "$OUT/ep8.log" 2>&1
export NCU_SET=basic
export NCU_METRICS=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum,sm__cycles_active.avg,sm__cycles_active.max
PYTHONPATH=$HERE CHORD_EXP_KBLOCK_MAJOR=1 timeout 150 bash benchmarks/ncu_point.sh chord tp8 2048 gate_up uniform kmaj > "$OUT/ncu.log" 2>&1
timeout 150 bash benchmarks/ncu_point.sh chord tp8 2048 gate_up uniform main >> "$OUT/ncu.log" 2>&1
rm -f "$OUT"/*.ncu-rep "$OUT"/*.sass.csv
