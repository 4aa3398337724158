#!/usr/bin/env bash
# Build and run the wgmma k-loop probe (wgmma_mainloop.cu) on the GPU; ~1 minute.
#   bash benchmarks/probes/run_mainloop.sh [probe args: --stages N --reps R --all-sms-only --one-cta-only]
# Writes to $PROBE_OUT (default $OUT/mainloop_probe, or /tmp/mainloop_probe without $OUT):
# ptxas.txt (registers, spills), gpu.txt (nvidia-smi clocks), mainloop.jsonl, mainloop.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${PROBE_OUT:-${OUT:-/tmp}/mainloop_probe}
mkdir -p "$out"
nvcc=${CHORD_NVCC:-/usr/local/cuda/bin/nvcc}
"$nvcc" -O3 -std=c++17 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -I "$root/csrc" \
  -Xptxas -v "$here/wgmma_mainloop.cu" -o "$out/wgmma_mainloop" 2> "$out/ptxas.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.applications.graphics,power.draw,power.limit \
  --format=csv > "$out/gpu.txt" 2>&1 || true
"$out/wgmma_mainloop" "$@" > "$out/mainloop.jsonl"
python3 "$here/mainloop_table.py" "$out/mainloop.jsonl" > "$out/mainloop.md"
cat "$out/mainloop.md"
