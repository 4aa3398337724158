#!/usr/bin/env bash
# The pending device runs, as steps of at most one device call each (600 s). Results go to
# $OUT/plan and $OUT/plan.tgz (the tool brings back only a few files). Steps that already ran
# (named in the design logs: gv40chk, abgv42, iv51chk, v56chk, ts8chk, whole, ...) are in git
# history: `git show 025f026:benchmarks/results/sweeps/2026-12-05_next_device_plan/plan.sh`.
# Usage: `OUT=$OUT bash THIS_FILE install STEP...` on the device (install first: the pip installs).
# Pending, in order (kept current; each session's account is in README.md beside this file, and
# what each step decided is in docs/indexed-kernels.md and docs/grouped-kernels.md). Every step
# but the trees' steps, abbias and hostab runs main (carry [".whl"]; `mkdir -p .whl && pip download
# -q --no-deps -d .whl humming-kernels==0.1.19 packaging` if it is gone), one call each, with
# CHORD_COMMIT=<main's short sha>:
#   1. paired (~5 min, either GPU; whichever comes first; QUICK=1 in the environment and ~3.5 min
#      on a short lease): v83, the TP8 down's pair tiles over an expert's 8-row blocks
#      (IndexedMmaDecodeDual, off by default), never run: its GPU tests, then do_bench main /
#      PAIRED=1 / PAIRED=2 at TP8 T=64-256 both routings (ABBA), then memcheck and racecheck. If
#      correct and the rule's skewed downs gain with the uniform ones level: PAIRED_DEFAULT = 1
#      (dispatch/indexed.py) and the tests that pin it (v83 lists them); the grids then run it
#   2. on an H200: idxgrid (~2 min) and grpgrid (~5.5 min): the grids of record with v69, v71 and
#      grouped v65 (the last H200 grids are at b0cbab7; the H100 grids at 191deeb / 0fe2077)
#   3. on an H200: ab70 (~2.5 min, carry [".whl", ".ab/dfr4"]; the tree: `bash benchmarks/ab_tree.sh
#      HEAD dfr4 --patch <abs path>/2026-12-06_dfr4_cwg4_deferred_epilogue/dfr4_on_e2f85bb.diff`):
#      v70 against main (tied on the H100). If v70 wins: `git apply` that diff (it carries its test
#      updates), mainchk SAN_CASES="wgmma wgmma_sk4 grouped:4-warpgroup", regrid
#   4. on an H200: abv71g (~1 min, carry [".whl", ".ab/191deeb"]; `bash benchmarks/ab_tree.sh
#      191deeb`): the grouped tile loop's quarters (v71) against main's halves (grouped v65)
#   5. on an H200: dnsk (~2.5 min): the mid-batch downs on stream-K and on 16-row blocks against
#      main; on the H100 every stream-K down lost (v81), so this checks that the H200 agrees
#   6. tp8b16 (~1.5 min, an H200 first): TP8 T=20-128 on 16-row blocks against main, ABBA (v82: on
#      the H100 the skewed downs -4 / -7 %, the gate_ups +0 to +4 %)
#   7. hostab (~2 min, carry [".whl", ".ab/86a1cee"]; HOST_BASE=86a1cee HOST_INPROC_CORES=; `bash
#      benchmarks/ab_tree.sh 86a1cee`): the fast call against the Python launch path on the H200
#      host (on an H100 host: ../2026-12-07_h100_fast_call/)
#   8. on an H200, if time is left: dnstore (~2 min; the epilogue's whole cost, if ab70 leaves it
#      in doubt), midprof (~3 min; EP8 T=128 gate_up's stage time, v60 / v63), abbias (~5 min, carry
#      [".whl", ".ab/24a33bd"]; `bash benchmarks/ab_tree.sh 24a33bd`; v62 / v63)
#   0. after a kernel lands: mainchk (~3 min, either GPU; SAN_CASES names the change's sanitizer
#      cases): main's whole GPU suite, memcheck and racecheck
# The steps that measured v72-v74 and abp16 (v72chk, abv72, lwchk, ablw, abp16) are in git history
# at 9e6f1b8; their trees rebuild from the diffs in ../2026-12-07_h100_v72_shared_tail_sum/,
# ../2026-12-07_h100_v74_late_wave/ and ../2026-12-07_h100_p16/.
# The twenty-fifth session's one-call variants (stg4one, abstg4, s4t8chk, abts8ng) are in git
# history at ed2e394.
# To spend an H100 call only where an H200 came: start the command with
#   nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || exit 0
# (it cost ~30 s of device time on an H100 this session).
# gv57 and gv58 ran (grouped-kernels.md v57, v58): their steps are in git history at d545284; dprem,
# dpremwide, l2pf and both (grouped v61, v62) at 9e39f03.
# The steps v67once, v67efw and v68last stay below for their trees (.ab/once: main + once.diff;
# .ab/efw2: `ab_tree.sh 2a92966 efw2 --patch .../efw2.diff`, which no longer applies to main's
# launch.py comment; .ab/last: main + ../2026-12-06_h100_v68_last_tile/last.diff).
# The grids and the k-loop steps want the H200 (an H100's mid batch is bytes-bound).
# The device copy's git names the session's first commit as HEAD: set CHORD_COMMIT from this side.
# turnschk/abturns are retired: the probe rejected v61's reading (L) (pingpong above both).
# Reusable steps: probe, feed, feedmid, split, stream (the diagnostics of indexed-kernels.md
# v49/v50/v60). Steps that ran are in git history (`git log -- THIS_FILE`) with the design-log
# entries that read them.
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
# sanitizer cases (mma_sk: split long-K tiles, many short tiles a CTA, the 3- and 4-deep rings;
# or the CASES given): streamk_tree_checks LABEL [EXTRA_K] [CASE...]
streamk_tree_checks() {
  local t=$1 extra=${2:-}
  shift $(($# < 2 ? $# : 2))
  tree_checks "$t" "tests/gpu/test_indexed_gpu.py tests/gpu/test_grouped_gpu.py" \
    "(kimi_shapes_random and (auto or mma_sk)) or streamk or stream_k or wide_decode or one_wave$extra" \
    "${@:-mma_sk}"
}
# do_bench ABBA (zero flush, the grid's timing) of two trees (LABEL=TREE, "." for main) on the
# points (sweep.sh's arguments; --family grouped unless they start with --family), into $D/NAME:
# ab_sweep NAME "POINTS" A=TREE B=TREE
ab_sweep() {
  local name=$1 points=$2 cfg=() i=0 t label path
  for t in "$3" "$4" "$4" "$3"; do  # A B B2 A2
    label=${t%%=*}; path=${t#*=}; ((i >= 2)) && label=${label}2; i=$((i + 1))
    if [[ $path == . ]]; then cfg+=("$label"); else cfg+=("$label:PYTHONPATH=$PWD/$path/packages/chord-runtime:CHORD_CSRC_DIR=$PWD/$path/csrc"); fi
  done
  # shellcheck disable=SC2046,SC2086  # POINTS is a list of arguments
  OUT=$D/$name SWEEP_BUDGET_S=60 timeout 240 bash benchmarks/sweep.sh $([[ $points == --family* ]] || echo --family grouped) \
    $points -- "${cfg[@]}" > "$D/$name.log" 2>&1
  st "$name" $?; grep -i "sum" "$D/$name/sweep_table.md" 2> /dev/null | head -20
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
# One ncu ABBA at the clocks do_bench sees, its status under NAME: boost_ab NAME DIR FAMILY
# "SWEEP ARGS" TREE... (TREE as ncu_ab.sh takes them, base=. first; AB_TIMEOUT and AB_ENV_* pass
# through from the caller's prefix)
boost_ab() {
  local name=$1 dir=$2 family=$3 args=$4
  shift 4
  AB_CLOCK=none AB_INSTALL=0 AB_TIMEOUT=${AB_TIMEOUT:-150} bash benchmarks/ncu_ab.sh "$dir" "$family" "$args" "$@"
  st "$name" $?
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
      rc=0  # the pip installs' (the loop over trees below ends on a false test where none is carried)
      for p in chord-runtime humming-compat chord-pack; do
        python3 -m pip install -q --no-build-isolation --no-deps -e "packages/$p" >> "$D/install.log" 2>&1 || rc=1
      done
      for t in .ab/*/; do  # the trees import the launcher from their own chord_kernels
        if [[ -d $t/packages/chord-runtime/chord_kernels ]]; then
          cp packages/chord-runtime/chord_kernels/_launcher*.so "$t/packages/chord-runtime/chord_kernels/"
        fi
      done
      st install $rc ;;
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
    grpchk)  # main's grouped family on the GPU: every grouped GPU test, then memcheck and racecheck
      # on the cases of the decode and few-wave rules (grouped v43/v44 ring, v47, v48)
      TREE_DIR=. tree_checks grpchk tests/gpu/test_grouped_gpu.py "" "grouped:2-stage decode ring" \
        "grouped:16-row decode" "grouped:few-wave 32-row" ;;
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
      AB_ENV_feed="CHORD_DIAG_FEED_ONLY=1" AB_TIMEOUT=120 boost_ab feedmid_indexed \
        "$D/ab_feedmid_indexed" indexed "--scenarios ep8 --tokens 64,128 --dists uniform" base=. feed=.
      AB_ENV_feed="CHORD_DIAG_FEED_ONLY=1" AB_TIMEOUT=120 boost_ab feedmid_grouped \
        "$D/ab_feedmid_grouped" grouped "--paths grouped_contiguous --scenarios ep16,ep32 --tokens 64,128 --dists uniform" \
        base=. feed=. ;;
    midprof)  # why mid batch's k loop does not hide under its stream (indexed-kernels.md v60, measured:
      # the feed alone ~1180 cycles a stage, the k loop alone 1084, the kernel 1540): ncu's full set
      # on indexed EP8 T=128 gate_up (the 512 x 32 tile loop), main, its feed-only build, and
      # Humming's (the same tile shape on stream-K), plus the SMs' balance (~3 min)
      for who in chord:main chord:feed humming:peer; do
        env $([[ ${who#*:} == feed ]] && echo CHORD_DIAG_FEED_ONLY=1) \
          NCU_METRICS=sm__cycles_active.max,sm__cycles_active.min,sm__cycles_active.avg OUT=$D/midprof \
          timeout 170 bash benchmarks/ncu_point.sh "${who%%:*}" ep8 128 gate_up uniform "${who#*:}" >> "$D/midprof.log" 2>&1
        st "midprof_${who#*:}" $?
      done
      rm -f "$D"/midprof/*.ncu-rep ;;  # (the details, raw and SASS pages stay: the reports are too big to bring back)
    wm4)  # indexed-kernels.md v61 (B): the 512-row mid-batch tile on 2 consumer warpgroups of WM 4
      # against main's 4 of WM 2 (CHORD_W4A16_TUNING=WM=4,CWG=2 on both projections: 14 % fewer
      # consumer instructions a stage, one group of 4 wgmmas a warpgroup a k step), ncu ABBA at the
      # clocks do_bench sees, indexed EP8 T=64/128 (~2 min); the check column says
      # whether the WM-4 tile is correct
      AB_ENV_wm4="CHORD_W4A16_TUNING=WM=4,CWG=2" AB_TIMEOUT=120 boost_ab wm4 \
        "$D/ab_wm4" indexed "--scenarios ep8 --tokens 64,128 --dists uniform" base=. wm4=. ;;
    turnschk)  # v61 (L), the turns tree (.ab/turns, carried): its indexed wgmma and grouped GPU tests,
      # memcheck and racecheck on the 4-warpgroup tile loop's cases (~4 min)
      tree_checks turns "tests/gpu/test_indexed_gpu.py tests/gpu/test_grouped_gpu.py" "auto or wgmma or grouped" \
        wgmma "grouped:4-warpgroup" "grouped:512 x 24" ;;
    abturns)  # v61 (L): the turns tree against main, ncu ABBA at the clocks do_bench sees, on the
      # 4-warpgroup tile loops: indexed EP8 T=128 and TP8 T=2048 gate_up (EP8 T=64 runs the
      # stream-K tile, unchanged: the control), grouped offsets EP16/EP32 T=64/128 (~4 min)
      AB_TIMEOUT=120 boost_ab abturns_indexed "$D/ab_turns_indexed" indexed \
        "--scenarios ep8,tp8 --tokens 64,128,2048 --dists uniform" base=. turns=.ab/turns
      AB_TIMEOUT=120 boost_ab abturns_grouped "$D/ab_turns_grouped" grouped \
        "--paths grouped_contiguous --scenarios ep16,ep32 --tokens 64,128 --dists uniform" base=. turns=.ab/turns ;;
    prefdn)  # why masked prefill down runs 13 % behind Humming's (EP32 T=8192: 2819-3082 µs against
      # 2443-2806 over eight grids, at the same 1980 MHz in the last) while the offsets form is level:
      # ncu's full set on EP32 T=8192 down, our masked and offsets forms (the same 128 x 240 tile; the
      # masked weight's BLOCK_K-128 stage boxes read 16 of each 32 bytes) and Humming's masked (~4 min)
      for who in chord:grouped_masked chord:grouped_contiguous humming:grouped_masked; do
        OUT=$D/prefdn timeout 200 bash benchmarks/ncu_point.sh "${who%%:*}" ep32 8192 down uniform "${who#*:}" \
          -- --family grouped --paths "${who#*:}" >> "$D/prefdn.log" 2>&1
        st "prefdn_${who}" $?
      done
      rm -f "$D"/prefdn/*.ncu-rep ;;
    abbias)  # indexed-kernels.md v62: the immediate 136 bias (24a33bd, reverted in 1abe593: the probe's
      # production k loops moved -8 to +6 %, TP8 kernels on the H100 level) against main, ncu ABBA at the clocks
      # do_bench sees, on an H200 (the H100's mid batch is bytes-bound): the 512 x 32 tile loop (EP8
      # T=128), stream-K 256 x 56 / 96 (TP8 T=2048 / 8192), the prefill tile (EP8 T=2048); ~5 min, carry
      # [".whl", ".ab/24a33bd"] (the tree: bash benchmarks/ab_tree.sh 24a33bd)
      boost_ab abbias "$D/ab_bias" indexed \
        "--scenarios ep8,tp8 --tokens 128,2048,8192 --dists uniform" base=. bias=.ab/24a33bd ;;
    prefdn2)  # grouped-kernels.md v51: masked EP32 T=8192 down runs 13-15 % behind Humming under
      # do_bench at 1980 MHz yet level in ncu's cycles (1.6 GHz, L2 flushed clean): our masked and
      # offsets forms under do_bench's zero flush (dirty L2) and a read flush (clean), zero again
      # last (Chord only, both paths, EP32 T=8192, both projections; ~2 min)
      OUT=$D/prefdn2 timeout 300 bash benchmarks/sweep.sh --family grouped --scenarios ep32 --tokens 8192 -- \
        zero:CHORD_BENCH_FLUSH=zero read:CHORD_BENCH_FLUSH=read zero2:CHORD_BENCH_FLUSH=zero > "$D/prefdn2.log" 2>&1
      st prefdn2 $?; tail -12 "$D/prefdn2.log" ;;
    dnsk)  # the mid-batch downs that trail Humming's on the H200 (b0cbab7: EP8 T=64 143.7 / 137.6,
      # skewed T=128 159.2 / 154.6, TP8 T=512 155.2 / 148.0 µs) on Humming's schedule: main against
      # the same tiles on stream-K (CHORD_W4A16_INDEXED_KERNEL=wgmma_sk) and against 16-row blocks
      # (Humming's EP8 T=64 down), both projections shown (~4 min; indexed-kernels.md v77's next)
      OUT=$D/dnsk SWEEP_BUDGET_S=40 timeout 400 bash benchmarks/sweep.sh --scenarios ep8,tp8 --tokens 64,128,512 \
        --dists uniform,skew -- auto sk:CHORD_W4A16_INDEXED_KERNEL=wgmma_sk b16:CHORD_W4A16_BLOCK_M=16 \
        auto2 sk2:CHORD_W4A16_INDEXED_KERNEL=wgmma_sk > "$D/dnsk.log" 2>&1
      st dnsk $?; tail -24 "$D/dnsk.log" ;;
    paired)  # indexed-kernels.md v83 (either GPU, ~5 min): ../2026-12-07_paired_decode/run.sh on this tree
      OUT=$D timeout 560 bash benchmarks/results/sweeps/2026-12-07_paired_decode/run.sh > "$D/paired.log" 2>&1
      st paired $?; tail -40 "$D/paired.log" ;;
    tp8b16)  # indexed-kernels.md v82: TP8 on 16-row blocks (both projections) against main's 8-row
      # blocks at T=20-128, both routings, ABBA (~1.5 min, either GPU; on the H100 of 2026-12-07 the
      # skewed downs read -4 / -7 % at T=64 / 128, the gate_ups +0 to +4 %)
      OUT=$D/tp8b16 SWEEP_BUDGET_S=40 timeout 240 bash benchmarks/sweep.sh --scenarios tp8 --tokens 20,32,64,128 \
        --dists uniform,skew -- auto b16:CHORD_W4A16_BLOCK_M=16 b16b:CHORD_W4A16_BLOCK_M=16 auto2 > "$D/tp8b16.log" 2>&1
      st tp8b16 $?; tail -14 "$D/tp8b16.log" ;;
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
    sparsechk)  # main's sparse-routes rule (dispatch.sparse_routes_decode, d54fd41): the indexed GPU
      # tests that reach it (Kimi shapes at T=1, determinism, graphs, split tiles), memcheck on the mma_sk
      # cases, then ncu ABBA at boost clock against the tree before it (.ab/f5b724d, carried)
      timeout 300 python3 -m pytest -m gpu tests/gpu/test_indexed_gpu.py -q -p no:cacheprovider \
        -k "kimi_shapes or no_host_sync or streamk_split or cuda_graph or non_kimi or empty" > "$D/sparse_pytest.log" 2>&1
      st sparse_pytest $?; tail -3 "$D/sparse_pytest.log"
      timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 python3 scripts/gpu_sanitize_case.py mma_sk \
        > "$D/sparse_memcheck.log" 2>&1
      st sparse_memcheck $?; tail -2 "$D/sparse_memcheck.log"
      boost_ab sparse_ab "$D/ab_sparse_none" indexed \
        "--scenarios ep8,tp8 --tokens 1,2,8 --dists uniform" base=.ab/f5b724d sparse=. > "$D/sparse_ab.log" 2>&1
      cat "$D"/ab_sparse_none/table_*.md 2> /dev/null | tail -14 ;;
    st4ep8)  # EP8 T=1/2/4 on the 4-deep decode ring (STAGES=4: 2 CTAs an SM) against main's 3 stages,
      # ncu ABBA at the clocks do_bench sees (v39 measured it on the H200 at base clock: T=1 -9.7 /
      # -6.7 %, T=2/4 +3 to +6 %); the data for a host rule that takes it at 64 routes or fewer
      AB_ENV_st4="CHORD_W4A16_TUNING=STAGES=4" boost_ab st4ep8 \
        "$D/ab_st4_none" indexed "--scenarios ep8 --tokens 1,2,4 --dists uniform" base=. st4=. > "$D/st4ep8.log" 2>&1
      tail -12 "$D/st4ep8.log"; cat "$D"/ab_st4_none/table_*.md 2> /dev/null | tail -12 ;;
    v67once)  # indexed-kernels.md v67's follow-up: the tree .ab/once (main + once.diff, carried) against
      # main. Its grouped decode GPU tests and the grouped decode sanitizer cases from inside the
      # tree, then do_bench ABBA (zero flush, the grid's timing) on the skewed and uniform decode points
      tree_checks once tests/gpu/test_grouped_gpu.py "streamk or stream_k or wide_decode or one_wave or sparse_decode or decode_16 or graph" \
        grouped:decode grouped:K384
      ab_sweep once_skew "--scenarios ep16,ep32 --tokens 20,32 --dists skew" main=. once=.ab/once
      ab_sweep once_uniform "--scenarios ep8,ep16,ep32 --tokens 1,8,20 --dists uniform" main=. once=.ab/once ;;
    gv60)  # (ran 2026-12-06, H100: rejected) grouped-kernels.md v60: the mixed-height decode tile (.ab/gv60, carried: `bash benchmarks/ab_tree.sh
      # HEAD gv60 --patch benchmarks/results/sweeps/2026-12-06_gv60_mixed_heights/gv60.diff`). Its mixed-height GPU
      # tests and the grouped graph-capture and determinism tests from inside the tree,
      # memcheck and racecheck on its two sanitizer cases, then do_bench ABBA against main on
      # the EP8 decode points it takes (T=20/32 uniform and skewed, both forms) with T=8 (not
      # taken) as the control
      tree_checks gv60 tests/gpu/test_grouped_gpu.py "mixed_height or graph_capture or deterministic" \
        grouped:mixed-height
      ab_sweep gv60_ep8 "--scenarios ep8 --tokens 8,20,32 --dists uniform,skew" main=. gv60=.ab/gv60 ;;
    gv60b)  # the same A/B on the EP16 and EP32 decode points it takes (EP16 T=20, EP32 T=8; uniform and
      # skewed) with EP32 T=20 (not taken) as the control
      ab_sweep gv60_ep16_32 "--scenarios ep16,ep32 --tokens 8,20 --dists uniform,skew" main=. gv60=.ab/gv60 ;;
    gv60q)  # v60 on the 4-stage ring of 128-column stages (.ab/gv60q: main + gv60.diff with two constants changed, README there; carried; the
      # same shared memory, 3 stages in flight a CTA) against main on the EP8 points
      ab_sweep gv60q_ep8 "--scenarios ep8 --tokens 20,32 --dists uniform,skew" main=. gv60q=.ab/gv60q ;;
    ring4)  # (ran 2026-12-06, H100: rejected; experiment, not for main) the 8 x 128 decode tile's finer rings at 4 CTAs an SM, as
      # Humming's decode runs (8 x 128 x 64, 4 stages, 4 an SM): .ab/ring4 (main + ring4.diff,
      # carried) under CHORD_EXP_RING4=1 admits 64 x 4, 128 x 3 and 64 x 6 at 4 CTAs an SM; the grouped
      # 2-stage ring's place by CHORD_EXP_SHALLOW_RING, the indexed tile's by CHORD_W4A16_TUNING.
      # do_bench, main first and last (indexed-kernels.md v52 measured them at 3 CTAs an SM only)
      t=$PWD/.ab/ring4; base="PYTHONPATH=$t/packages/chord-runtime:CHORD_CSRC_DIR=$t/csrc:CHORD_EXP_RING4=1"
      OUT=$D/ring4_grouped SWEEP_BUDGET_S=60 timeout 260 bash benchmarks/sweep.sh --family grouped --scenarios ep8,ep16 \
        --tokens 8,20,32 --dists uniform -- main "r64x4:$base:CHORD_EXP_SHALLOW_RING=64,4" \
        "r128x3:$base:CHORD_EXP_SHALLOW_RING=128,3" "r64x6:$base:CHORD_EXP_SHALLOW_RING=64,6" main2 \
        > "$D/ring4_grouped.log" 2>&1
      st ring4_grouped $?; grep -i "sum" "$D/ring4_grouped/sweep_table.md" | head -24
      OUT=$D/ring4_indexed SWEEP_BUDGET_S=60 timeout 260 bash benchmarks/sweep.sh --family indexed --scenarios ep8,tp8 \
        --tokens 8,20,32,128 --dists uniform -- main "i64x4:$base:CHORD_W4A16_TUNING=STAGE_K=64,STAGES=4" \
        "i128x3:$base:CHORD_W4A16_TUNING=STAGE_K=128,STAGES=3" "i64x6:$base:CHORD_W4A16_TUNING=STAGE_K=64,STAGES=6" main2 \
        > "$D/ring4_indexed.log" 2>&1
      st ring4_indexed $?; grep -i "sum" "$D/ring4_indexed/sweep_table.md" | head -24 ;;
    smspread)  # (ran 2026-12-06, H100: grouped-kernels.md v61) the decode gap's lead (grouped-kernels.md v60, indexed v68): ours against Humming on
      # grouped EP8 T=32 gate_up (offsets form / grouped_contiguous), ncu full set with the SMs'
      # balance (sm__cycles_active min / avg / max); the raw page holds the L2 fabric (cross-partition)
      # sectors. The reports' large files are dropped before the tar
      for side in chord humming; do
        NCU_METRICS=sm__cycles_active.max,sm__cycles_active.min,sm__cycles_active.avg OUT=$D/smspread \
          timeout 250 bash benchmarks/ncu_point.sh $side ep8 32 gate_up uniform -- --family grouped \
          --paths grouped_contiguous > "$D/smspread_$side.log" 2>&1
        st "smspread_$side" $?; tail -14 "$D/smspread_$side.log"
      done
      rm -f "$D"/smspread/*.ncu-rep "$D"/smspread/*.sass.csv ;;
    gv59)  # (kept, not pending: v59's model puts it at <= 1 %) grouped-kernels.md v59: the mma
      # stream-K tiles over deep K in column order (.ab/gv59:
      # `bash benchmarks/ab_tree.sh HEAD gv59 --patch benchmarks/results/sweeps/2026-12-06_gv59_column_order/gv59.diff`,
      # carried). Its stream-K GPU tests of both families and memcheck/racecheck on mma_sk and the
      # grouped decode cases (deep K, experts over one row tile) from inside the tree, then do_bench ABBA against main: grouped EP8 T=8/20/32 uniform and skewed T=20 (both
      # forms), indexed EP8 T=32 and TP8 T=128
      streamk_tree_checks gv59 "" mma_sk grouped:decode
      ab_sweep gv59_grouped "--scenarios ep8 --tokens 8,20,32 --dists uniform,skew" main=. gv59=.ab/gv59
      ab_sweep gv59_indexed "--family indexed --scenarios ep8,tp8 --tokens 32,128 --dists uniform" main=. gv59=.ab/gv59 ;;
    mainchk)  # main's whole GPU suite (pytest-xdist, 4 workers: ~110 s), then memcheck and racecheck on
      # the sanitizer cases of the last change (SAN_CASES, as gpu_sanitize_case.py takes them)
      timeout 360 python3 -m pytest -m gpu tests/gpu -n 4 -q -p no:cacheprovider > "$D/main_pytest.log" 2>&1
      st main_pytest $?; tail -3 "$D/main_pytest.log"
      for tool in memcheck racecheck; do
        # shellcheck disable=SC2086  # SAN_CASES is a list of case arguments
        timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 python3 scripts/gpu_sanitize_case.py \
          ${SAN_CASES:-grouped:pair} > "$D/main_$tool.log" 2>&1
        st "main_$tool" $?; tail -2 "$D/main_$tool.log"
      done ;;
    v68last)  # grouped-kernels.md v56: the tree .ab/last (main + last.diff, carried): an expert's weights
      # go evict-first on its last row tile only. Its grouped decode GPU tests and sanitizer cases,
      # then do_bench ABBA against main on the skewed and uniform decode points, and indexed T=1/8
      # (the shared loader's registers)
      tree_checks last tests/gpu/test_grouped_gpu.py "streamk or stream_k or wide_decode or one_wave or sparse_decode or decode_16 or graph" \
        grouped:decode grouped:K384
      ab_sweep last_skew "--scenarios ep16,ep32 --tokens 20,32 --dists skew" main=. last=.ab/last
      ab_sweep last_uniform "--scenarios ep8,ep16,ep32 --tokens 1,8,20 --dists uniform" main=. last=.ab/last
      ab_sweep last_indexed "--family indexed --scenarios ep8,tp8 --tokens 1,8 --dists uniform" main=. last=.ab/last ;;
    v67efw)  # v67 on the wgmma tiles too, with once's rule (.ab/efw2: main + efw2.diff, carried): its
      # wgmma GPU tests of both families and the wgmma sanitizer cases from inside the tree, then
      # do_bench ABBA against once (.ab/once, carried) on the mid-batch points it reaches (EP16/EP32
      # grouped, whose weights fit the bound) and the indexed wgmma points at the bound's edge
      tree_checks efw2 "tests/gpu/test_indexed_gpu.py tests/gpu/test_grouped_gpu.py" "wgmma or tile_loop or mid_batch" \
        wgmma wgmma_sk grouped:wgmma grouped:24
      ab_sweep efw_grouped "--scenarios ep16,ep32 --tokens 20,32,64 --dists uniform" once=.ab/once efw2=.ab/efw2
      ab_sweep efw_indexed "--family indexed --scenarios ep8,tp8 --tokens 128,512,2048 --dists uniform" once=.ab/once efw2=.ab/efw2 ;;
    dnstore)  # the H200's mid-batch down gap (indexed EP8 T=64/128 down 4-5 % behind Humming's while
      # our gate_up leads): main against its no-store build (CHORD_DIAG_NO_STORE=1: the epilogue's
      # writes skipped), ncu ABBA at the clocks do_bench sees, indexed EP8 T=64/128 down, uniform and
      # skewed (~2 min). What the epilogue costs a 32-stage tile (the 4-warpgroup loop stores on its
      # consumers, between one tile's last wgmma and the next's first)
      AB_ENV_nostore="CHORD_DIAG_NO_STORE=1" boost_ab dnstore \
        "$D/ab_nostore" indexed "--scenarios ep8 --tokens 64,128 --dists uniform,skew --projections down" base=. nostore=. ;;
    ab6970)  # (ran 2026-12-07, H100: v69 landed, e2f85bb; superseded by ab70) v69 and v70 against main, ncu ABBA at the clocks do_bench sees (carry [".whl", ".ab/stg4",
      # ".ab/dfr4"]): stg4 (the 4-warpgroup tiles' epilogue staged, up to 48 rows) and dfr4 (stg4 plus
      # the tile loop's epilogue on the producer's store warps, DEFER_STORE, on those tiles): indexed
      # EP8 T=64/128 uniform and skewed, then grouped offsets EP8/EP16/EP32 T=64/128 (~6 min; the
      # bench checks every call against the reference). Then the winner's checks: chk69 or chk70
      boost_ab ab6970_indexed "$D/ab_6970_indexed" indexed \
        "--scenarios ep8 --tokens 64,128 --dists uniform,skew" base=. stg4=.ab/stg4 dfr4=.ab/dfr4
      boost_ab ab6970_grouped "$D/ab_6970_grouped" grouped \
        "--paths grouped_contiguous --scenarios ep8,ep16,ep32 --tokens 64,128 --dists uniform" base=. stg4=.ab/stg4 dfr4=.ab/dfr4 ;;
    ab70)  # v70 against main (v69 landed at e2f85bb), ncu ABBA at the clocks do_bench sees (carry
      # [".whl", ".ab/dfr4"]; .ab/dfr4 = main + ../2026-12-06_dfr4_cwg4_deferred_epilogue/dfr4_on_e2f85bb.diff):
      # indexed EP8 T=64/128 uniform and skewed (~75 s on an H100), then grouped offsets EP8/EP16 T=64/128
      boost_ab ab70_indexed "$D/ab_70_indexed" indexed \
        "--scenarios ep8 --tokens 64,128 --dists uniform,skew" base=. dfr4=.ab/dfr4
      boost_ab ab70_grouped "$D/ab_70_grouped" grouped \
        "--paths grouped_contiguous --scenarios ep8,ep16 --tokens 64,128 --dists uniform" base=. dfr4=.ab/dfr4 ;;
    chk69|chk70)  # (both ran clean 2026-12-07, H100) the tree's whole GPU suite (4 workers), memcheck and racecheck on the wgmma cases of
      # both families (~5 min): chk69 on .ab/stg4, chk70 on .ab/dfr4 (the two deep-K indexed cases
      # reach the 4-warpgroup tile loop: the sanitizer's other indexed wgmma cases are short K)
      tree_checks "$([[ $step == chk69 ]] && echo stg4 || echo dfr4)" "-n 4 tests/gpu" "" \
        wgmma wgmma_sk4 "grouped:4-warpgroup" "grouped:512 x 24" ;;
    dnbal)  # (ran 2026-12-07, H100: indexed-kernels.md v74) indexed-kernels.md v72's lead: how far apart the CTAs end on the mid-batch downs (the
      # tile loop's claimed tiles drift; Humming's stream-K gives every CTA an equal run). ncu's
      # basic set plus the SMs' active cycles (max/min/mean) for main and Humming on indexed EP8
      # T=64/128 down, uniform; then main's per-CTA trace (start/end, ns) of T=64/128 uniform and
      # T=128 skewed (~3 min, either GPU)
      for t in 64 128; do
        for who in chord:main humming:peer; do
          NCU_SET=basic NCU_METRICS=sm__cycles_active.max,sm__cycles_active.min,sm__cycles_active.avg OUT=$D/dnbal \
            timeout 120 bash benchmarks/ncu_point.sh "${who%%:*}" ep8 "$t" down uniform "${who#*:}" >> "$D/dnbal.log" 2>&1
          st "dnbal_${who#*:}_$t" $?
        done
      done
      rm -f "$D"/dnbal/*.ncu-rep "$D"/dnbal/*.sass.csv
      for pt in "64 uniform" "128 uniform" "128 skew"; do
        read -r tokens dist <<< "$pt"
        OUT=$D/dnbal timeout 120 bash benchmarks/cta_trace.sh ep8 "$tokens" down "$dist" >> "$D/dnbal.log" 2>&1
        st "dnbal_trace_${tokens}_$dist" $?
      done ;;
    abv71g)  # grouped-kernels.md v65: main (the grouped tile loop's 16-stage pieces back) against v71's
      # quarters in the grouped family, the tree .ab/191deeb (carry [".whl", ".ab/191deeb"]; `bash
      # benchmarks/ab_tree.sh 191deeb`): offsets form EP8/EP16 T=64/128 down, ncu ABBA at the clocks
      # do_bench sees (~1 min). Three H100 runs (main was v71 then) read EP8 T=64 +3.7/+5.2/+3.9 % and
      # T=128 -1.9/-1.2/+0.5 % for the quarters; if the H200 reads T=128 faster in quarters, key the
      # grouped trait by width
      boost_ab abv71_grouped "$D/ab_v71_grouped" grouped \
        "--paths grouped_contiguous --scenarios ep8,ep16 --tokens 64,128 --dists uniform --projections down" \
        base=. v71=.ab/191deeb ;;
    ts8nchk)  # (ran 2026-12-07, H100: landed as v71) ts8n (.ab/ts8n, carried: main + ../2026-12-06_ts8n_cwg4_tail_pieces/ts8n.diff): the 4-warpgroup
      # tile loop's split tail in pieces of 8+ stages (v58's rule on the 512-row tiles only); the
      # tile-loop GPU tests of both families from its tree (the quarter-tail test among them), then
      # memcheck and racecheck on the grouped split-tail and 4-warpgroup cases (~3 min)
      tree_checks ts8n "tests/gpu/test_indexed_gpu.py tests/gpu/test_grouped_gpu.py" \
        "tile_loop or (prefill_blocks and (auto or wgmma))" "grouped:split tail" "grouped:4-warpgroup" ;;
    abts8n)  # (ran 2026-12-07, H100) ts8n against main, ncu ABBA at the clocks do_bench sees: the down points whose 4-warpgroup
      # last wave it cuts finer: indexed EP8 T=64/128 down, uniform and skewed (~2 min)
      if grep -Eq "^ts8n_(pytest|memcheck|racecheck) rc=[1-9]" "$D/status" 2>/dev/null; then st abts8n_skipped 1
      else
        boost_ab abts8n_indexed "$D/ab_ts8n_indexed" indexed \
          "--scenarios ep8 --tokens 64,128 --dists uniform,skew --projections down" base=. ts8n=.ab/ts8n
      fi ;;
    fcchk)  # the fast call (chord_kernels.jit.fast_call, indexed-kernels.md "Host overhead per call"):
      # its build against the device's torch (timed), its GPU tests, then main's whole GPU suite
      # (pytest-xdist, 4 workers), whose repeated calls run through it
      python3 -c "import time; t = time.perf_counter(); from chord_kernels.jit import fast_call; \
print(fast_call.module_path(), f'{time.perf_counter() - t:.1f} s')" > "$D/fc_build.log" 2>&1
      st fc_build $?; cat "$D/fc_build.log"
      timeout 200 python3 -m pytest -m gpu tests/gpu/test_fast_call_gpu.py -q -p no:cacheprovider \
        > "$D/fc_pytest.log" 2>&1
      st fc_pytest $?; tail -3 "$D/fc_pytest.log"
      timeout 360 python3 -m pytest -m gpu tests/gpu -n 4 -q -p no:cacheprovider > "$D/main_pytest.log" 2>&1
      st main_pytest $?; tail -3 "$D/main_pytest.log" ;;
    hostab)  # host overhead a call (benchmarks/host_overhead.py, main's script), the tree .ab/$HOST_BASE
      # (carried; its launcher copied in by install) against main, base main three times, each on one core
      for i in 1 2 3; do
        for side in base main; do
          if [[ $side == base ]]; then root=$PWD/.ab/${HOST_BASE:?HOST_BASE=<the base tree under .ab>}; else root=$PWD; fi
          PYTHONPATH="$root/packages/chord-runtime" CHORD_CSRC_DIR="$root/csrc" timeout 300 \
            $(command -v taskset > /dev/null && echo taskset -c 3) python3 -m benchmarks.host_overhead > "$D/host_${side}_$i.json" 2> "$D/host_${side}_$i.err"
          st "host_${side}_$i" $?
        done
      done
      for core in ${HOST_INPROC_CORES-3 5}; do  # the two paths in one process, alternating (a process's mode hits both;
        # the be6f133 launch paths: HOST_INPROC_CORES= skips it)
        PYTHONPATH=$PWD $(command -v taskset > /dev/null && echo taskset -c $core) timeout 200 python3 \
          benchmarks/results/sweeps/2026-12-06_h100_host_launch/inproc_ab.py > "$D/inproc_ab_$core.json" 2>&1
        st "inproc_ab_$core" $?; tail -6 "$D/inproc_ab_$core.json"
      done
      python3 - "$D" <<'PY' | tee "$D/hostab.txt"
import json, sys
runs = {f"{s}_{i}": json.load(open(f"{sys.argv[1]}/host_{s}_{i}.json"))["us_per_call"] for s in ("base", "main") for i in (1, 2, 3)}
names = list(runs["main_1"])
print("entry " + " ".join(runs), *(f"{n} " + " ".join(f"{r.get(n, float('nan')):.2f}" for r in runs.values()) for n in names), sep="\n")
PY
      ;;
    *) echo "unknown step $step (fcchk ab6970 chk69 chk70 dnstore dnsk paired tp8b16 ts8nchk abts8n mainchk v67once v67efw v68last hostab install grpgrid grpchk idxgrid midprof prefdn prefdn2 abbias wm4 turnschk abturns probe feed feedmid split stream)" >&2 ;;
  esac
done
tar czf "$OUT/plan.tgz" -C "$OUT" plan
