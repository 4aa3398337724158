#!/usr/bin/env bash
# Re-orderings of what the wgmma tiles' TMA reads, each against main in one do_bench sweep
# (indexed-kernels.md v76; sitecustomize.py here swaps the tensor maps in the benchmark process).
#
# `run.sh` (~5 min): configs main, kmaj, sp, then again, on TP8 T=2048/8192 and EP8 T=512/2048/8192;
# then ncu (basic set + DRAM/L2 metrics) of kmaj and main on TP8 T=2048 gate_up.
#   kmaj: main's kernels reading a K-block-major copy of qweight (only the tensor map's strides and
#         the copy differ; the kernel and its shared-memory bytes do not);
#   sp:   the scale_pairs.diff tree (.ab/sp, carried) reading a scale copy with rows r and r + 8
#         side by side, one 4-byte load for both (196 instead of 200 instructions a k loop stage).
#   Build the tree first: bash benchmarks/ab_tree.sh HEAD sp --patch <this folder>/scale_pairs.diff
#   && cp <this folder>/sitecustomize.py .ab/sp/packages/chord-runtime/   (carry [".whl", ".ab/sp"])
# `run.sh promo` (~2.5 min; ran as run_promo.sh): main, pn, kmaj, main, pn on TP8 T=2048/8192 and
# main, pn twice on EP8 T=2048, then ncu of pn on TP8 T=2048 gate_up.
#   pn:   every tensor map without the 256-byte L2 promotion.
# Usage: OUT=... bash run.sh [promo]   (any GPU)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../../.."
STEP=${1:-main}
OUT=${OUT:-.out}/$([[ $STEP == promo ]] && echo promo || echo kmaj); mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt"
python3 -m pip install -q --no-build-isolation --no-deps -e packages/chord-runtime > "$OUT/install.log" 2>&1
KM="PYTHONPATH=$HERE:CHORD_EXP_KBLOCK_MAJOR=1"
PN="PYTHONPATH=$HERE:CHORD_EXP_L2_PROMOTION_NONE=1"
SP="PYTHONPATH=.ab/sp/packages/chord-runtime:CHORD_CSRC_DIR=.ab/sp/csrc:CHORD_EXP_SCALE_PAIRS=1"
sweep() {  # sweep NAME TIMEOUT SCENARIO TOKENS CONFIG...
  local name=$1 limit=$2 scn=$3 tokens=$4; shift 4
  OUT=$OUT/$name SWEEP_BUDGET_S=40 timeout "$limit" bash benchmarks/sweep.sh --scenarios "$scn" --tokens "$tokens" \
    -- "$@" > "$OUT/$name.log" 2>&1
}
export NCU_SET=basic
export NCU_METRICS=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum,sm__cycles_active.avg,sm__cycles_active.max
ncu_gate_up() {  # ncu_gate_up LABEL [ENV...]: TP8 T=2048 gate_up under ncu
  local label=$1; shift
  env "$@" timeout 100 bash benchmarks/ncu_point.sh chord tp8 2048 gate_up uniform "$label" >> "$OUT/ncu.log" 2>&1
}
if [[ $STEP == promo ]]; then
  sweep tp8 150 tp8 2048,8192 auto "pn:$PN" "kmaj:$KM" auto2 "pn2:$PN"
  sweep ep8 90 ep8 2048 auto "pn:$PN" auto2 "pn2:$PN"
  ncu_gate_up pn PYTHONPATH="$HERE" CHORD_EXP_L2_PROMOTION_NONE=1
else
  cp packages/chord-runtime/chord_kernels/_launcher*.so .ab/sp/packages/chord-runtime/chord_kernels/ 2>> "$OUT/install.log"
  ls .ab/sp/packages/chord-runtime/sitecustomize.py >> "$OUT/install.log" 2>&1
  CONFIGS=(auto "kmaj:$KM" "sp:$SP" auto2 "kmaj2:$KM" "sp2:$SP")
  sweep tp8 200 tp8 2048,8192 "${CONFIGS[@]}"
  sweep ep8 220 ep8 512,2048,8192 "${CONFIGS[@]}"
  ncu_gate_up kmaj PYTHONPATH="$HERE" CHORD_EXP_KBLOCK_MAJOR=1
  ncu_gate_up main
fi
rm -f "$OUT"/*.ncu-rep "$OUT"/*.sass.csv
