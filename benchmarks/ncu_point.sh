#!/usr/bin/env bash
# Nsight Compute on one benchmark point, Chord or Humming, with the benchmark's own routing,
# weights and call (the NaN-poisoned checked call, wrapped in an NVTX range by runner.py when
# BENCH_NVTX=1; warm-up and do_bench launches stay outside the profile).
#
#   bash benchmarks/ncu_point.sh SIDE SCN T PROJ [DIST] [LABEL] [-- extra bench args]
#     SIDE chord|humming   SCN ep8|tp8|ep16|ep32   PROJ gate_up|down   DIST uniform|skew
#   e.g. bash benchmarks/ncu_point.sh humming ep8 128 gate_up
#        CHORD_W4A16_INDEXED_KERNEL=wgmma_sk bash benchmarks/ncu_point.sh chord ep8 128 gate_up uniform wgsk
#
# Writes $OUT/ncu_<side>_<scn>_<proj>_T<T>_<dist>[_<label>].{ncu-rep,txt,raw.csv,sass.csv} (full section set,
# clocks not locked, so times match the benchmark's). NCU_SET overrides the section set; NCU_METRICS
# (comma list) adds metrics, e.g. sm__cycles_active.max,sm__cycles_active.min for the SMs' balance.
# The grouped family: put `-- --family grouped --paths grouped_contiguous` after the arguments.
# Needs the wheels in .whl/ for the Humming side (carry .whl). Through the device tool, tar $OUT at
# the end (each point leaves 5 files; the tool brings back only a few files per call).
set -uo pipefail
cd "$(dirname "$0")/.."
SIDE=$1 SCN=$2 T=$3 PROJ=$4; shift 4
DIST=uniform; LABEL=""
[[ $# -gt 0 && $1 != -- ]] && { DIST=$1; shift; }
[[ $# -gt 0 && $1 != -- ]] && { LABEL=_$1; shift; }
[[ $# -gt 0 && $1 == -- ]] && shift
EXTRA=("$@")
case "$SIDE" in chord|humming) ;; *) echo "SIDE is chord or humming" >&2; exit 2 ;; esac

source benchmarks/point_setup.sh
export BENCH_NVTX=1
NAME=ncu_${SIDE}_${SCN}_${PROJ}_T${T}_${DIST}${LABEL}

args=(--routing-dir "$ROUTING" --scenarios "$SCN" --tokens "$T" --dists "$DIST" --projections "$PROJ"
      --warmup-ms 1 --rep-ms 1 --budget-s 400 --out "$WORK/$NAME.json" "${EXTRA[@]}")
env_py=(python3)
[[ $SIDE == humming ]] && env_py=(env PYTHONPATH="$HSITE" HUMMING_SITE="$HSITE" python3)
extra_metrics=(); [[ -n ${NCU_METRICS:-} ]] && extra_metrics=(--metrics "$NCU_METRICS")
ncu --nvtx --nvtx-include "bench_point/" --clock-control none --set "${NCU_SET:-full}" "${extra_metrics[@]}" \
    --import-source no -f -o "$OUT/$NAME" "${env_py[@]}" -m "benchmarks.bench_$SIDE" "${args[@]}" \
    > "$OUT/$NAME.log" 2>&1
echo "$NAME: ncu exit=$?"
grep -E "check=|ERROR|Error" "$OUT/$NAME.log" | head -5
ncu --import "$OUT/$NAME.ncu-rep" --page details > "$OUT/$NAME.txt" 2>&1
ncu --import "$OUT/$NAME.ncu-rep" --page raw --csv > "$OUT/$NAME.raw.csv" 2>&1  # every metric (stall reasons, opcodes)
# per-instruction executed counts and stall samples (the full set's source counters): by source line
# on the CPU machine with scripts/ncu_lines.py
ncu --import "$OUT/$NAME.ncu-rep" --page source --csv --print-source sass > "$OUT/$NAME.sass.csv" 2>&1
grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|L2 Hit Rate|Registers Per|Achieved Occupancy|Issue Slots Busy|Executed Ipc A" \
  "$OUT/$NAME.txt" | head -30
