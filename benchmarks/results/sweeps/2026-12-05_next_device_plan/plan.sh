#!/usr/bin/env bash
# The pending device runs, as steps of at most one device call each (600 s). Results go to
# $OUT/plan and $OUT/plan.tgz (the tool brings back only a few files). Steps that already ran
# (named in the design logs: gv40chk, abgv42, iv51chk, v56chk, ts8chk, whole, ...) are in git
# history: `git show 025f026:benchmarks/results/sweeps/2026-12-05_next_device_plan/plan.sh`;
# where each ran and what it decided is in README.md beside this file.
#
# Before the first call, on the CPU machine, from a clean main (~10 min; .ab may hold older
# builds: rebuild):
#   S=benchmarks/results/sweeps
#   bash benchmarks/ab_tree.sh HEAD gv47 --patch $S/2026-12-05_gv47_decode_16/gv47.diff
#   bash benchmarks/ab_tree.sh HEAD gv47r --patch $S/2026-12-05_gv47_decode_16/gv47r.diff
#   bash benchmarks/ab_tree.sh HEAD gv48 --patch $S/2026-12-05_gv48_few_wave_32/gv48.diff
#   bash benchmarks/ab_tree.sh HEAD gv48s --patch $S/2026-12-05_gv48_few_wave_32/gv48s.diff
#   bash benchmarks/ab_tree.sh HEAD iv59 --patch $S/2026-12-05_iv59_short_k_512/iv59.diff
#   bash benchmarks/ab_tree.sh 07899e8          # main before gv43/gv44, for abdec
#   bash benchmarks/ab_tree.sh 01ac629          # main before gv42, for gv42h200
#   mkdir -p .whl && pip download -q --no-deps -d .whl humming-kernels==0.1.19 packaging   (if .whl is gone)
# then, with carry [".ab", ".whl"] and CHORD_COMMIT=<main's short sha>, one call each, in this order
# (minutes estimated from the runs of 2026-12-04/05; an H200 first if one comes):
#   1. install gv47chk (~5 min): 16-row decode tiles (grouped v47; gv47 on 3 stages, gv47r on 2):
#      the full grouped suite from gv47's tree (~2 min), the decode tests from gv47r's, memcheck
#      and racecheck on the case from each
#   2. abgv47 (~5 min): both against main, EP8 T=20/32, EP16 T=20, EP32 T=8, both clocks
#   3. gv48chk abgv48 (~6 min; two calls if the first ran long): EP32 T=32's 32-row tiles off the
#      512 x 32 tile loop where it makes under 1.4 waves (grouped v48: gv48 the 256 x 32 tile loop,
#      gv48s the 32-row stream-K mma tile)
#   4. feedmid stream tp8dn (~8 min, either GPU): mid batch against its feed-only build, the weight
#      stream alone in the packed layout's runs and in contiguous ones (indexed-kernels.md v60: do
#      the loads alone reach the bytes floor at mid batch, and does the layout cost DRAM?), then
#      TP8 T=2048 down on the 512 x 56 tile loop by override (v59; no tree)
#   5. APPLY="" grpgrid (~5 min, an H200): the grouped grid at main (v43, v44, v46 in; the H200
#      section of docs/performance.md is at 18e989a), APPLY="gv47 gv48" etc. for the winners
#   6. idxgrid (~2 min, an H200), with iv59chk (~4 min) in the same call if tp8dn won at both
#      clocks (then land it: git apply benchmarks/results/sweeps/2026-12-05_iv59_short_k_512/iv59.diff)
#   7. abdec (~4 min, an H200): gv43 + gv44 against 07899e8, the grouped decode of both forms
#   8. gv42h200 (~4 min, an H200): gv42 against its parent on the prefill down where the H200 grid moved
# About 45 minutes in all: a 30-minute session reaches step 5 or 6. Where refused starts have eaten
# the budget (each costs 90-180 s of it), one call can still land a candidate by itself:
# `install tp8dn iv59chk stream` (~8 min: v59's measurement, its checks, the probe; iv59 lands if
# tp8dn wins at both clocks and iv59chk is clean); with ~5 minutes left, `install tp8dn stream`
# (measures only: iv59chk then waits for the next call). The order puts the candidates and the diagnostics (progress and
# the next direction) before the reports and the re-checks.
# A candidate wins if it is faster at both clocks where it changes a kernel and not slower
# elsewhere. After the session: land the winners (git apply; gv47 and gv48 each add a variant to
# the last line of grouped_launch_variants: land one, `git apply -3` the other, keep both), move
# their design-log entries to measured, and copy the grids' marker sections (plan/*/performance.md)
# into docs/performance.md, their JSON into benchmarks/results/, their plots into docs/.
# Reusable steps: grpchk (main's grouped GPU tests and sanitizer), probe, feed, split (the
# diagnostics of indexed-kernels.md v49/v50).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
OUT=${OUT:-.out}; D=$OUT/plan; mkdir -p "$D"
export CHORD_CACHE_DIR=${CHORD_CACHE_DIR:-/tmp/chord-jit} PYTHONUNBUFFERED=1
COMMIT=${CHORD_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
t0=$SECONDS
st() { echo "$1 rc=$2 t=$((SECONDS - t0))" | tee -a "$D/status"; }
# A candidate tree's own tests and sanitizer cases, from inside the tree (ab_tree.sh copies tests/
# and scripts/ into it), on its own chord_kernels and csrc/: in_tree LABEL COMMAND... (TREE_DIR=.
# runs the working tree's, main's, under LABEL)
in_tree() { local t=$1; shift; (cd "${TREE_DIR:-.ab/$t}" && PYTHONPATH="$PWD/packages/chord-runtime" CHORD_CSRC_DIR="$PWD/csrc" "$@"); }
# A candidate tree's checks from inside the tree: its GPU tests (FILES, "-k FILTER" unless empty),
# then memcheck and racecheck on its sanitizer cases (the tree's own script; SANITIZER_ARGS as
# gpu_sanitize_case.py takes them): tree_checks LABEL "FILES" "FILTER" SANITIZER_ARG...
tree_checks() {
  local t=$1 files=$2 filter=$3 tool
  shift 3
  # shellcheck disable=SC2086  # FILES is a list of paths
  in_tree "$t" timeout 360 python3 -m pytest -m gpu $files -q -p no:cacheprovider ${filter:+-k "$filter"} \
    > "$D/${t}_pytest.log" 2>&1
  st "${t}_pytest" $?; tail -3 "$D/${t}_pytest.log"
  for tool in memcheck racecheck; do
    in_tree "$t" timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 python3 scripts/gpu_sanitize_case.py \
      "$@" > "$D/${t}_$tool.log" 2>&1
    st "${t}_$tool" $?; tail -2 "$D/${t}_$tool.log"
  done
}
# An indexed candidate tree's checks: its indexed GPU tests on the families that reach the short-K
# tile loop (auto, and wgmma forced at every block), then the wgmma sanitizer cases (K 192-640:
# every short-K one runs the deferred tile loop): indexed_tree_checks LABEL
indexed_tree_checks() { tree_checks "$1" tests/gpu/test_indexed_gpu.py "auto or wgmma" wgmma; }
# A stream-K candidate tree's checks: the stream-K GPU tests of both families (the Kimi shapes,
# the split tiles and locks, the wide and one-wave decode, then EXTRA_K), then its long-run
# sanitizer cases (mma_sk_long, or the CASES given): streamk_tree_checks LABEL [EXTRA_K] [CASE...]
streamk_tree_checks() {
  local t=$1 extra=${2:-}
  shift $(($# < 2 ? $# : 2))
  tree_checks "$t" "tests/gpu/test_indexed_gpu.py tests/gpu/test_grouped_gpu.py" \
    "(kimi_shapes_random and (auto or mma_sk)) or streamk or stream_k or wide_decode or one_wave$extra" \
    "${@:-mma_sk_long}"
}
# The per-CTA trace of grouped EP8 T=20 gate_up (offsets form), both routings, on the tree
# .ab/LABEL (cta_trace.sh runs from the checkout's root: the tree by absolute paths, as ncu_ab.sh
# does), then its report: trace_tree LABEL
trace_tree() {
  local t=$1 dist
  for dist in uniform skew; do
    PYTHONPATH="$PWD/.ab/$t/packages/chord-runtime" CHORD_CSRC_DIR="$PWD/.ab/$t/csrc" OUT=$D \
      timeout 100 bash benchmarks/cta_trace.sh ep8 20 gate_up $dist "$t" -- --family grouped --paths grouped_contiguous \
      > "$D/${t}trace_$dist.txt" 2>&1
    st "${t}trace_$dist" $?
    python3 -m benchmarks.cta_trace_report "$D/trace_ep8_gate_up_T20_${dist}_$t.json" > "$D/${t}trace_report_$dist.txt" 2>&1
  done
}
# A candidate's ncu ABBA against main at boost then base clock, unless its checks failed earlier
# in this call: candidate_ab LABEL NAME FAMILY "SWEEP ARGS" TREE... (results in $D/ab_NAME_<clock>;
# TREE as ncu_ab.sh takes them, base=. first)
candidate_ab() {
  local t=$1 name=$2 family=$3 args=$4 clock
  shift 4
  if grep -Eq "^${t}_(pytest|memcheck|racecheck) rc=[1-9]" "$D/status" 2>/dev/null; then st "ab${t}_skipped" 1; return; fi
  for clock in none base; do
    AB_CLOCK=$clock AB_INSTALL=0 AB_TIMEOUT=150 bash benchmarks/ncu_ab.sh "$D/ab_${name}_$clock" "$family" "$args" "$@"
    st "ab${name}_$clock" $?
  done
}
# A decode candidate against main (.ab/LABEL), ncu ABBA at boost then base clock, the decode points
# of both families (grouped offsets form EP8/16/32, indexed EP8/TP8; "-" for either tokens list
# leaves that family out), both projections; skipped after a failed LABELchk:
# decode_ab LABEL GROUPED_TOKENS INDEXED_TOKENS
decode_ab() {
  local t=$1 clock
  if grep -Eq "^${t}_(pytest|memcheck|racecheck) rc=[1-9]" "$D/status" 2>/dev/null; then st "ab${t}_skipped" 1; return; fi
  for clock in none base; do
    if [[ $2 != - ]]; then
      AB_CLOCK=$clock AB_INSTALL=0 AB_TIMEOUT=120 bash benchmarks/ncu_ab.sh "$D/ab_${t}_grouped_$clock" grouped \
        "--paths grouped_contiguous --scenarios ep8,ep16,ep32 --tokens $2 --dists uniform,skew" base=. "$t=.ab/$t"
      st "ab${t}_grouped_$clock" $?
    fi
    if [[ $3 != - ]]; then
      AB_CLOCK=$clock AB_INSTALL=0 AB_TIMEOUT=120 bash benchmarks/ncu_ab.sh "$D/ab_${t}_indexed_$clock" indexed \
        "--scenarios ep8,tp8 --tokens $3 --dists uniform,skew" base=. "$t=.ab/$t"
      st "ab${t}_indexed_$clock" $?
    fi
  done
}
# The device copy with the candidates in $APPLY applied (their diffs), for a grid: prints the label.
apply_candidates() {
  local label=$COMMIT c
  for c in ${APPLY:-}; do
    git apply benchmarks/results/sweeps/2026-12-05_*_*/"$c.diff" || { echo "$c.diff does not apply" >&2; return 1; }
    label+=+$c
  done
  echo "$label"
}

for step in "$@"; do
  case $step in
    install)
      for p in chord-runtime humming-compat chord-pack; do
        python3 -m pip install -q --no-build-isolation --no-deps -e "packages/$p" >> "$D/install.log" 2>&1
      done
      for t in .ab/*/; do  # the trees import the launcher from their own chord_kernels
        [[ -d $t/packages/chord-runtime/chord_kernels ]] && cp packages/chord-runtime/chord_kernels/_launcher*.so "$t/packages/chord-runtime/chord_kernels/"
      done
      st install $? ;;
    probe)  # the wgmma consumers' k loop alone, every production tile shape (~1 min, no install needed)
      PROBE_OUT=$D/probe timeout 300 bash benchmarks/probes/run_mainloop.sh > "$D/probe.log" 2>&1
      st probe $?; tail -45 "$D/probe.log" ;;
    feed)  # the feed alone (CHORD_DIAG_FEED_ONLY=1: every mma_stage returns at once) against main at
      # base clock: where the probe's k loop alone is far under a kernel's stage time, this says
      # whether the feed (producer, ring, memory, epilogue) takes the rest
      AB_ENV_feed="CHORD_DIAG_FEED_ONLY=1" AB_INSTALL=0 AB_TIMEOUT=150 bash benchmarks/ncu_ab.sh "$D/ab_feed_indexed" \
        indexed "--scenarios ep8,tp8 --tokens 2048,8192 --dists uniform" base=. feed=.
      st feed_indexed $?
      AB_ENV_feed="CHORD_DIAG_FEED_ONLY=1" AB_INSTALL=0 AB_TIMEOUT=150 bash benchmarks/ncu_ab.sh "$D/ab_feed_grouped" \
        grouped "--paths grouped_masked --scenarios ep16 --tokens 8192 --dists uniform" base=. feed=.
      st feed_grouped $? ;;
    gv47chk)  # gv47 and gv47r (16-row decode tiles from 6 expected rows; on 3 and 2 stages): every
      # grouped GPU test from gv47's tree (~2 min), the decode tests from gv47r's (its ring depth is
      # the only difference), memcheck and racecheck on the case from each (~5 min in all)
      tree_checks gv47 tests/gpu/test_grouped_gpu.py "" "grouped:16-row decode"
      tree_checks gv47r tests/gpu/test_grouped_gpu.py "decode or streamk or split_tail" "grouped:16-row decode" ;;
    abgv47)  # gv47 and gv47r against main: the decode points they change (EP8 T=32, EP16 T=20, EP32
      # T=8) and EP8 T=20 (unchanged: the noise), both forms, projections and routings, both clocks
      candidate_ab gv47 gv47_ep8_ep16 grouped \
        "--paths grouped_contiguous,grouped_masked --scenarios ep8,ep16 --tokens 20,32 --dists uniform,skew" \
        base=. gv47=.ab/gv47 gv47r=.ab/gv47r
      candidate_ab gv47 gv47_ep32 grouped "--paths grouped_contiguous,grouped_masked --scenarios ep32 --tokens 8" \
        base=. gv47=.ab/gv47 gv47r=.ab/gv47r ;;
    gv48chk)  # gv48 and gv48s (the few-wave 32-row tiles, EP32 T=32: the 256 x 32 tile loop, or the
      # 32-row stream-K mma tile): gv48's new kernels under every grouped GPU test, gv48s (a kernel
      # main already runs) under its own; memcheck and racecheck on the case, from each tree
      tree_checks gv48 tests/gpu/test_grouped_gpu.py "" "grouped:few-wave 32-row"
      tree_checks gv48s tests/gpu/test_grouped_gpu.py "few_wave or split_tail" "grouped:few-wave 32-row" ;;
    abgv48)  # gv48 and gv48s against main: EP32 T=32, both forms and projections, both clocks (~2 min)
      candidate_ab gv48 gv48 grouped "--paths grouped_contiguous,grouped_masked --scenarios ep32 --tokens 32" \
        base=. gv48=.ab/gv48 gv48s=.ab/gv48s ;;
    grpchk)  # main's grouped family on the GPU: every grouped GPU test, then memcheck and racecheck
      # on the 2-stage decode ring's cases (offsets and masked forms: grouped v43, v44)
      TREE_DIR=. tree_checks grpchk tests/gpu/test_grouped_gpu.py "" "grouped:2-stage decode ring" ;;
    abdec)  # gv43 + gv44 (the 2-stage decode ring in both grouped forms, block_chunk unsigned) on the
      # H200: main against 07899e8 (.ab/07899e8), ncu ABBA at boost then base clock
      for clock in none base; do
        AB_CLOCK=$clock AB_INSTALL=0 AB_TIMEOUT=150 bash benchmarks/ncu_ab.sh "$D/ab_dec_$clock" grouped \
          "--paths grouped_contiguous,grouped_masked --scenarios ep8,ep16 --tokens 8,20,32 --dists uniform,skew" \
          base=.ab/07899e8 main=.
        st "abdec_$clock" $?
      done ;;
    gv42h200)  # gv42 (landed 0f83030 from an H100 A/B) on the H200: main against its parent 01ac629
      # (.ab/01ac629), ncu ABBA at base clock, the prefill down of both forms where the grid moved
      AB_CLOCK=base AB_INSTALL=0 AB_TIMEOUT=200 bash benchmarks/ncu_ab.sh "$D/ab_gv42h200_base" grouped \
        "--paths grouped_masked,grouped_contiguous --scenarios ep16,ep32 --tokens 2048,8192 --dists uniform --projections down" \
        base=.ab/01ac629 gv42=.
      st gv42h200_base $? ;;
    split)  # the feed split into loads and stores: main, feed only, no output stores, both (the loads
      # alone), ncu at base clock, on the feed-bound points (indexed-kernels.md v49)
      AB_ENV_feed="CHORD_DIAG_FEED_ONLY=1" AB_ENV_nostore="CHORD_DIAG_NO_STORE=1" \
        AB_ENV_loads="CHORD_DIAG_FEED_ONLY=1 CHORD_DIAG_NO_STORE=1" AB_INSTALL=0 AB_TIMEOUT=150 \
        bash benchmarks/ncu_ab.sh "$D/ab_split_indexed" indexed "--scenarios tp8 --tokens 2048,8192 --dists uniform" \
        base=. feed=. nostore=. loads=.
      st split_indexed $?
      AB_ENV_feed="CHORD_DIAG_FEED_ONLY=1" AB_ENV_nostore="CHORD_DIAG_NO_STORE=1" \
        AB_ENV_loads="CHORD_DIAG_FEED_ONLY=1 CHORD_DIAG_NO_STORE=1" AB_INSTALL=0 AB_TIMEOUT=150 \
        bash benchmarks/ncu_ab.sh "$D/ab_split_grouped" grouped \
        "--paths grouped_masked --scenarios ep16 --tokens 8192 --dists uniform" base=. feed=. nostore=. loads=.
      st split_grouped $? ;;
    stream)  # the weight stream alone (benchmarks/probes/weight_stream.cu): the packed layout's 512-byte
      # runs against one contiguous run a stage, and a plain streaming read (~30 s, no install needed)
      PROBE_OUT=$D/stream timeout 200 bash benchmarks/probes/run_probe.sh weight_stream > "$D/stream.log" 2>&1
      st stream $?; tail -25 "$D/stream.log" ;;
    feedmid)  # mid batch: main against its feed-only build (CHORD_DIAG_FEED_ONLY=1: no dequantization, no
      # MMA; wrong results, timing only), ncu ABBA at boost clock (do_bench's), indexed EP8 T=64/128
      # and grouped contiguous EP16/EP32 T=64/128, both projections (~4 min; indexed-kernels.md v60)
      AB_ENV_feed="CHORD_DIAG_FEED_ONLY=1" AB_CLOCK=none AB_INSTALL=0 AB_TIMEOUT=120 bash benchmarks/ncu_ab.sh \
        "$D/ab_feedmid_indexed" indexed "--scenarios ep8 --tokens 64,128 --dists uniform" base=. feed=.
      st feedmid_indexed $?
      AB_ENV_feed="CHORD_DIAG_FEED_ONLY=1" AB_CLOCK=none AB_INSTALL=0 AB_TIMEOUT=120 bash benchmarks/ncu_ab.sh \
        "$D/ab_feedmid_grouped" grouped "--paths grouped_contiguous --scenarios ep16,ep32 --tokens 64,128 --dists uniform" \
        base=. feed=.
      st feedmid_grouped $? ;;
    iv59chk)  # iv59 (short-K blocks of 33-56 rows on the 512-row tile loop, indexed-kernels.md v59):
      # indexed_tree_checks (its new graph-replay test among them, the wgmma sanitizer cases with its two)
      indexed_tree_checks iv59 ;;
    tp8dn)  # TP8 T=2048 down (56-row blocks, K=256) on the 512 x 56 tile loop, 4 consumer warpgroups
      # (gate_up's kernel there), by override, against main's 256 x 56 stream-K tile: both routings,
      # ncu ABBA at boost then base clock (~3 min; indexed-kernels.md v59)
      for clock in none base; do
        AB_ENV_cwg4="CHORD_W4A16_INDEXED_KERNEL=wgmma CHORD_W4A16_TUNING=CWG=4" AB_CLOCK=$clock AB_INSTALL=0 \
          AB_TIMEOUT=120 bash benchmarks/ncu_ab.sh "$D/ab_tp8dn_$clock" indexed \
          "--scenarios tp8 --tokens 2048 --dists uniform,skew --projections down" base=. cwg4=.
        st "tp8dn_$clock" $?
      done ;;
    idxgrid)
      label=$(apply_candidates) || { st idxgrid_apply 1; exit 1; }
      OUT=$D/idxgrid CHORD_COMMIT=$label CHORD_BUDGET_S=120 HUMMING_BUDGET_S=170 HUMMING_PREWARM_JOBS=12 \
        timeout -k 5 540 bash benchmarks/run.sh --family indexed > "$D/idxgrid.log" 2>&1
      st idxgrid $?; tail -30 "$D/idxgrid.log" ;;
    grpgrid)
      label=$(apply_candidates) || { st grpgrid_apply 1; exit 1; }
      OUT=$D/grpgrid CHORD_COMMIT=$label HUMMING_PREWARM_JOBS=12 \
        timeout -k 5 540 bash benchmarks/run.sh --family grouped > "$D/grpgrid.log" 2>&1
      st "grpgrid $label" $?; tail -40 "$D/grpgrid.log" ;;
    *) echo "unknown step $step (install gv47chk abgv47 gv48chk abgv48 grpgrid idxgrid tp8dn iv59chk feedmid stream abdec gv42h200 grpchk probe feed split)" >&2 ;;
  esac
done
tar czf "$OUT/plan.tgz" -C "$OUT" plan
