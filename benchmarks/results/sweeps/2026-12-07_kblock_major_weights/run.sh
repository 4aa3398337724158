#!/usr/bin/env bash
# Two re-orderings of the packed weight under the wgmma tile loop (indexed-kernels.md v76), each
# against main in one do_bench sweep (configs main, kmaj, sp, then again), TP8 and EP8 prefill:
#   kmaj: main's kernels reading a K-block-major copy of qweight (sitecustomize.py here: only the
#         tensor map's strides and the copy differ; the kernel and its shared-memory bytes do not);
#   sp:   the scale_pairs.diff tree (.ab/sp, carried) reading a scale copy with rows r and r + 8
#         side by side, one 4-byte load for both (196 instead of 200 instructions a k loop stage).
# Then ncu (basic set + DRAM/L2 metrics) of kmaj and main on TP8 T=2048 gate_up.
# Build the tree first: bash benchmarks/ab_tree.sh HEAD sp --patch <this folder>/scale_pairs.diff &&
#   cp <this folder>/sitecustomize.py .ab/sp/packages/chord-runtime/
# Usage: OUT=... bash run.sh (any GPU, carry [".whl", ".ab/sp"]; ~6 min)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../../.."
OUT=${OUT:-.out}/kmaj; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt"
python3 -m pip install -q --no-build-isolation --no-deps -e packages/chord-runtime > "$OUT/install.log" 2>&1
cp packages/chord-runtime/chord_kernels/_launcher*.so .ab/sp/packages/chord-runtime/chord_kernels/ 2>> "$OUT/install.log"
ls .ab/sp/packages/chord-runtime/sitecustomize.py >> "$OUT/install.log" 2>&1
SP="PYTHONPATH=.ab/sp/packages/chord-runtime:CHORD_CSRC_DIR=.ab/sp/csrc:CHORD_EXP_SCALE_PAIRS=1"
KM="PYTHONPATH=$HERE:CHORD_EXP_KBLOCK_MAJOR=1"
CONFIGS=(auto "kmaj:$KM" "sp:$SP" auto2 "kmaj2:$KM" "sp2:$SP")
OUT=$OUT/tp8 SWEEP_BUDGET_S=40 timeout 200 bash benchmarks/sweep.sh --scenarios tp8 --tokens 2048,8192 \
  -- "${CONFIGS[@]}" > "$OUT/tp8.log" 2>&1
OUT=$OUT/ep8 SWEEP_BUDGET_S=40 timeout 220 bash benchmarks/sweep.sh --scenarios ep8 --tokens 512,2048,8192 \
  -- "${CONFIGS[@]}" > "$OUT/ep8.log" 2>&1
export NCU_SET=basic
export NCU_METRICS=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum,sm__cycles_active.avg,sm__cycles_active.max
PYTHONPATH=$HERE CHORD_EXP_KBLOCK_MAJOR=1 timeout 100 bash benchmarks/ncu_point.sh chord tp8 2048 gate_up uniform kmaj > "$OUT/ncu.log" 2>&1
timeout 100 bash benchmarks/ncu_point.sh chord tp8 2048 gate_up uniform main >> "$OUT/ncu.log" 2>&1
rm -f "$OUT"/*.ncu-rep "$OUT"/*.sass.csv
