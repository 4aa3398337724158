#!/usr/bin/env bash
# The device runs prepared on 2026-12-04 (no device was lent that session), as steps of at most
# one device call each (600 s). Results go to $OUT/plan (and $OUT/plan.tgz: the tool brings back
# only a few files). Before the call, on the CPU machine, from a clean main:
#
#   for c in c4 c4b; do bash benchmarks/ab_tree.sh HEAD $c --patch benchmarks/results/sweeps/2026-12-04_v45_one_tile_ring/$c.diff; done
#   bash benchmarks/ab_tree.sh HEAD v46 --patch benchmarks/results/sweeps/2026-12-04_v46_trailing_warpgroup/v46.diff
#
# then run with carry [".ab", ".whl"]:
#   call 1: bash benchmarks/results/sweeps/2026-12-04_device_plan/plan.sh install mainchk trace v46check   (~5 min)
#   call 2: bash benchmarks/results/sweeps/2026-12-04_device_plan/plan.sh install abidx            (~5 min)
#   call 3: bash benchmarks/results/sweeps/2026-12-04_device_plan/plan.sh install abgrp            (~5 min)
#   optional, if minutes remain after the grids: plan.sh install abidxskew                          (~4 min)
# (install is cheap on a warm machine; it also gives the trees this checkout's compiled launcher).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
OUT=${OUT:-.out}; D=$OUT/plan; mkdir -p "$D"
export CHORD_CACHE_DIR=${CHORD_CACHE_DIR:-/tmp/chord-jit} PYTHONUNBUFFERED=1
t0=$SECONDS
st() { echo "$1 rc=$2 t=$((SECONDS - t0))" | tee -a "$D/status"; }
tree_env() { echo "PYTHONPATH=.ab/$1/packages/chord-runtime CHORD_CSRC_DIR=.ab/$1/csrc"; }

for step in "$@"; do
  case $step in
    install)
      for p in chord-runtime humming-compat chord-pack; do
        python3 -m pip install -q --no-build-isolation --no-deps -e "packages/$p" >> "$D/install.log" 2>&1
      done
      for t in c4 c4b v46; do
        [[ -d .ab/$t ]] && cp packages/chord-runtime/chord_kernels/_launcher*.so ".ab/$t/packages/chord-runtime/chord_kernels/"
      done
      st install $? ;;
    trace)  # skewed EP8 T=20 gate_up, the 0.95x grouped call, and uniform for comparison (main's kernels)
      for dist in skew uniform; do
        OUT=$D bash benchmarks/cta_trace.sh ep8 20 gate_up $dist -- --family grouped --paths grouped_contiguous \
          > "$D/trace_$dist.txt" 2>&1
        st "trace_$dist" $?
        python3 -m benchmarks.cta_trace_report "$D/trace_ep8_gate_up_T20_$dist.json" > "$D/trace_report_$dist.txt" 2>&1
      done ;;
    mainchk)  # main's grouped GPU tests with every tile forced onto the wgmma stream-K schedule: the first
      # device run since the dispatch became a package (the fixture now patches dispatch.grouped)
      timeout 300 python3 -m pytest -m gpu tests/gpu/test_grouped_gpu.py -k wgmma_sk -q -p no:cacheprovider \
        > "$D/main_grouped_wgmma_sk.log" 2>&1
      st mainchk $?; tail -3 "$D/main_grouped_wgmma_sk.log" ;;
    v46check)  # the trailing warpgroup: GPU tests on the forced wgmma_sk family, then the sanitizers
      env $(tree_env v46) timeout 400 python3 -m pytest -m gpu tests/gpu/test_indexed_gpu.py -k wgmma_sk -q \
        -p no:cacheprovider > "$D/v46_pytest.log" 2>&1
      st v46_pytest $?; tail -3 "$D/v46_pytest.log"
      for tool in memcheck racecheck synccheck; do
        env $(tree_env v46) timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 \
          python3 scripts/gpu_sanitize_case.py wgmma_sk > "$D/v46_$tool.log" 2>&1
        st "v46_$tool" $?; tail -2 "$D/v46_$tool.log"
      done ;;
    abidx)  # indexed: c4 (EP8 T=8-32 and TP8 gate_up T=20-128) and v46 (TP8 T=2048/8192 down) against main
      AB_INSTALL=0 AB_TIMEOUT=120 bash benchmarks/ncu_ab.sh "$D/ab_indexed" indexed \
        "--scenarios ep8,tp8 --tokens 8,20,128,2048,8192 --dists uniform" base=. c4=.ab/c4 v46=.ab/v46
      st abidx $? ;;
    abidxskew)  # optional (time left after the grids): the skewed indexed points c4 and v46 touch (TP8 T=20 is 0.98x)
      AB_INSTALL=0 AB_TIMEOUT=120 bash benchmarks/ncu_ab.sh "$D/ab_indexed_skew" indexed \
        "--scenarios ep8,tp8 --tokens 20,128,2048 --dists skew" base=. c4=.ab/c4 v46=.ab/v46
      st abidxskew $? ;;
    abgrp)  # grouped offsets form: c4 and c4b (skewed EP8 T=20 on whole 8 x 128 tiles) against main
      AB_INSTALL=0 AB_TIMEOUT=120 bash benchmarks/ncu_ab.sh "$D/ab_grouped" grouped \
        "--paths grouped_contiguous --scenarios ep8,ep16,ep32 --tokens 1,8,20 --dists uniform,skew" \
        base=. c4=.ab/c4 c4b=.ab/c4b
      st abgrp $? ;;
    *) echo "unknown step $step (install mainchk trace v46check abidx abidxskew abgrp)" >&2; exit 2 ;;
  esac
done
tar czf "$OUT/plan.tgz" -C "$OUT" plan
