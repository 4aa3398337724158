set -u
L=/tmp/r14; mkdir -p $L
save() { tar czf $OUT/r14.tgz -C /tmp r14; }
for p in chord-runtime humming-compat chord-pack; do python3 -m pip install -q --no-build-isolation --no-deps -e packages/$p > $L/install.log 2>&1; done
for d in .ab/*/; do cp packages/chord-runtime/chord_kernels/_launcher*.so $d/packages/chord-runtime/chord_kernels/; done
export CHORD_CACHE_DIR=/tmp/chord-jit PYTHONUNBUFFERED=1
C="PYTHONPATH=.ab/loop/packages/chord-runtime CHORD_CSRC_DIR=.ab/loop/csrc"
R=/tmp/rt
python3 -m benchmarks.make_routing --dir $R --scenarios ep8,ep16,ep32 --tokens 64,128 --dists uniform,skew > $L/routing.log 2>&1
GP="--scenarios ep8,ep16,ep32 --tokens 64,128 --dists uniform,skew"
IP="--scenarios ep8 --tokens 64,128 --dists uniform,skew"
for X in "" "$C"; do env $X python3 -m benchmarks.precompile_points --family grouped --routing-dir $R $GP -j 16 >> $L/precompile.log 2>&1 & env $X python3 -m benchmarks.precompile_points --family indexed --routing-dir $R $IP -j 8 >> $L/precompile.log 2>&1; wait; echo "pre $? $(date +%s)" >> $L/status; done
run_v() { fam=$1; label=$2; shift 2; if [ $fam = grouped ]; then pts="$GP"; else pts="$IP"; fi
  env $@ BENCH_NVTX=1 timeout 60 ncu --nvtx --nvtx-include "bench_point/" --clock-control base --metrics gpu__time_duration.sum --csv --print-units base --log-file $L/ncu_${fam}_$label.csv python3 -m benchmarks.bench_chord --family $fam --routing-dir $R $pts --warmup-ms 1 --rep-ms 1 --budget-s 300 --out $L/${fam}_$label.json > $L/bench_${fam}_$label.log 2>&1; echo "$fam $label $? $(date +%s)" >> $L/status; }
run_v grouped old; run_v grouped new $C; run_v grouped new2 $C; run_v grouped old2; save
run_v indexed old; run_v indexed new $C; run_v indexed new2 $C; run_v indexed old2; save
env $C timeout 100 python3 -m pytest -m gpu tests/gpu -q -p no:cacheprovider -x -k "grouped or wgmma" > $L/pytest_gpu.log 2>&1; echo "pytest $? $(date +%s)" >> $L/status; save
