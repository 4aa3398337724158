#!/usr/bin/env bash
# The device runs prepared on 2026-12-05 (no machine was lent that session after one refused
# start), as steps of at most one device call each (600 s). Results go to $OUT/plan and
# $OUT/plan.tgz (the tool brings back only a few files). Before the first call, on the CPU
# machine, from a clean main:
#
#   S=benchmarks/results/sweeps
#   bash benchmarks/ab_tree.sh HEAD gv40 --patch $S/2026-12-05_gv40_shallow_decode/gv40.diff
#   bash benchmarks/ab_tree.sh c119a58          # main before v47, for the v47 A/B at boost clock
#   bash benchmarks/ab_tree.sh HEAD iv53 --patch $S/2026-12-05_iv53_claim_ahead/iv53.diff
#   mkdir -p .whl && pip download -q --no-deps -d .whl humming-kernels==0.1.19 packaging   (if .whl is gone)
#
# then, with carry [".ab", ".whl"] and CHORD_COMMIT=<main's short sha>, one call each (the minutes
# are estimates from the runs of 2026-12-04/05). Done on 2026-12-05 (an H100, after 5 refused
# starts): swchk absw probe feed (sw rejected; probe and feed in indexed-kernels.md v49), and a
# partial abgv42 that crashed on the masked 256 x 128 tile. Done in the fifth session: gv42chk
# abgv42 (gv42 landed at 0f83030: do not APPLY it), split, grpgrid and idxgrid on an H100. Done in
# the sixth (an H100): iv51chk abiv51 (iv51 landed for 96+ row blocks), dectune cwg4gu (rejected),
# gv40chk abgv40 (rejected), v47boost. Done in the seventh (an H100): iv53chk abiv53 (not landed),
# dectrace, idxgrid (H100), v54chk v54trace abv54 (v54, .ab/v54 from ../2026-12-05_v54_chunked_tail/v54.diff:
# rejected). Done in the eighth (an H200): grpgrid and idxgrid at 18e989a (docs/performance.md),
# v56chk abv56 (v56 rejected as it was), whole (no whole-tile rule on the H200). Done in the ninth
# (an H100, no H200 came): v57chk abv57 (v57 rejected), ts8chk abts8 (ts8 rejected), gv43chk abgv43
# (gv43 landed at 357e5ac), grpgrid on the H100 at 357e5ac, gv44chk abgv44 and a last A/B of gv44's
# final form (gv44 landed with block_chunk unsigned; grouped-kernels.md v44). Done in the tenth (an
# H100, then an H200 for the last three calls): grpchk (clean), grpgrid and idxgrid on the H100 at
# 91ebece (docs/performance.md), gv45chk abgv45 (gv45 rejected), gv46chk abgv46 (gv46 landed for
# K >= 4096, grouped v46), v46chk and the landed v46's ncu ABBA on the H200 (by hand: ncu_ab.sh
# base=.ab/a713b35 v46=.). The eleventh session got no machine (two refused starts, then loans
# paused): it prepared gv48 (grouped-kernels.md v48). The twelfth got none either (loans paused from
# the start): it added tp8dn (indexed-kernels.md v59). Left, in this order, on an H200:
#   bash benchmarks/ab_tree.sh 07899e8          # main before gv43/gv44, for abdec
#   bash benchmarks/ab_tree.sh 01ac629          # main before gv42, for gv42h200
#   bash benchmarks/ab_tree.sh HEAD gv47 --patch benchmarks/results/sweeps/2026-12-05_gv47_decode_16/gv47.diff
#   bash benchmarks/ab_tree.sh HEAD gv47r --patch benchmarks/results/sweeps/2026-12-05_gv47_decode_16/gv47r.diff
#   bash benchmarks/ab_tree.sh HEAD gv48 --patch benchmarks/results/sweeps/2026-12-05_gv48_few_wave_32/gv48.diff
#   bash benchmarks/ab_tree.sh HEAD gv48s --patch benchmarks/results/sweeps/2026-12-05_gv48_few_wave_32/gv48s.diff
#   install gv47chk (~5 min), then abgv47 (~5 min), either GPU (on an H200 first if one comes):
#           16-row decode tiles (grouped v47, a candidate: gv47 on 3 stages, gv47r on 2); one call
#           each (the full grouped suite alone takes ~2 min a tree, each sanitizer run ~30 s)
#   gv48chk abgv48 (~6 min, either GPU; split in two calls if the first ran long): EP32 T=32's 32-row tiles off the 512 x 32 tile loop where
#           it makes under 1.4 waves (grouped v48, a candidate: gv48 the 256 x 32 tile loop, gv48s
#           the 32-row stream-K mma tile)
#   APPLY="" grpgrid (~5 min): the grouped grid at main (v43, v44, v46 in; the H200 section is at
#           18e989a), then the marker section into docs/performance.md; idxgrid (~2 min) likewise
#   tp8dn (~3 min, either GPU, in idxgrid's call if it fits): TP8 T=2048 down on the 512 x 56 tile
#           loop by override (indexed-kernels.md v59; no tree: CHORD_W4A16_TUNING)
#   abdec (~4 min): gv43 + gv44 on the H200, main against 07899e8, the grouped decode of both
#           forms at both clocks (the grid shows the sums; this shows the kernels)
#   gv42h200 (~4 min): gv42 against its parent on the prefill down where the H200 grid moved
#   v57, ts8 (rejected on the H100, indexed-kernels.md v57, v58) and whole: done
# A candidate wins if it is faster at both clocks where it changes a kernel and not slower
# elsewhere; land the winners after the session (git apply, move their design-log entries to
# measured), and the grids' outputs into docs/performance.md and benchmarks/results/.
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
    gv40chk)  # gv40's GPU test and the grouped decode tests on its tree; memcheck and racecheck on its case
      tree_checks gv40 tests/gpu/test_grouped_gpu.py "shallow or wide_decode or one_wave or streamk_decode" \
        "grouped:2-stage" ;;
    abgv40)  # gv40 against main, offsets form, the decode points it changes and EP32 T=8 (unchanged: noise)
      for clock in base none; do
        AB_CLOCK=$clock AB_INSTALL=0 AB_TIMEOUT=120 bash benchmarks/ncu_ab.sh "$D/ab_gv40_$clock" grouped \
          "--paths grouped_contiguous --scenarios ep8,ep16,ep32 --tokens 8,20 --dists uniform,skew" base=. gv40=.ab/gv40
        st "abgv40_$clock" $?
      done ;;
    gv42chk)  # gv42 changes every 2-warpgroup grouped tile loop: the grouped GPU tests from its tree
      # (all of them: the tile loops run wherever the dispatch picks them), then memcheck and
      # racecheck on the tile-loop cases (the handoff between consumers and store warps)
      tree_checks gv42 tests/gpu/test_grouped_gpu.py "" "grouped:tile loop" "grouped:split tail" "grouped:tall" \
        "grouped:pair" ;;
    abgv42)  # gv42 against main at both clocks, prefill points of both forms and projections (the tall
      # tile, 256 x 96, and 256 x 128 on 5 stages: EP8 T=2048, EP32 T=512 down); not after a failed
      # gv42chk in the same session (a wrong kernel is not timed: it crashed the first A/B)
      if grep -Eq "^gv42_(pytest|memcheck|racecheck) rc=[1-9]" "$D/status" 2>/dev/null; then st abgv42_skipped 1; continue; fi
      for clock in base none; do
        AB_CLOCK=$clock AB_INSTALL=0 AB_TIMEOUT=150 bash benchmarks/ncu_ab.sh "$D/ab_gv42_$clock" grouped \
          "--paths grouped_contiguous,grouped_masked --scenarios ep8,ep32 --tokens 512,2048,8192 --dists uniform" \
          base=. gv42=.ab/gv42
        st "abgv42_$clock" $?
      done ;;
    swchk)  # sw changes every stream-K kernel: its stream-K checks (the long-run case is where the
      # shorter band applies)
      streamk_tree_checks sw ;;
    absw)  # sw against main at base clock: the decode points of both families (the traced one included)
      AB_INSTALL=0 AB_TIMEOUT=120 bash benchmarks/ncu_ab.sh "$D/ab_sw_grouped" grouped \
        "--paths grouped_contiguous --scenarios ep8,ep16,ep32 --tokens 8,20 --dists uniform,skew" base=. sw=.ab/sw
      st absw_grouped $?
      AB_INSTALL=0 AB_TIMEOUT=120 bash benchmarks/ncu_ab.sh "$D/ab_sw_indexed" indexed \
        "--scenarios ep8,tp8 --tokens 8,20,128 --dists uniform,skew" base=. sw=.ab/sw
      st absw_indexed $? ;;
    swtrace)  # the traced point on the sw tree: does the last band now end with the others?
      trace_tree sw ;;
    v47boost)  # v47 (landed 5b3c248 from base-clock ncu) at the clocks do_bench sees
      AB_CLOCK=none AB_INSTALL=0 AB_TIMEOUT=100 bash benchmarks/ncu_ab.sh "$D/ab_v47_boost" indexed \
        "--scenarios ep8,tp8 --tokens 8,20 --dists uniform,skew" base=.ab/c119a58 v47=.
      st v47boost $? ;;
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
    iv51chk)  # iv51 (the indexed short-K prefill tile on the tile loop, its epilogue on the store
      # warps, warp 0 gathering the rows): indexed_tree_checks
      indexed_tree_checks iv51 ;;
    abiv51)  # iv51 against main at base clock (then boost), TP8 T=2048/8192 (56- and 96-row blocks on
      # K=256); not after a failed iv51chk
      if grep -Eq "^iv51_(pytest|memcheck|racecheck) rc=[1-9]" "$D/status" 2>/dev/null; then st abiv51_skipped 1; continue; fi
      for clock in base none; do
        AB_CLOCK=$clock AB_INSTALL=0 AB_TIMEOUT=120 bash benchmarks/ncu_ab.sh "$D/ab_iv51_$clock" indexed \
          "--scenarios tp8 --tokens 2048,8192 --dists uniform" base=. iv51=.ab/iv51
        st "abiv51_$clock" $?
      done ;;
    cwg4gu)  # the 256 x 96 tile on 4 consumer warpgroups (WM 1) for long-K gate_up, by tuning override
      # (no code): TP8 T=8192 gate_up is k-loop-bound (v50) and the probe ran that k loop 7 % faster
      # on 4 warpgroups (v49: 830 against 891 cycles a stage). ncu at base clock, both ring depths;
      # read gate_up only (the override reaches every wgmma launch of the run, down included)
      AB_ENV_cwg4="CHORD_W4A16_TUNING=WM=1,CWG=4" AB_ENV_cwg4s8="CHORD_W4A16_TUNING=WM=1,CWG=4,STAGES=8" \
        AB_CLOCK=base AB_INSTALL=0 AB_TIMEOUT=150 bash benchmarks/ncu_ab.sh "$D/ab_cwg4gu" indexed \
        "--scenarios ep8,tp8 --tokens 512,8192 --dists uniform" base=. cwg4=. cwg4s8=.
      st cwg4gu $? ;;
    dectune)  # the decode ring on an H100 (2026-12-05: our mma_sk gate_up reads 86-89 % of the bytes
      # floor there against Humming's 90-94 %; tuned on the H200): the 8 x 128 tile's ring by tuning
      # override, ncu at boost clock (do_bench's), EP8 T=20/32 and TP8 T=20/128 gate_up; an override
      # runs 3 CTAs an SM (STREAMK_CTAS_PER_SM gives 4 only to the 2-stage 256-deep ring)
      AB_ENV_s3="CHORD_W4A16_TUNING=NT=2,STAGE_K=256,STAGES=3" AB_ENV_k128s4="CHORD_W4A16_TUNING=NT=2,STAGE_K=128,STAGES=4" \
        AB_ENV_k64s6="CHORD_W4A16_TUNING=NT=2,STAGE_K=64,STAGES=6" AB_ENV_k128s6="CHORD_W4A16_TUNING=NT=2,STAGE_K=128,STAGES=6" \
        AB_CLOCK=none AB_INSTALL=0 AB_TIMEOUT=120 bash benchmarks/ncu_ab.sh "$D/ab_dectune" indexed \
        "--scenarios ep8,tp8 --tokens 20,128 --dists uniform" base=. s3=. k128s4=. k64s6=. k128s6=.
      st dectune $? ;;
    dectrace)  # the decode tail on an H100 (indexed-kernels.md v52): the per-CTA trace of grouped EP8
      # T=20 gate_up on main, both routings, as the H200's of 2026-12-05 (grouped-kernels.md)
      for dist in uniform skew; do
        OUT=$D timeout 100 bash benchmarks/cta_trace.sh ep8 20 gate_up $dist h100 -- --family grouped \
          --paths grouped_contiguous > "$D/dectrace_$dist.txt" 2>&1
        st "dectrace_$dist" $?
        python3 -m benchmarks.cta_trace_report "$D/trace_ep8_gate_up_T20_${dist}_h100.json" > "$D/dectrace_report_$dist.txt" 2>&1
      done ;;
    iv53chk)  # iv53 (the indexed short-K tile loop claims its next tile one ahead): indexed_tree_checks
      # (auto reaches it at 96-row blocks, the forced wgmma family at every block)
      indexed_tree_checks iv53 ;;
    abiv53)  # main (T=2048 down on the stream-K tile), main's deferred loop forced at 56 rows, and iv53's,
      # TP8 T=2048/8192, at base then boost clock; gate_up is the same kernel in all three (the
      # wgmma family is auto's choice there). Not after a failed iv53chk.
      if grep -Eq "^iv53_(pytest|memcheck|racecheck) rc=[1-9]" "$D/status" 2>/dev/null; then st abiv53_skipped 1; continue; fi
      for clock in base none; do
        AB_ENV_loop="CHORD_W4A16_INDEXED_KERNEL=wgmma" AB_ENV_iv53="CHORD_W4A16_INDEXED_KERNEL=wgmma" \
          AB_CLOCK=$clock AB_INSTALL=0 AB_TIMEOUT=120 bash benchmarks/ncu_ab.sh "$D/ab_iv53_$clock" indexed \
          "--scenarios tp8 --tokens 2048,8192 --dists uniform" base=. loop=. iv53=.ab/iv53
        st "abiv53_$clock" $?
      done ;;
    v54chk)  # v54 (the mma stream-K kernel's chunked tail) changes every mma stream-K kernel: its
      # stream-K checks, with the EP8 T=20 determinism check and the graph replays (chunks are
      # claimed at run time)
      streamk_tree_checks v54 " or no_host_sync or graph" ;;
    abv54)  # v54 against main: the decode points of both families
      decode_ab v54 8,20 8,20,128 ;;
    v54trace)  # the traced point on the v54 tree: do the SMs now end together?
      trace_tree v54 ;;
    v56chk)  # v56 (the mma stream-K kernel claims whole tiles where they make 3.5+ waves on deep K):
      # the stream-K checks of both families, with the determinism check and the graph replays, and
      # the sanitizer on its own case (mma_claims: ~3000 whole tiles, K 1024 and 1280)
      streamk_tree_checks v56 " or no_host_sync or graph" mma_claims ;;
    abv56)  # v56 against main: the decode points of both families, both projections (down at
      # EP8/EP16 and TP8 T=128 gate_up are where it claims)
      decode_ab v56 8,20,32 8,20,32,128 ;;
    v57chk)  # v57 (v56's claimed whole tiles as a template flag, compiled into the indexed decode tiles
      # over deep K only; every other kernel is main's instruction for instruction): the stream-K
      # checks with its own GPU test (claimed tiles bit for bit against whole-K tiles, both rings,
      # graph replays), then memcheck and racecheck on its cases (3- and 2-stage rings)
      streamk_tree_checks v57 " or no_host_sync or graph or claimed" mma_claims mma_claims2 ;;
    abv57)  # v57 against main: the indexed decode points (the grouped kernels are main's), both clocks
      decode_ab v57 - 8,20,32,128 ;;
    gv43chk)  # gv43 (the offsets form's 8 x 128 decode tile on the 2-stage ring at 4 CTAs an SM where
      # 2+ expected tiles a resident CTA, in place of the 3-stage ring and of the wide tile): the
      # grouped decode GPU tests from its tree, memcheck and racecheck on its two cases
      tree_checks gv43 tests/gpu/test_grouped_gpu.py "shallow or wide_decode or one_wave or streamk_decode" \
        "grouped:2-stage decode ring" ;;
    abgv43)  # gv43 against main: the grouped decode points (offsets form), both projections, both clocks
      decode_ab gv43 8,20,32 - ;;
    gv44chk)  # gv44 (gv43's 2-stage decode ring for the masked form too; block_chunk unsigned, so its
      # BLOCK_K-128 kernel fits 4 CTAs an SM without a spill): every grouped GPU test from its tree
      # (the unsigned block_chunk changes every BLOCK_K-128 mma kernel: the masked form's, the
      # DeepGEMM form's), memcheck and racecheck on the ring's cases (both forms)
      tree_checks gv44 tests/gpu/test_grouped_gpu.py "" \
        "grouped:2-stage decode ring" ;;
    abgv44)  # main, bc (the unsigned block_chunk alone: every BLOCK_K-128 mma kernel) and gv44 (with
      # the ring for the masked form): the masked decode points, EP8/EP16/EP32 T=8/20/32, both
      # routings and projections, ncu ABBA at boost then base clock (~3 min)
      candidate_ab gv44 gv44_masked grouped \
        "--paths grouped_masked --scenarios ep8,ep16,ep32 --tokens 8,20,32 --dists uniform,skew" base=. bc=.ab/bc gv44=.ab/gv44 ;;
    gv45chk)  # gv45 (the 256 x 24 wgmma tile on the stream-K schedule where 11-16 expected rows take
      # 24-row tiles but the 512 x 24 tile loop makes too few waves: EP32 T=20): every grouped GPU
      # test from its tree (its own test on both forms and EP32 projections), memcheck and
      # racecheck on its case
      tree_checks gv45 tests/gpu/test_grouped_gpu.py "" "grouped:256 x 24 stream-K" ;;  # (the case is gv45.diff's)
    abgv45)  # gv45 against main: EP32 T=20 (uniform changes; skewed, 10 rows, is the noise) and
      # T=32, both forms and projections, ncu ABBA at boost then base clock (~3 min)
      candidate_ab gv45 gv45 grouped \
        "--paths grouped_contiguous,grouped_masked --scenarios ep32 --tokens 20,32 --dists uniform,skew" base=. gv45=.ab/gv45 ;;
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
    v46chk)  # grouped v46 as landed (the 256 x 24 tile loop from K 4096 only: EP32 T=20 gate_up), on
      # the working tree: its GPU test (both forms), memcheck and racecheck on its case (K 4096)
      TREE_DIR=. tree_checks v46chk tests/gpu/test_grouped_gpu.py "narrow_mid_batch or 24_row or split_tail" \
        "grouped:256 x 24 tile loop" ;;
    gv46chk)  # gv46 (gv45's 24-row tiles on the 256 x 24 tile loop, 2 consumer warpgroups, in place of
      # the stream-K schedule): every grouped GPU test from its tree, memcheck and racecheck on its case
      tree_checks gv46 tests/gpu/test_grouped_gpu.py "" "grouped:256 x 24 tile loop" ;;
    abgv46)  # gv46 against main and gv45: EP32 T=20 and T=32, both forms and projections, both clocks
      candidate_ab gv46 gv46 grouped \
        "--paths grouped_contiguous,grouped_masked --scenarios ep32 --tokens 20 --dists uniform,skew" base=. gv45=.ab/gv45 gv46=.ab/gv46 ;;
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
    ts8chk)  # ts8 (the tile loop's split tail in pieces of 8+ stages, was 16: over K=2048 a short last
      # wave in quarters, not halves): the tile-loop GPU tests of both families from its tree, then
      # memcheck and racecheck on the grouped split-tail cases (K 2048: now four pieces a tile)
      tree_checks ts8 "tests/gpu/test_indexed_gpu.py tests/gpu/test_grouped_gpu.py" \
        "tile_loop or (prefill_blocks and (auto or wgmma))" "grouped:split tail" ;;
    abts8)  # ts8 against main, ncu ABBA at boost then base clock: the down points whose last wave it
      # cuts finer (indexed EP8 T=64/128 uniform: 672 tiles, 12 left; skewed T=2048: 12 left) and
      # the grouped mid-batch/prefill down
      if grep -Eq "^ts8_(pytest|memcheck|racecheck) rc=[1-9]" "$D/status" 2>/dev/null; then st abts8_skipped 1
      else
        for clock in none base; do
          AB_CLOCK=$clock AB_INSTALL=0 AB_TIMEOUT=150 bash benchmarks/ncu_ab.sh "$D/ab_ts8_indexed_$clock" indexed \
            "--scenarios ep8 --tokens 64,128,2048 --dists uniform,skew --projections down" base=. ts8=.ab/ts8
          st "abts8_indexed_$clock" $?
          AB_CLOCK=$clock AB_INSTALL=0 AB_TIMEOUT=150 bash benchmarks/ncu_ab.sh "$D/ab_ts8_grouped_$clock" grouped \
            "--scenarios ep8,ep16,ep32 --tokens 128,512 --dists uniform --projections down" base=. ts8=.ab/ts8
          st "abts8_grouped_$clock" $?
        done
      fi ;;
    gv42h200)  # gv42 (landed 0f83030 from an H100 A/B) on the H200: main against its parent 01ac629
      # (.ab/01ac629), ncu ABBA at base clock, the prefill down of both forms where the grid moved
      AB_CLOCK=base AB_INSTALL=0 AB_TIMEOUT=200 bash benchmarks/ncu_ab.sh "$D/ab_gv42h200_base" grouped \
        "--paths grouped_masked,grouped_contiguous --scenarios ep16,ep32 --tokens 2048,8192 --dists uniform --projections down" \
        base=.ab/01ac629 gv42=.
      st gv42h200_base $? ;;
    whole)  # whole-K decode tiles on the hardware's schedule (indexed-kernels.md v55) against main's
      # stream-K, the indexed decode points, both clocks: where do whole tiles win (waves)?
      # (mma2: the 2-stage ring at 4 CTAs an SM, main's EP8 decode occupancy; mma3: 3 an SM; mma4: 2)
      for clock in none base; do
        AB_ENV_mma2="CHORD_W4A16_INDEXED_KERNEL=mma CHORD_W4A16_TUNING=NT=2,TT=1,STAGE_K=256,STAGES=2" \
          AB_ENV_mma3="CHORD_W4A16_INDEXED_KERNEL=mma CHORD_W4A16_TUNING=NT=2,TT=1,STAGE_K=256,STAGES=3" \
          AB_ENV_mma4="CHORD_W4A16_INDEXED_KERNEL=mma CHORD_W4A16_TUNING=NT=2,TT=1,STAGE_K=256,STAGES=4" \
          AB_CLOCK=$clock AB_INSTALL=0 AB_TIMEOUT=120 bash benchmarks/ncu_ab.sh "$D/ab_whole_$clock" indexed \
          "--scenarios ep8,tp8 --tokens 8,20,32,128 --dists uniform,skew --projections gate_up" base=. mma2=. mma3=. mma4=.
        st "whole_$clock" $?
      done ;;
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
    *) echo "unknown step $step (install gv47chk abgv47 gv48chk abgv48 tp8dn v46chk gv46chk abgv46 gv45chk abgv45 grpchk abdec v57chk abv57 gv43chk abgv43 gv44chk abgv44 ts8chk abts8 gv42h200 whole v56chk abv56 v54chk abv54 v54trace dectune dectrace iv53chk abiv53 gv40chk abgv40 gv42chk abgv42 iv51chk abiv51 cwg4gu swchk absw probe feed split swtrace v47boost idxgrid grpgrid)" >&2; exit 2 ;;
  esac
done
tar czf "$OUT/plan.tgz" -C "$OUT" plan
