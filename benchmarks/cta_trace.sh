#!/usr/bin/env bash
# Per-CTA timing of Chord's kernels at one benchmark point (chord_kernels.cta_trace): which SM
# each CTA ran on and how long it took, to see whether a launch's spread is its work or its SMs.
#
#   bash benchmarks/cta_trace.sh SCN T PROJ [DIST] [LABEL] [-- extra bench args]
#   e.g. bash benchmarks/cta_trace.sh ep8 20 gate_up skew -- --family grouped --paths grouped_contiguous
#
# Runs the benchmark's point with CHORD_CTA_TRACE=1 (the kernels' diagnostic build: their own
# cubins, the normal ones untouched): after the checked call, one more call behind do_bench's L2
# flush is traced (common.trace_ctas). Writes $OUT/trace_<scn>_<proj>_T<T>_<dist>[_<label>].{json,log};
# the JSON's point records carry `cta_trace` (per CTA: sm, cycles, start/end ns) and
# `cta_trace_summary`, and the log the printed summary. No GPU timing of the point is kept
# (--rep-ms 1): the stamps cost a few instructions a CTA, but the build is not the timed one.
set -uo pipefail
cd "$(dirname "$0")/.."
SCN=$1 T=$2 PROJ=$3; shift 3
DIST=uniform; LABEL=""
[[ $# -gt 0 && $1 != -- ]] && { DIST=$1; shift; }
[[ $# -gt 0 && $1 != -- ]] && { LABEL=_$1; shift; }
[[ $# -gt 0 && $1 == -- ]] && shift
SIDE=chord
source benchmarks/point_setup.sh
NAME=trace_${SCN}_${PROJ}_T${T}_${DIST}${LABEL}

CHORD_CTA_TRACE=1 python3 -m benchmarks.bench_chord --routing-dir "$ROUTING" --scenarios "$SCN" --tokens "$T" \
  --dists "$DIST" --projections "$PROJ" --warmup-ms 1 --rep-ms 1 --budget-s 400 --out "$OUT/$NAME.json" "$@" \
  > "$OUT/$NAME.log" 2>&1
echo "$NAME: exit=$?"
grep -E "CTAs on|CTA cycles|slowest|fastest|check=|ERROR|Error" "$OUT/$NAME.log" | head -20
