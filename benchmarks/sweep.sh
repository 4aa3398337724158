#!/usr/bin/env bash
# Chord-only config sweep on the GPU machine (design experiments, not the side-by-side report):
# each CONFIG is "label" or "label:VAR=value[:VAR=value...]" with Chord's env overrides
# (CHORD_W4A16_INDEXED_KERNEL, CHORD_W4A16_TUNING, CHORD_W4A16_BLOCK_M). The routing files are
# made once and shared by every config; one JSON per config goes to $OUT, then a table of
# µs per (scenario, T, projection) with one column per config.
#
#   bash benchmarks/sweep.sh --tokens 512,2048 [--scenarios ep8,tp8] [--dists uniform] -- \
#       auto "mma64:CHORD_W4A16_INDEXED_KERNEL=mma:CHORD_W4A16_BLOCK_M=64"
#   bash benchmarks/sweep.sh --family grouped --scenarios ep8,ep16 --tokens 128 -- new "$(bash benchmarks/ab_tree.sh main old)"
#
# ROUTING_SEED=N draws the routing with another seed (make_routing --seed; default 0, the
# side-by-side's), to tell a rule's gain from one routing draw's luck.
set -uo pipefail
cd "$(dirname "$0")/.."
TOKENS=""; SCENARIOS="ep8,tp8"; DISTS="uniform"; FAMILY=indexed
while [[ $# -gt 0 ]]; do
  case "$1" in
    --tokens) TOKENS="$2"; shift ;;
    --scenarios) SCENARIOS="$2"; shift ;;
    --dists) DISTS="$2"; shift ;;
    --family) FAMILY="$2"; shift ;;  # indexed or grouped (both of its paths)
    --) shift; break ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
[[ $# -gt 0 ]] || { echo "no configs given (after --)" >&2; exit 2; }
OUT=${OUT:-.out/sweep}; mkdir -p "$OUT"
ROUTING=${BENCH_WORK:-/tmp/chord-bench}/sweep-routing
export CHORD_CACHE_DIR=${CHORD_CACHE_DIR:-/tmp/chord-jit} PYTHONUNBUFFERED=1
POINTS=(--scenarios "$SCENARIOS" --dists "$DISTS"); [[ -n "$TOKENS" ]] && POINTS+=(--tokens "$TOKENS")
python3 -m benchmarks.make_routing --dir "$ROUTING" "${POINTS[@]}" ${ROUTING_SEED:+--seed "$ROUTING_SEED"} > "$OUT/sweep_routing.log" 2>&1 \
  || { cat "$OUT/sweep_routing.log"; exit 4; }
FILTER=(--family "$FAMILY" "${POINTS[@]}")
JSONS=()
for config in "$@"; do
  IFS=: read -r -a parts <<< "$config"
  label=${parts[0]}
  echo "== sweep $label (${parts[*]:1})"
  env "${parts[@]:1}" python3 -c "import chord_kernels.jit.paths as p, chord_kernels as c; print('   chord_kernels:', c.__file__, 'csrc:', p.csrc_dir())"
  env "${parts[@]:1}" python3 -m benchmarks.bench_chord --routing-dir "$ROUTING" "${FILTER[@]}" \
    --out "$OUT/sweep_$label.json" --budget-s "${SWEEP_BUDGET_S:-120}" > "$OUT/sweep_$label.log" 2>&1
  echo "   exit=$?"; grep -E "ERROR|check=(fail|nan)|Error" "$OUT/sweep_$label.log" | head -5
  JSONS+=("$OUT/sweep_$label.json")
done
python3 -m benchmarks.sweep_table "${JSONS[@]}" | tee "$OUT/sweep_table.md"
