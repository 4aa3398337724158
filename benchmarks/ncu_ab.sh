#!/usr/bin/env bash
# The A/B of kernel trees under Nsight Compute (benchmarks/README.md, "Comparing two trees") as one
# command for the lent H200: installs this checkout, writes the routing, compiles each tree's
# kernels in parallel, runs bench_chord under ncu at locked base clock once per tree and again in
# reverse order (A B C, then C2 B2 A2), and writes each candidate's table against the first tree.
#
#   bash benchmarks/ncu_ab.sh DIR FAMILY "POINTS" LABEL=TREE [LABEL=TREE ...]
#     DIR     logs, JSON, ncu CSVs, status and tables (DIR/table_FAMILY_LABEL.md); tar it into $OUT
#     FAMILY  grouped | indexed
#     POINTS  bench_chord's point arguments, e.g.
#             "--paths grouped_masked --scenarios ep8,ep16 --tokens 128,2048 --dists uniform,skew"
#     TREE    "." for this checkout (its installed packages), else a folder holding csrc/ and
#             packages/chord-runtime/chord_kernels/ (benchmarks/ab_tree.sh REV, or a patched copy)
#   e.g. bash benchmarks/ncu_ab.sh /tmp/ab grouped "--scenarios ep8 --tokens 128" old=.ab/db2a594 new=.
#
# Environment: ROUTING_DIR (default DIR/routing), ROUTING_SEED (0), AB_TIMEOUT (seconds a run, 100),
# AB_CLOCK (ncu --clock-control: base, the default, or none for the clocks do_bench sees),
# AB_INSTALL=0 to skip installing this checkout (a warm machine that has it), AB_ENV_<LABEL> a
# tree's own overrides for its precompile and runs (space-separated VAR=VALUE words), e.g.
#   AB_ENV_cwg1="CHORD_W4A16_INDEXED_KERNEL=wgmma_sk CHORD_W4A16_TUNING=CWG=1" ... old=. cwg1=.
set -uo pipefail
cd "$(dirname "$0")/.."
DIR=${1:?usage: ncu_ab.sh DIR FAMILY POINTS LABEL=TREE...}; FAMILY=${2:?family}; POINTS=${3:?points}; shift 3
[[ $# -ge 2 ]] || { echo "ncu_ab.sh: two trees at least (LABEL=TREE)" >&2; exit 2; }
case "$FAMILY" in grouped|indexed) ;; *) echo "ncu_ab.sh: family grouped or indexed, not $FAMILY" >&2; exit 2 ;; esac
mkdir -p "$DIR"
LABELS=(); TREES=(); ENVS=()
same() { diff -rq -x __pycache__ -x '*.so' "$1/$2" "$2" > /dev/null 2>&1; }  # tree $1 has this checkout's $2
for tree in "$@"; do
  label=${tree%%=*}; path=${tree#*=}
  [[ -n $label && $label != "$tree" ]] || { echo "ncu_ab.sh: trees are LABEL=PATH, not $tree" >&2; exit 2; }
  [[ $label =~ ^[A-Za-z0-9_]+$ ]] || { echo "ncu_ab.sh: a label is letters, digits and _, not $label" >&2; exit 2; }
  LABELS+=("$label"); TREES+=("$path")
  extra=AB_ENV_$label; extra=${!extra:-}
  if [[ $path == . ]]; then ENVS+=("$extra")
  else
    [[ -d $path/csrc/common && -d $path/packages/chord-runtime/chord_kernels ]] \
      || { echo "ncu_ab.sh: $path has no csrc/ or chord_kernels/" >&2; exit 2; }
    # A tree with this checkout's code measures nothing (ab_tree.sh once left its patches out silently).
    if [[ -z $extra ]] && same "$path" csrc && same "$path" packages/chord-runtime/chord_kernels; then
      echo "ncu_ab.sh: $label=$path is this checkout's code (and no AB_ENV_$label): nothing to compare" >&2; exit 2
    fi
    ENVS+=("PYTHONPATH=$path/packages/chord-runtime CHORD_CSRC_DIR=$path/csrc $extra")
  fi
done
status() { echo "$* $(date +%s)" >> "$DIR/status"; }

if [[ ${AB_INSTALL:-1} != 0 ]]; then
  for p in chord-runtime humming-compat chord-pack; do
    python3 -m pip install -q --no-build-isolation --no-deps -e "packages/$p" >> "$DIR/install.log" 2>&1
  done
fi
# A tree copied from git has no compiled launcher: it takes this checkout's (same sources).
for path in "${TREES[@]}"; do
  [[ $path == . ]] || cp packages/chord-runtime/chord_kernels/_launcher*.so "$path/packages/chord-runtime/chord_kernels/"
done
export CHORD_CACHE_DIR=${CHORD_CACHE_DIR:-/tmp/chord-jit} PYTHONUNBUFFERED=1

# The routing of exactly the points asked for (make_routing takes the grid arguments only).
ROUTING=${ROUTING_DIR:-$DIR/routing}
GRID=(); words=($POINTS)
for j in "${!words[@]}"; do
  case "${words[$j]}" in --scenarios|--tokens|--dists) GRID+=("${words[$j]}" "${words[$((j + 1))]}") ;; esac
done
python3 -m benchmarks.make_routing --dir "$ROUTING" "${GRID[@]}" --seed "${ROUTING_SEED:-0}" > "$DIR/routing.log" 2>&1
status "routing $?"

for i in "${!LABELS[@]}"; do
  env ${ENVS[$i]} python3 -m benchmarks.precompile_points --family "$FAMILY" --routing-dir "$ROUTING" $POINTS -j 16 \
    >> "$DIR/precompile.log" 2>&1 &
done
wait
status "precompiled"

run() {  # run LABEL INDEX
  env ${ENVS[$2]} BENCH_NVTX=1 timeout "${AB_TIMEOUT:-100}" ncu --nvtx --nvtx-include "bench_point/" \
    --clock-control "${AB_CLOCK:-base}" --metrics gpu__time_duration.sum --csv --print-units base \
    --log-file "$DIR/ncu_${FAMILY}_$1.csv" python3 -m benchmarks.bench_chord --family "$FAMILY" \
    --routing-dir "$ROUTING" $POINTS --warmup-ms 1 --rep-ms 1 --budget-s 300 --out "$DIR/${FAMILY}_$1.json" \
    > "$DIR/bench_${FAMILY}_$1.log" 2>&1
  status "run $1 $?"
}
for i in "${!LABELS[@]}"; do run "${LABELS[$i]}" "$i"; done
for ((i = ${#LABELS[@]} - 1; i >= 0; i--)); do run "${LABELS[$i]}2" "$i"; done

base=${LABELS[0]}
for cand in "${LABELS[@]:1}"; do
  python3 -m benchmarks.ncu_ab_table "$DIR" "$FAMILY" "$base" "$cand" "${cand}2" "${base}2" \
    --base "$base,${base}2" --cand "$cand,${cand}2" > "$DIR/table_${FAMILY}_$cand.md" 2>&1
  status "table $cand $?"
done
