set -u
L=/tmp/r13; mkdir -p $L
save() { tar czf $OUT/r13.tgz -C /tmp r13; }
for p in chord-runtime humming-compat chord-pack; do python3 -m pip install -q --no-build-isolation --no-deps -e packages/$p > $L/install.log 2>&1; done
for d in .ab/*/; do cp packages/chord-runtime/chord_kernels/_launcher*.so $d/packages/chord-runtime/chord_kernels/; done
export CHORD_CACHE_DIR=/tmp/chord-jit PYTHONUNBUFFERED=1
A="PYTHONPATH=.ab/candA/packages/chord-runtime CHORD_CSRC_DIR=.ab/candA/csrc"
B="PYTHONPATH=.ab/candB/packages/chord-runtime CHORD_CSRC_DIR=.ab/candB/csrc"
R=/tmp/rt
python3 -m benchmarks.make_routing --dir $R --scenarios ep8,ep16,ep32 --tokens 64,128 --dists uniform,skew > $L/routing.log 2>&1
GP="--scenarios ep8,ep16,ep32 --tokens 64,128 --dists uniform,skew"
for X in "" "$A" "$B"; do env $X python3 -m benchmarks.precompile_points --family grouped --routing-dir $R $GP -j 16 >> $L/precompile.log 2>&1; echo "pre $? $(date +%s)" >> $L/status; done
run_v() { label=$1; shift; env $@ BENCH_NVTX=1 timeout 70 ncu --nvtx --nvtx-include "bench_point/" --clock-control base --metrics gpu__time_duration.sum --csv --print-units base --log-file $L/ncu_grouped_$label.csv python3 -m benchmarks.bench_chord --family grouped --routing-dir $R $GP --warmup-ms 1 --rep-ms 1 --budget-s 300 --out $L/grouped_$label.json > $L/bench_$label.log 2>&1; echo "ab $label $? $(date +%s)" >> $L/status; }
run_v old; run_v a $A; run_v b $B; save; run_v b2 $B; run_v a2 $A; run_v old2; save
