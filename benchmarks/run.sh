#!/usr/bin/env bash
# Chord vs humming-kernels 0.1.19, side by side on one GPU: the one command for the lent H200
# (python3 3.12, torch 2.11, triton 3.6, nvcc 13.0 on the image; no network).
#
#   bash benchmarks/run.sh [--family indexed|grouped|all] [--quick] [--only chord|humming]
#                          [--scenarios ep8,tp8] [-- extra bench args]
#
# --family F   indexed (default: Chord indexed vs Humming indexed, EP8 + TP8), grouped (Chord
#              contiguous_offsets / masked vs Humming grouped_contiguous / grouped_masked, EP8 +
#              EP16 + EP32), or all (indexed, then grouped). Each family writes its own side
#              files, results JSON, doc section and plots.
# --quick      T in 1, 20, 128, 2048 (uniform) + skew at 128, instead of the full grid
# --scenarios  comma list; default ep8,tp8 (indexed) and ep8,ep16,ep32 (grouped; TP entries are
#              dropped for the grouped family, which is EP-only)
# --only SIDE  run one side; the report then reuses the other side's JSON from an earlier run on
#              this (warm) machine if there is one ($BENCH_WORK/results)
# -- ARGS      passed to both bench_chord and bench_humming (e.g. -- --tokens 128 --rep-ms 100,
#              or -- --levels 15 for Kimi-like codes without -8, which changes Humming's kernel)
#
# Needs the carried wheels in .whl/ (humming_kernels-0.1.19 + packaging; .whl/ is git-ignored,
# so the device call must carry it). Logs, JSON, markdown and plots are copied to $OUT.
# Environment: CHORD_COMMIT (commit label when .git is absent), CHORD_BUDGET_S / HUMMING_BUDGET_S
# (wall budget of each indexed side, default 140 / 180 s), HUMMING_PREWARM_JOBS (Humming's tables
# compiled this many at a time before the timed sides, default 6), CHORD_GROUPED_BUDGET_S /
# HUMMING_GROUPED_BUDGET_S (grouped sides, default 120 / 300 s), BENCH_WORK (default
# /tmp/chord-bench), HUMMING_SITE (default /tmp/humming_site).
set -uo pipefail
cd "$(dirname "$0")/.."

QUICK=""; ONLY=""; SCENARIOS=""; FAMILY=indexed; EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --family) FAMILY="$2"; shift ;;
    --quick) QUICK=--quick ;;
    --only) ONLY="$2"; shift ;;
    --scenarios) SCENARIOS="$2"; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
case "$ONLY" in ""|chord|humming) ;; *) echo "--only takes chord or humming" >&2; exit 2 ;; esac
case "$FAMILY" in indexed) FAMILIES=(indexed) ;; grouped) FAMILIES=(grouped) ;; all) FAMILIES=(indexed grouped) ;;
  *) echo "--family takes indexed, grouped or all" >&2; exit 2 ;; esac
IDX_SCN=${SCENARIOS:-ep8,tp8}
GRP_SCN=$(tr ',' '\n' <<< "${SCENARIOS:-ep8,ep16,ep32}" | grep -v '^tp' | paste -sd, -)
ROUTE_SCN=""
for fam in "${FAMILIES[@]}"; do
  if [[ $fam == indexed ]]; then ROUTE_SCN+=",$IDX_SCN"; else ROUTE_SCN+=",$GRP_SCN"; fi
done
ROUTE_SCN=$(tr ',' '\n' <<< "$ROUTE_SCN" | grep -v '^$' | sort -u | paste -sd, -)
[[ " ${FAMILIES[*]} " != *" grouped "* || -n "$GRP_SCN" ]] || { echo "no EP scenario for the grouped family" >&2; exit 2; }

OUT=${OUT:-.out/bench}; mkdir -p "$OUT"
WORK=${BENCH_WORK:-/tmp/chord-bench}; ROUTING=$WORK/routing; RES=$WORK/results; mkdir -p "$RES"
HSITE=${HUMMING_SITE:-/tmp/humming_site}
export CHORD_CACHE_DIR=${CHORD_CACHE_DIR:-/tmp/chord-jit} PYTHONUNBUFFERED=1
if [[ -n "${CHORD_COMMIT:-}" ]]; then COMMIT=$CHORD_COMMIT
elif COMMIT=$(git rev-parse --short HEAD 2>/dev/null); then
  [[ -z "$(git status --porcelain 2>/dev/null)" ]] || COMMIT="$COMMIT-dirty"  # untracked files count
else COMMIT=unknown; fi
CHORD_BUDGET_S=${CHORD_BUDGET_S:-140}; HUMMING_BUDGET_S=${HUMMING_BUDGET_S:-180}
CHORD_GROUPED_BUDGET_S=${CHORD_GROUPED_BUDGET_S:-120}; HUMMING_GROUPED_BUDGET_S=${HUMMING_GROUPED_BUDGET_S:-300}
log() { echo "== $(date +%T) (+$((SECONDS))s) $*"; }

log "GPU"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,driver_version,power.limit --format=csv \
  | tee "$OUT/gpu.txt"

if [[ "$ONLY" != humming ]]; then
  log "install chord-runtime (editable, no deps)"
  python3 -m pip install -q --no-build-isolation --no-deps -e packages/chord-runtime 2>&1 | tail -3
  log "precompile Chord's default profiles"
  python3 -m chord_kernels.cli precompile -q 2>&1 | tail -3 \
    || echo "precompile failed; kernels will compile on first use (outside the timing)"
fi
if [[ "$ONLY" != chord ]]; then
  log "install humming-kernels into $HSITE (its own folder, never next to Chord's humming-compat)"
  ls .whl/*.whl >/dev/null 2>&1 || { echo "no wheels in .whl/ (carry .whl)" >&2; exit 3; }
  python3 -m pip install -q --no-index --no-deps --upgrade --target "$HSITE" .whl/*.whl 2>&1 | tail -3
fi

log "ceilings"
python3 -m benchmarks.ceilings --out "$OUT/ceilings.json" 2>&1 | tee "$OUT/ceilings.log"
[[ -s "$OUT/ceilings.json" ]] || echo "WARNING: no ceilings measured; the report will fail (rerun it by hand)"

log "routing ($ROUTE_SCN)"
python3 -m benchmarks.make_routing --dir "$ROUTING" --scenarios "$ROUTE_SCN" $QUICK > "$OUT/routing.log" 2>&1 \
  || { cat "$OUT/routing.log"; exit 4; }
cp "$ROUTING/manifest.json" "$OUT/routing_manifest.json"

# run_family FAMILY SCENARIOS SUFFIX CHORD_BUDGET HUMMING_BUDGET: both sides, then the report
run_family() {
  local fam=$1 scn=$2 sfx=$3 cbudget=$4 hbudget=$5
  local args=(--family "$fam" --routing-dir "$ROUTING" --scenarios "$scn" $QUICK "${EXTRA[@]}")
  if [[ "$ONLY" != chord ]]; then
    # Humming's tables compiled ahead, HUMMING_PREWARM_JOBS groups at a time (bench_humming.py
    # --prewarm: its JIT was 284 s of the grouped run, one table after another), before anything is
    # timed; best effort, the timed side compiles whatever is missing.
    log "Humming $fam tables, ${HUMMING_PREWARM_JOBS:-6} at a time (prewarm)"
    PYTHONPATH="$HSITE" HUMMING_SITE="$HSITE" timeout -k 10 400 \
      python3 -m benchmarks.bench_humming "${args[@]}" --prewarm "${HUMMING_PREWARM_JOBS:-6}" \
      > "$OUT/humming_prewarm$sfx.log" 2>&1
    echo "humming prewarm exit=$?"; grep -E "prewarm|FAILED" "$OUT/humming_prewarm$sfx.log" | tail -14
  fi
  if [[ "$ONLY" != humming ]]; then
    log "Chord $fam (budget ${cbudget}s)"
    timeout -k 10 $((cbudget + 60)) python3 -m benchmarks.bench_chord "${args[@]}" \
      --out "$RES/chord$sfx.json" --budget-s "$cbudget" > "$OUT/chord$sfx.log" 2>&1
    echo "bench_chord exit=$?"; grep -E "ERROR|check=(fail|nan)|Error|done in" "$OUT/chord$sfx.log" | head -20
    cp "$RES/chord$sfx.json" "$OUT/" 2>/dev/null  # kept even if the Humming side is cut short
  fi
  if [[ "$ONLY" != chord ]]; then
    log "Humming $fam (separate process, PYTHONPATH=$HSITE; budget ${hbudget}s)"
    PYTHONPATH="$HSITE" HUMMING_SITE="$HSITE" timeout -k 10 $((hbudget + 60)) \
      python3 -m benchmarks.bench_humming "${args[@]}" \
      --out "$RES/humming$sfx.json" --budget-s "$hbudget" > "$OUT/humming$sfx.log" 2>&1
    echo "bench_humming exit=$?"; grep -E "ERROR|check=(fail|nan)|Error|done in" "$OUT/humming$sfx.log" | head -20
  fi
  cp "$RES"/*.json "$OUT/" 2>/dev/null

  log "report $fam (commit $COMMIT)"
  python3 -m benchmarks.report --family "$fam" --ceilings "$OUT/ceilings.json" --chord "$RES/chord$sfx.json" \
    --humming "$RES/humming$sfx.json" --commit "$COMMIT" --copy-to "$OUT" > "$OUT/report$sfx.md" 2>"$OUT/report$sfx.err"
  echo "report exit=$?"; tail -5 "$OUT/report$sfx.err"
  sed '/<details>/q' "$OUT/report$sfx.md" | grep -E "^Targets met|^\| " | cut -c1-240 | head -40
}

for fam in "${FAMILIES[@]}"; do
  if [[ $fam == indexed ]]; then run_family indexed "$IDX_SCN" "" "$CHORD_BUDGET_S" "$HUMMING_BUDGET_S"
  else run_family grouped "$GRP_SCN" _grouped "$CHORD_GROUPED_BUDGET_S" "$HUMMING_GROUPED_BUDGET_S"; fi
done
log "done; outputs in $OUT"
