# Sourced from the repository root by the experiment scripts of benchmarks/results/sweeps/*/
# (run.sh) with OUT (their output folder) and TREES (the .ab/ trees they run, ab_tree.sh's labels)
# set: the folder, the GPU's name and clocks, Chord installed, its fast-call module copied into
# each tree (a tree holds sources only; the device builds the module at install), the JIT cache.
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt"
python3 -m pip install -q --no-build-isolation --no-deps -e packages/chord-runtime > "$OUT/install.log" 2>&1
for tree in ${TREES:-}; do
  cp packages/chord-runtime/chord_kernels/_launcher*.so ".ab/$tree/packages/chord-runtime/chord_kernels/" \
    2>> "$OUT/install.log"
done
export CHORD_CACHE_DIR=${CHORD_CACHE_DIR:-/tmp/chord-jit} PYTHONUNBUFFERED=1

# tree_env TREE: a sweep config's variables that load the tree's chord_kernels and csrc/.
tree_env() { echo "PYTHONPATH=.ab/$1/packages/chord-runtime:CHORD_CSRC_DIR=.ab/$1/csrc"; }

# tree_pytest TREE FILTER [VAR=value...]: the tree's own indexed GPU tests matching FILTER, on its
# chord_kernels and csrc/, with the variables given; the log to $OUT/pytest.log, the status to
# $OUT/status.
tree_pytest() {
  local tree=$1 filter=$2
  shift 2
  (cd ".ab/$tree" && env "$@" PYTHONPATH="$PWD/packages/chord-runtime" CHORD_CSRC_DIR="$PWD/csrc" \
    timeout 200 python3 -m pytest -m gpu tests/gpu/test_indexed_gpu.py -q -p no:cacheprovider -k "$filter" \
    > "$OUT/pytest.log" 2>&1)
  echo "pytest rc=$?" >> "$OUT/status"
  tail -3 "$OUT/pytest.log"
}

# sweep_step NAME LIMIT SWEEP_ARGS... -- CONFIG...: benchmarks/sweep.sh into $OUT/NAME (its log
# $OUT/NAME.log) within LIMIT seconds; the status to $OUT/status.
sweep_step() {
  local name=$1 limit=$2
  shift 2
  OUT=$OUT/$name SWEEP_BUDGET_S=${SWEEP_BUDGET_S:-40} timeout "$limit" bash benchmarks/sweep.sh "$@" \
    > "$OUT/$name.log" 2>&1
  echo "$name rc=$?" >> "$OUT/status"
}
