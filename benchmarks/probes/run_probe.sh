#!/usr/bin/env bash
# Build and run one probe on the GPU:
#   bash benchmarks/probes/run_probe.sh NAME [probe args]
#     mainloop       wgmma_mainloop.cu: the wgmma consumers' k loop alone (~1 min;
#                    args --stages N --reps R --all-sms-only --one-cta-only)
#     weight_stream  weight_stream.cu: the weight stream alone (~20 s; args --reps R)
# Writes to $PROBE_OUT (default $OUT/NAME_probe, or /tmp/NAME_probe without $OUT): ptxas.txt
# (registers, spills), gpu.txt (nvidia-smi clocks), NAME.jsonl, NAME.md (tables.py).
set -euo pipefail
name=${1:?usage: run_probe.sh mainloop|weight_stream [probe args]}
shift
case $name in
  mainloop) src=wgmma_mainloop ;;
  weight_stream) src=weight_stream ;;
  *) echo "run_probe.sh: no probe named $name (mainloop, weight_stream)" >&2; exit 2 ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${PROBE_OUT:-${OUT:-/tmp}/${name}_probe}
mkdir -p "$out"
nvcc=${CHORD_NVCC:-/usr/local/cuda/bin/nvcc}
"$nvcc" -O3 -std=c++17 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -I "$root/csrc" \
  -Xptxas -v "$here/$src.cu" -o "$out/$src" 2> "$out/ptxas.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.applications.graphics,clocks.mem,power.draw,power.limit \
  --format=csv > "$out/gpu.txt" 2>&1 || true
"$out/$src" "$@" > "$out/$name.jsonl"
python3 "$here/tables.py" "$out/$name.jsonl" > "$out/$name.md"
cat "$out/$name.md"
