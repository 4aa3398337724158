set -u
L=/tmp/r10; mkdir -p $L
save() { tar czf $OUT/r10.tgz -C /tmp r10; }
for p in chord-runtime humming-compat chord-pack; do python3 -m pip install -q --no-build-isolation --no-deps -e packages/$p > $L/install.log 2>&1; done
for d in .ab/*/; do cp packages/chord-runtime/chord_kernels/_launcher*.so $d/packages/chord-runtime/chord_kernels/; done
export CHORD_CACHE_DIR=/tmp/chord-jit PYTHONUNBUFFERED=1
O="PYTHONPATH=.ab/db2a594/packages/chord-runtime CHORD_CSRC_DIR=.ab/db2a594/csrc"
C="PYTHONPATH=.ab/cand/packages/chord-runtime CHORD_CSRC_DIR=.ab/cand/csrc"
date +%s > $L/t0
R=/tmp/rt
python3 -m benchmarks.make_routing --dir $R --scenarios ep8,ep16,ep32 --tokens 64,128,2048 --dists uniform,skew > $L/routing.log 2>&1
GP="--paths grouped_masked --scenarios ep8,ep16,ep32 --tokens 128,2048 --dists uniform,skew"
python3 -m benchmarks.precompile_points --family grouped --routing-dir $R $GP -j 16 >> $L/precompile.log 2>&1
env $O python3 -m benchmarks.precompile_points --family grouped --routing-dir $R $GP -j 16 >> $L/precompile.log 2>&1
echo "pre $? $(date +%s)" >> $L/status
run_v() { label=$1; shift; env $@ BENCH_NVTX=1 timeout 100 ncu --nvtx --nvtx-include "bench_point/" --clock-control base --metrics gpu__time_duration.sum --csv --print-units base --log-file $L/ncu_grouped_$label.csv python3 -m benchmarks.bench_chord --family grouped --routing-dir $R $GP --warmup-ms 1 --rep-ms 1 --budget-s 300 --out $L/grouped_$label.json > $L/bench_$label.log 2>&1; echo "ab $label $? $(date +%s)" >> $L/status; }
run_v old $O; run_v new; run_v new2; run_v old2 $O; save
timeout 200 python3 -m pytest -m gpu tests -q -p no:cacheprovider -x > $L/pytest_gpu.log 2>&1; echo "pytest $? $(date +%s)" >> $L/status; save
for tool in memcheck racecheck; do timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 python3 scripts/gpu_sanitize_case.py grouped > $L/san_$tool.log 2>&1; echo "san $tool $? $(date +%s)" >> $L/status; done; save
GQ="--paths grouped_contiguous --scenarios ep16,ep32 --tokens 64,128 --dists uniform,skew"
for seed in 1 2; do python3 -m benchmarks.make_routing --dir /tmp/rs$seed --scenarios ep16,ep32 --tokens 64,128 --dists uniform,skew --seed $seed > $L/routing$seed.log 2>&1; done
python3 -m benchmarks.precompile_points --family grouped --routing-dir /tmp/rs1 $GQ -j 16 >> $L/precompile.log 2>&1
env $C python3 -m benchmarks.precompile_points --family grouped --routing-dir /tmp/rs1 $GQ -j 16 >> $L/precompile.log 2>&1
run_c() { seed=$1; label=$2; shift 2; mkdir -p $L/s$seed; env $@ BENCH_NVTX=1 timeout 60 ncu --nvtx --nvtx-include "bench_point/" --clock-control base --metrics gpu__time_duration.sum --csv --print-units base --log-file $L/s$seed/ncu_grouped_$label.csv python3 -m benchmarks.bench_chord --family grouped --routing-dir /tmp/rs$seed $GQ --warmup-ms 1 --rep-ms 1 --budget-s 100 --out $L/s$seed/grouped_$label.json > $L/s$seed/bench_$label.log 2>&1; echo "cand $seed $label $? $(date +%s)" >> $L/status; }
for seed in 1 2; do run_c $seed old; run_c $seed cand $C; run_c $seed cand2 $C; run_c $seed old2; save; done
